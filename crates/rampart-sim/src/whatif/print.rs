//! The what-if report: text for the terminal, JSON with every number, and one
//! self-contained HTML page (the default report's styles, no scripts, fonts or linked files)
//! with each policy file's configuration in the column of its results.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use rampart::config::PolicyConfig;
use serde_json::{Value, json};

use super::{WhatIf, diff};
use crate::SimError;
use crate::graph::run::build_policy;
use crate::graph::{EdgeOutcome, Outcome};
use crate::report::{Table, escape, page_head};
use crate::scenario::{ms, pct};

/// A headline number: its name, how to read it from an outcome, how to print a value and a
/// change.
struct Headline {
    name: &'static str,
    value: fn(&Outcome) -> f64,
    show: fn(f64) -> String,
    delta: fn(f64) -> String,
}

const HEADLINES: [Headline; 7] = [
    Headline {
        name: "answered in time",
        value: |o| o.answered_in_time,
        show: pct,
        delta: |d| format!("{:+.1} pts", d * 100.0),
    },
    Headline {
        name: "goodput (/s)",
        value: |o| o.goodput,
        show: |v| format!("{v:.1}"),
        delta: |d| format!("{d:+.1}"),
    },
    Headline {
        name: "edge p99 (ms)",
        value: |o| ms(o.latency[1]),
        show: |v| format!("{v:.0}"),
        delta: |d| format!("{d:+.0}"),
    },
    Headline {
        name: "leaf requests per root",
        value: Outcome::leaf_per_root,
        show: |v| format!("{v:.2}"),
        delta: |d| format!("{d:+.2}"),
    },
    Headline {
        name: "work for callers gone",
        value: Outcome::wasted_share,
        show: pct,
        delta: |d| format!("{:+.1} pts", d * 100.0),
    },
    Headline {
        name: "refused by breakers",
        value: |o| o.total(|e| e.breaker_refused) as f64,
        show: |v| format!("{v:.0}"),
        delta: |d| format!("{d:+.0}"),
    },
    Headline {
        name: "refused by budgets",
        value: |o| o.total(|e| e.budget_refused) as f64,
        show: |v| format!("{v:.0}"),
        delta: |d| format!("{d:+.0}"),
    },
];

/// The report as text.
pub fn text(w: &WhatIf) -> String {
    let mut out = String::new();
    let g = &w.graph;
    let _ = writeln!(
        out,
        "what-if: scenario {}{}, seed {} (the same traffic, faults and draws for every run)",
        g.scenario,
        g.summary
            .as_ref()
            .map_or(String::new(), |s| format!(" ({s})")),
        w.seed
    );
    for line in g.describe() {
        let _ = writeln!(out, "  {line}");
    }
    out.push('\n');
    for (letter, file) in ["A", "B"].iter().zip(&w.files) {
        let _ = writeln!(
            out,
            "{letter} = {}: each policy the graph calls through, as resolved",
            file.path.display()
        );
        for (name, config) in &file.resolved {
            let explain =
                build_policy(config, name).map_or_else(|e| e.to_string(), |p| p.explain());
            let _ = writeln!(out, "  {explain}");
            let _ = writeln!(out, "    {name} = {}", diff::resolved(config));
        }
        if w.graph.traffic.policy.is_none() {
            let _ = writeln!(
                out,
                "  (the edge calls {} with one attempt under the root's deadline)",
                g.services[g.entry].config.name
            );
        }
        for note in &file.notes {
            let _ = writeln!(out, "  note: {note}");
        }
    }
    out.push('\n');
    out.push_str(&results(w).text());
    out.push('\n');
    out.push_str(&activity(w).text());
    out.push('\n');
    out.push_str(&attribution(w).text());
    out.push('\n');
    out.push_str(TERMS);
    out.push('\n');
    out
}

/// What the numbers mean, under every form of the report.
const TERMS: &str = "answered in time: measured roots answered Ok before the edge's deadline. goodput: those per second of the measured window. \
edge p50/p99/p99.9: latency of the roots answered in time. requests per root: requests (every attempt and hedge) reaching the service per measured root. \
work for callers gone: worker time spent on requests whose root's caller had stopped waiting when it finished, over all worker time (measured roots). \
client activity counts the whole run, warm-up included. One seed: run a few (--seed) before trusting a small difference.";

/// The report as one HTML page: the graph, then each file's configuration in the column of
/// its results (A, B, B - A), each client's activity, the attribution, and what the numbers
/// mean. `graph_file` names the graph in the heading.
pub fn html(w: &WhatIf, graph_file: &str) -> String {
    let g = &w.graph;
    let mut out = page_head(&format!("rampart-sim what-if: {graph_file}"));
    let _ = writeln!(
        out,
        "<style>td.config {{ text-align: left; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 0.85em; vertical-align: top; }}</style>"
    );
    let _ = writeln!(
        out,
        "<h1>rampart-sim what-if</h1>\n<p class=\"meta\">graph {} &middot; scenario {}{} &middot; seed {} (the same traffic, faults and draws for every run) &middot; virtual time (tokio's paused clock, 1 ms timer resolution)</p>",
        escape(graph_file),
        escape(&g.scenario),
        g.summary
            .as_ref()
            .map_or(String::new(), |s| format!(" ({})", escape(s))),
        w.seed
    );
    out.push_str("<section><h2>The graph</h2>\n<ul>");
    for line in g.describe() {
        let _ = write!(out, "<li>{}</li>", escape(&line));
    }
    out.push_str("</ul></section>\n");

    out.push_str("<section><h2>The two policy files, side by side</h2>\n");
    out.push_str("<p>Each policy the graph calls through, as resolved (its own keys over the file's <code>[defaults]</code>), above the results of the run under it.</p>\n");
    let _ = write!(
        out,
        "<table>\n<caption>configuration and results</caption>\n<tr><th></th><th>{}</th><th>{}</th><th>B - A</th></tr>\n",
        escape(&label(w, 0)),
        escape(&label(w, 1))
    );
    let _ = writeln!(
        out,
        "<tr><td>file</td><td class=\"config\">{}</td><td class=\"config\">{}</td><td></td></tr>",
        escape(&w.files[0].path.display().to_string()),
        escape(&w.files[1].path.display().to_string())
    );
    for name in g.policies() {
        let cell = |i: usize| {
            w.files[i].resolved.get(name).map_or_else(
                || "(not in the file)".to_owned(),
                |config| {
                    let explain =
                        build_policy(config, name).map_or_else(|e| e.to_string(), |p| p.explain());
                    format!(
                        "{}<br>{} = {}",
                        escape(&explain),
                        escape(name),
                        escape(&diff::resolved(config))
                    )
                },
            )
        };
        let _ = writeln!(
            out,
            "<tr><td>policy {}</td><td class=\"config\">{}</td><td class=\"config\">{}</td><td></td></tr>",
            escape(name),
            cell(0),
            cell(1)
        );
    }
    if g.traffic.policy.is_none() {
        let _ = writeln!(
            out,
            "<tr><td>the edge</td><td class=\"config\" colspan=\"2\">calls {} with one attempt under the root's deadline</td><td></td></tr>",
            escape(g.services[g.entry].config.name)
        );
    }
    let notes = |i: usize| {
        let notes: &[String] = &w.files[i].notes;
        notes
            .iter()
            .map(|n| escape(n))
            .collect::<Vec<_>>()
            .join("<br>")
    };
    if w.files.iter().any(|f| !f.notes.is_empty()) {
        let _ = writeln!(
            out,
            "<tr><td>notes</td><td class=\"config\">{}</td><td class=\"config\">{}</td><td></td></tr>",
            notes(0),
            notes(1)
        );
    }
    for row in &results(w).rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{}</td>", escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n</section>\n");

    out.push_str("<section><h2>Client activity</h2>\n");
    out.push_str(&activity(w).html());
    out.push_str("</section>\n<section><h2>Which setting moved which number</h2>\n");
    out.push_str("<p>A with one setting changed to B's value, each alone; the change from A. Effects need not add up: the last rows give the sum of the single changes beside the whole of B.</p>\n");
    out.push_str(&attribution(w).html());
    let _ = write!(
        out,
        "</section>\n<p class=\"note\">{}</p>\n</body>\n</html>\n",
        escape(TERMS)
    );
    out
}

fn label(w: &WhatIf, i: usize) -> String {
    format!("{} {}", ["A", "B"][i], w.files[i].label())
}

fn results(w: &WhatIf) -> Table {
    let [a, b] = &w.outcomes;
    let mut table = Table::new(
        "results, measured roots",
        &["", &label(w, 0), &label(w, 1), "B - A"],
    );
    let mut row =
        |name: String, va: f64, vb: f64, show: fn(f64) -> String, delta: fn(f64) -> String| {
            table.row(vec![name, show(va), show(vb), delta(vb - va)]);
        };
    let count = |v: f64| format!("{v:.0}");
    let signed = |d: f64| format!("{d:+.0}");
    row(
        "measured roots".into(),
        a.roots as f64,
        b.roots as f64,
        count,
        signed,
    );
    for h in &HEADLINES[..2] {
        row(h.name.into(), (h.value)(a), (h.value)(b), h.show, h.delta);
    }
    for (i, q) in ["p50", "p99", "p99.9"].iter().enumerate() {
        let (va, vb) = (ms(a.latency[i]), ms(b.latency[i]));
        row(
            format!("edge {q} (ms)"),
            va,
            vb,
            |v| format!("{v:.1}"),
            |d| format!("{d:+.1}"),
        );
    }
    let mut order: Vec<usize> = (0..a.services.len()).collect();
    order.sort_by_key(|&i| (a.services[i].tier, a.services[i].name.clone()));
    let per = |v: f64| format!("{v:.2}");
    let per_delta = |d: f64| format!("{d:+.2}");
    for &i in &order {
        let (sa, sb) = (&a.services[i], &b.services[i]);
        row(
            format!("requests per root, tier {} {}", sa.tier, sa.name),
            sa.per_root,
            sb.per_root,
            per,
            per_delta,
        );
    }
    let total = |o: &Outcome, f: fn(&crate::graph::ServiceOutcome) -> u64| {
        o.services.iter().map(f).sum::<u64>() as f64
    };
    row(
        "shed by services".into(),
        total(a, |s| s.shed),
        total(b, |s| s.shed),
        count,
        signed,
    );
    row(
        "refused for their deadline".into(),
        total(a, |s| s.expired),
        total(b, |s| s.expired),
        count,
        signed,
    );
    let h = &HEADLINES[4];
    row(h.name.into(), (h.value)(a), (h.value)(b), h.show, h.delta);
    let secs = |o: &Outcome| o.work().1.as_secs_f64();
    row(
        "  of it, worker seconds".into(),
        secs(a),
        secs(b),
        |v| format!("{v:.1}"),
        |d| format!("{d:+.1}"),
    );
    table
}

fn activity(w: &WhatIf) -> Table {
    let [a, b] = &w.outcomes;
    let mut table = Table::new(
        "client activity by call, whole run (A / B)",
        &[
            "call",
            "policy",
            "calls",
            "retries",
            "breaker opened",
            "refused by breaker",
            "refused by budget",
            "hedges",
        ],
    );
    let pair = |ea: &EdgeOutcome, eb: &EdgeOutcome, f: fn(&EdgeOutcome) -> u64| {
        format!("{} / {}", f(ea), f(eb))
    };
    for (ea, eb) in a.edges.iter().zip(&b.edges) {
        table.row(vec![
            ea.label.clone(),
            ea.policy.clone(),
            pair(ea, eb, |e| e.calls),
            pair(ea, eb, |e| e.retries),
            pair(ea, eb, |e| e.breaker_opens),
            pair(ea, eb, |e| e.breaker_refused),
            pair(ea, eb, |e| e.budget_refused),
            pair(ea, eb, |e| e.hedges),
        ]);
    }
    table
}

fn attribution(w: &WhatIf) -> Table {
    let [a, b] = &w.outcomes;
    let mut columns = vec!["setting", "A → B"];
    columns.extend(HEADLINES.iter().map(|h| h.name));
    let mut table = Table::new(
        "which setting moved which number: A with one setting changed to B's value, change from A",
        &columns,
    );
    if w.attribution.is_empty() {
        table.row(
            std::iter::once("(the files resolve alike for this graph)".to_owned())
                .chain(std::iter::repeat_n(String::new(), columns.len() - 1))
                .collect(),
        );
        return table;
    }
    let mut sums = [0.0; HEADLINES.len()];
    for attributed in &w.attribution {
        let c = &attributed.change;
        let mut row = vec![c.path.clone(), format!("{} → {}", c.from, c.to)];
        for (i, h) in HEADLINES.iter().enumerate() {
            let d = (h.value)(&attributed.outcome) - (h.value)(a);
            sums[i] += d;
            row.push((h.delta)(d));
        }
        table.row(row);
    }
    let mut sum = vec!["sum of the single changes".to_owned(), String::new()];
    sum.extend(HEADLINES.iter().zip(sums).map(|(h, d)| (h.delta)(d)));
    table.row(sum);
    let mut all = vec!["B (every change at once)".to_owned(), String::new()];
    all.extend(
        HEADLINES
            .iter()
            .map(|h| (h.delta)((h.value)(b) - (h.value)(a))),
    );
    table.row(all);
    table
}

/// One run's numbers, as JSON (each file's `outcome`; `validate` writes its predictions so).
pub(crate) fn outcome_json(o: &Outcome) -> Value {
    json!({
        "measured_roots": o.roots,
        "answered_in_time": o.answered_in_time,
        "goodput_per_s": o.goodput,
        "edge_latency_ms": { "p50": ms(o.latency[0]), "p99": ms(o.latency[1]), "p99_9": ms(o.latency[2]) },
        "work_for_callers_gone_share": o.wasted_share(),
        "leaf_requests_per_root": o.leaf_per_root(),
        "services": o.services.iter().map(|s| json!({
            "name": s.name,
            "tier": s.tier,
            "requests_per_root": s.per_root,
            "shed": s.shed,
            "refused_for_deadline": s.expired,
            "work_s": s.work.as_secs_f64(),
            "work_for_callers_gone_s": s.wasted.as_secs_f64(),
        })).collect::<Vec<_>>(),
        "clients": o.edges.iter().map(|e| json!({
            "call": e.path,
            "label": e.label,
            "policy": e.policy,
            "explain": e.explain,
            "calls": e.calls,
            "attempts": e.attempts,
            "retries": e.retries,
            "breaker_opened": e.breaker_opens,
            "refused_by_breaker": e.breaker_refused,
            "refused_by_budget": e.budget_refused,
            "hedges": e.hedges,
        })).collect::<Vec<_>>(),
    })
}

/// Each policy a file resolves, by name: what it does in words (`explain`) and its resolved
/// configuration (`resolved`).
pub(crate) fn policies_json(resolved: &BTreeMap<String, PolicyConfig>) -> Value {
    let policies: serde_json::Map<String, Value> = resolved
        .iter()
        .map(|(name, config)| {
            let explain =
                build_policy(config, name).map_or_else(|e| e.to_string(), |p| p.explain());
            let resolved = serde_json::to_value(config).unwrap_or(Value::Null);
            (
                name.clone(),
                json!({ "explain": explain, "resolved": resolved }),
            )
        })
        .collect();
    Value::Object(policies)
}

/// Writes `json` to `path`, pretty-printed, with a final newline.
///
/// # Errors
///
/// The file cannot be written (or the JSON cannot be formatted).
pub(crate) fn write_json(path: &Path, json: &Value) -> Result<(), SimError> {
    let cannot =
        |e: &dyn std::fmt::Display| SimError::new(format!("cannot write {}: {e}", path.display()));
    let text = serde_json::to_string_pretty(json).map_err(|e| cannot(&e))?;
    std::fs::write(path, text + "\n").map_err(|e| cannot(&e))
}

/// Every number, as JSON.
pub fn json(w: &WhatIf) -> Value {
    let files: Vec<Value> = w
        .files
        .iter()
        .zip(&w.outcomes)
        .map(|(file, outcome)| {
            json!({
                "path": file.path.display().to_string(),
                "policies": policies_json(&file.resolved),
                "notes": file.notes,
                "outcome": outcome_json(outcome),
            })
        })
        .collect();
    let attribution: Vec<Value> = w
        .attribution
        .iter()
        .map(|a| {
            json!({
                "setting": a.change.path,
                "from": a.change.from,
                "to": a.change.to,
                "outcome": outcome_json(&a.outcome),
            })
        })
        .collect();
    json!({
        "scenario": w.graph.scenario,
        "seed": w.seed,
        "graph": w.graph.describe(),
        "files": files,
        "attribution": attribution,
    })
}
