//! Writing an imported graph as a graph file: TOML a person reads and edits, each number with
//! the comment that says where it came from, each key the traces could not give marked
//! `not inferred`.

use std::fmt::Write as _;
use std::time::Duration;

use rampart::config::format_duration;

use super::stats::BUCKET_ENDS;
use super::{Histogram, ImportedCall, ImportedGraph, ImportedService};
use crate::graph::file::Mode;

/// Used when the traces give no rate (fewer than two roots, or all at once).
const FALLBACK_RATE: &str = "{ kind = \"steady\", rate = 10, for = \"10s\" }";

pub(super) fn toml(g: &ImportedGraph) -> String {
    let mut out = String::new();
    let t = &g.traffic;
    let _ = writeln!(
        out,
        "# A call graph imported from OpenTelemetry spans by rampart-sim's importer\n\
         # (rampart_sim::import): {} spans in {} traces, {} root requests over {}.\n\
         #\n\
         # A plain key is what the traces showed, its comment how. A key marked \"not inferred\"\n\
         # is a default the traces could not support: check it before trusting a what-if. Each\n\
         # call's policy is named after its callee: the policy files given to what-if must\n\
         # define every one of them ([policies.NAME]).",
        g.spans,
        g.traces,
        t.roots,
        secs(t.window)
    );
    if !g.notes.is_empty() {
        out.push_str("#\n# Left out:\n");
        for note in &g.notes {
            let _ = writeln!(out, "#   - {}", one_line(note));
        }
    }
    let _ = writeln!(
        out,
        "\n# The service the roots reach.\nentry = {}",
        string(&g.entry)
    );
    for s in by_depth(g) {
        service(&mut out, s);
    }
    traffic(&mut out, g);
    out
}

/// The services from the entry down, each after every service that calls it when it can be
/// (callers first, then by name).
fn by_depth(g: &ImportedGraph) -> Vec<&ImportedService> {
    let mut order: Vec<&ImportedService> = Vec::new();
    let mut frontier: Vec<&str> = vec![g.entry.as_str()];
    while !frontier.is_empty() {
        let mut next: Vec<&str> = Vec::new();
        for name in frontier {
            if let Some(s) = g.service(name)
                && !order.iter().any(|o| o.name == s.name)
            {
                order.push(s);
                next.extend(s.calls.iter().map(|c| c.to.as_str()));
            }
        }
        next.sort_unstable();
        next.dedup();
        frontier = next;
    }
    for s in &g.services {
        if !order.iter().any(|o| o.name == s.name) {
            order.push(s);
        }
    }
    order
}

fn service(out: &mut String, s: &ImportedService) {
    let name = key(&s.name);
    let l = &s.latency;
    let _ = writeln!(
        out,
        "\n# {} requests (SERVER spans), answered in p50 {}, p99 {}, at most {}.\n\
         [services.{name}]\n\
         workers = {}  # the most requests seen at once: a lower bound if it never queued\n\
         queue = 0  # not inferred: a queue leaves no span\n\
         admission = \"fifo\"  # not inferred: \"criticality\" if it runs rampart's CriticalityLimit\n\
         inbound = false  # not inferred: true if it reads X-Deadline-Ms (rampart-http's InboundLayer)\n\
         error_rate = {}  # {} of its requests failed with no failed call: its own failures",
        s.requests,
        ms(l.p50_p99_max[0]),
        ms(l.p50_p99_max[1]),
        ms(l.p50_p99_max[2]),
        s.workers,
        number(s.error_rate),
        s.own_errors,
    );
    if s.own_timeouts > 0 {
        let _ = writeln!(
            out,
            "hang_rate = {}  # {} ran out of time with no failed call (504): a request that hangs until\n\
             # its deadline, answered 504 there with inbound and enforce = true (as a server that cut\n\
             # it did), or else cut by its caller at the caller's own ceiling",
            number(s.hang_rate),
            s.own_timeouts,
        );
    } else {
        out.push_str(
            "# hang_rate: none seen (a request that hangs shows as a 504 at its deadline where its\n\
             # server cuts it; a request that never answers at all leaves no span)\n",
        );
    }
    if !s.calls.is_empty() {
        out.push_str("calls = [\n");
        for c in &s.calls {
            call(out, c);
        }
        out.push_str("]\n");
    }
    let Some((answered, failed)) = &s.split else {
        let _ = writeln!(
            out,
            "\n# Its own time: each request less the time it spent in calls, {} requests by\n\
             # quantile, [latency (the bucket's mean), requests].\n\
             [services.{name}.service_time]\n\
             histogram = [",
            s.own_time.samples
        );
        histogram(out, &s.own_time);
        out.push_str("]\n");
        return;
    };
    let _ = writeln!(
        out,
        "\n# Its own time: each request that did not fail on its own, less the time it spent in\n\
         # calls, {} requests by quantile, [latency (the bucket's mean), requests].\n\
         [services.{name}.service_time]\n\
         histogram = [",
        answered.samples
    );
    histogram(out, answered);
    out.push_str("]\n");
    let Some(failed) = failed else {
        return;
    };
    let _ = writeln!(
        out,
        "\n# The time its own failures took before failing (p50 {}, p99 {}), {} requests by\n\
         # quantile: drawn for a request that fails on its own.\n\
         [services.{name}.error_time]\n\
         histogram = [",
        ms(failed.p50_p99_max[0]),
        ms(failed.p50_p99_max[1]),
        failed.samples
    );
    histogram(out, failed);
    out.push_str("]\n");
}

fn call(out: &mut String, c: &ImportedCall) {
    let mode = match c.mode {
        None => "never more than one in a request".to_owned(),
        Some(Mode::Parallel) => format!(
            "at once in {} of {} requests with several",
            c.overlapped, c.several
        ),
        Some(Mode::Sequence) => format!(
            "in turn in {} of {} requests with several",
            c.several - c.overlapped,
            c.several
        ),
    };
    let statuses: Vec<String> = c
        .by_status
        .iter()
        .map(|(s, n)| format!("{s}: {n}"))
        .collect();
    let l = &c.latency;
    let _ = writeln!(
        out,
        "  # {to}: {per} per request ({calls} calls and {retries} retries from {callers} of {parents}\n  \
         #   requests), {mode}{after};\n  \
         #   at most {most} in flight (mean {mean}); {errors} errors ({statuses});\n  \
         #   answers in p50 {p50}, p99 {p99}, at most {max}. Policy: define [policies.{policy}].",
        to = one_line(&c.to),
        per = number(c.per_parent),
        calls = c.calls,
        retries = c.retries,
        callers = c.callers,
        parents = c.parents,
        after = if c.with_previous {
            "; starts while the entry before is in flight"
        } else {
            ""
        },
        most = c.most_at_once,
        mean = number(c.mean_at_once),
        errors = percent(c.error_rate),
        statuses = one_line(&statuses.join(", ")),
        p50 = ms(l.p50_p99_max[0]),
        p99 = ms(l.p50_p99_max[1]),
        max = ms(l.p50_p99_max[2]),
        policy = key(&c.to),
    );
    let mut entry = format!("  {{ to = {0}, policy = {0}", string(&c.to));
    if c.count != 1 {
        let _ = write!(entry, ", count = {}", c.count);
    }
    if c.share < 1.0 {
        let _ = write!(entry, ", share = {}", c.share);
    }
    match c.mode {
        Some(Mode::Parallel) if c.count > 1 => entry.push_str(", mode = \"parallel\""),
        Some(Mode::Sequence) if c.count > 1 => entry.push_str(", mode = \"sequence\""),
        _ => {}
    }
    if c.with_previous {
        entry.push_str(", with_previous = true");
    }
    if c.wire
        .buckets
        .iter()
        .any(|&(latency, _)| !latency.is_zero())
    {
        let w = &c.wire;
        let _ = writeln!(
            out,
            "  #   outside {to} (the wire both ways, the client's stack): p50 {p50}, p99 {p99},\n  \
             #   {n} calls by quantile, [time (the bucket's mean), calls].",
            to = one_line(&c.to),
            p50 = ms(w.p50_p99_max[0]),
            p99 = ms(w.p50_p99_max[1]),
            n = w.samples,
        );
        let pairs: Vec<String> = w
            .buckets
            .iter()
            .map(|&(latency, count)| format!("[\"{}\", {count}]", format_duration(latency)))
            .collect();
        let _ = write!(entry, ", wire = {{ histogram = [{}] }}", pairs.join(", "));
    }
    let _ = writeln!(out, "{entry} }},");
}

fn histogram(out: &mut String, h: &Histogram) {
    if h.buckets.is_empty() {
        out.push_str("  [\"0ns\", 1],  # not inferred: no request\n");
        return;
    }
    let mut seen = 0;
    for &(latency, count) in &h.buckets {
        seen += count;
        // A bucket ends at the rank of its quantile, as `Histogram::of` cuts them: the
        // first quantile whose rank reaches what has been seen.
        let quantile = BUCKET_ENDS
            .iter()
            .find(|&&q| (q * h.samples as f64).ceil() >= seen as f64)
            .copied()
            .unwrap_or(1.0);
        let upto = if quantile >= 1.0 {
            "the slowest".to_owned()
        } else {
            format!("p{}", number(quantile * 100.0))
        };
        let _ = writeln!(
            out,
            "  [\"{}\", {count}],  # to {upto}",
            format_duration(latency)
        );
    }
}

fn traffic(out: &mut String, g: &ImportedGraph) {
    let t = &g.traffic;
    let slowest = t.latency.p50_p99_max[2];
    let deadline = Duration::from_millis(
        (slowest.as_millis().saturating_mul(2) as u64)
            .div_ceil(100)
            .max(1)
            .saturating_mul(100),
    );
    let _ = writeln!(
        out,
        "\n# The roots: {} requests to {}, answered in p50 {}, p99 {}, at most {}.\n\
         [traffic]\n\
         deadline = \"{}\"  # not inferred: traces do not carry the edge's deadline; twice the slowest root\n\
         # mix: not inferred (the traces give no criticality): every root critical\n\
         segments = [",
        t.roots,
        one_line(&g.entry),
        ms(t.latency.p50_p99_max[0]),
        ms(t.latency.p50_p99_max[1]),
        ms(slowest),
        format_duration(deadline),
    );
    if t.segments.is_empty() {
        let _ = writeln!(
            out,
            "  {FALLBACK_RATE},  # not inferred: fewer than two roots, or all at once"
        );
    }
    for &(lasts, rate) in &t.segments {
        let lasts = Duration::from_millis((lasts.as_millis() as u64).max(1));
        let _ = writeln!(
            out,
            "  {{ kind = \"steady\", rate = {}, for = \"{}\" }},",
            number(rate),
            format_duration(lasts)
        );
    }
    out.push_str("]\n");
}

/// A duration for a comment, in milliseconds.
fn ms(d: Duration) -> String {
    format!("{} ms", number(d.as_secs_f64() * 1e3))
}

fn secs(d: Duration) -> String {
    format!("{} s", number(d.as_secs_f64()))
}

fn percent(share: f64) -> String {
    format!("{}%", number(share * 100.0))
}

/// A finite number with three significant digits (more for large whole numbers), as TOML
/// reads it.
fn number(x: f64) -> String {
    if !x.is_finite() || x == 0.0 {
        return "0".to_owned();
    }
    let digits = (2 - x.abs().log10().floor() as i32).clamp(0, 12) as usize;
    let text = format!("{x:.digits$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// A TOML key: bare when it can be, quoted otherwise.
fn key(name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare { name.to_owned() } else { string(name) }
}

/// A TOML basic string.
fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Text for a comment: one line, no control characters.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_three_significant_digits() {
        assert_eq!(number(150.0), "150");
        assert_eq!(number(0.0125), "0.0125");
        assert_eq!(number(2.0 / 3.0), "0.667");
        assert_eq!(number(123_456.7), "123457");
        assert_eq!(number(f64::NAN), "0");
    }

    #[test]
    fn each_bucket_is_labelled_with_the_quantile_it_ends_at() {
        // 1,997 requests: the first decile ends at rank 200, a share just over a tenth.
        let h = Histogram {
            buckets: vec![
                (Duration::from_millis(2), 200),
                (Duration::from_millis(3), 1_778),
                (Duration::from_millis(9), 19),
            ],
            samples: 1_997,
            p50_p99_max: [Duration::ZERO; 3],
        };
        let mut out = String::new();
        histogram(&mut out, &h);
        let labels: Vec<&str> = out.lines().filter_map(|l| l.split("# ").nth(1)).collect();
        assert_eq!(labels, ["to p10", "to p99", "to the slowest"]);
    }

    #[test]
    fn names_that_are_not_bare_keys_are_quoted_and_escaped() {
        assert_eq!(key("cart-v2"), "cart-v2");
        assert_eq!(key("my svc"), "\"my svc\"");
        assert_eq!(string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000A\"");
        assert_eq!(key(""), "\"\"");
    }
}
