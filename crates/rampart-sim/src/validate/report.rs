//! The validation's report: its tables, and the text, HTML and JSON made from them.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{Value, json};

use crate::SimError;
use crate::report::{Table, escape, page_head};
use crate::scenario::{ms, pct};

use super::phases::{PARTS, Phases};
use super::*;

/// [`Row::phases`] as JSON: predicted and measured, each its roots and the mean of each part
/// in milliseconds (`null` where no such root answered).
fn phases_json(phases: [Option<Phases>; 2]) -> Value {
    let side = |x: Option<Phases>| {
        x.map_or(Value::Null, |x| {
            let parts: serde_json::Map<String, Value> = PARTS
                .iter()
                .zip(x.means)
                .map(|(part, mean)| ((*part).to_owned(), Value::from(mean)))
                .collect();
            json!({ "roots": x.roots, "mean_ms": parts })
        })
    };
    json!({ "predicted": side(phases[0]), "measured": side(phases[1]) })
}

fn signed_pts(d: f64) -> String {
    format!("{:+.1} pts", d * 100.0)
}

fn signed_ms(d: f64) -> String {
    format!("{d:+.1}")
}

fn signed(d: f64) -> String {
    format!("{d:+.3}")
}

/// The columns of both tables: `first`, then each number predicted, measured and the error.
fn columns(first: &'static str) -> [&'static str; 10] {
    [
        first,
        "in time: predicted",
        "measured",
        "error",
        "p99 ms: predicted",
        "measured",
        "error",
        "leaf/root: predicted",
        "measured",
        "error",
    ]
}

impl Validation {
    /// The tables: predicted against measured per policy file; each change's effect on the
    /// baseline, predicted against measured; and where the time of the roots whose leaf call
    /// was sent twice went, predicted against measured ([`phases`]).
    pub fn tables(&self) -> [Table; 3] {
        let mut side = Table::new(
            format!(
                "predicted (what-if on the imported graph) against measured (the real chain), {} roots per real run at {RATE:.0}/s, seed {}; error = predicted − measured",
                self.roots, self.seed
            ),
            &columns("policy file"),
        );
        for row in &self.rows {
            let (p, m) = (row.predicted, row.measured);
            side.row(vec![
                row.file.to_owned(),
                pct(p.in_time),
                pct(m.in_time),
                signed_pts(p.in_time - m.in_time),
                format!("{:.1}", ms(p.p99)),
                format!("{:.1}", ms(m.p99)),
                signed_ms(ms(p.p99) - ms(m.p99)),
                format!("{:.3}", p.leaf_per_root),
                format!("{:.3}", m.leaf_per_root),
                signed(p.leaf_per_root - m.leaf_per_root),
            ]);
        }
        let mut effect = Table::new(
            "each change's effect on the baseline (change − baseline): predicted against measured; error = predicted − measured",
            &columns("change"),
        );
        if let Some((base, changes)) = self.rows.split_first() {
            for row in changes {
                let d = |n: fn(&Numbers) -> f64| {
                    let p = n(&row.predicted) - n(&base.predicted);
                    let m = n(&row.measured) - n(&base.measured);
                    (p, m, p - m)
                };
                let (a, b, c) = (d(|n| n.in_time), d(|n| ms(n.p99)), d(|n| n.leaf_per_root));
                effect.row(vec![
                    row.name.to_owned(),
                    signed_pts(a.0),
                    signed_pts(a.1),
                    signed_pts(a.2),
                    signed_ms(b.0),
                    signed_ms(b.1),
                    signed_ms(b.2),
                    signed(c.0),
                    signed(c.1),
                    signed(c.2),
                ]);
            }
        }
        [side, effect, self.phases_table()]
    }

    /// Where the time of the roots whose middle sent the leaf a second attempt went, for each
    /// file where such roots answered on either side: the slow roots a change rescues, and so
    /// what its p99 is made of.
    fn phases_table(&self) -> Table {
        let mut table = Table::new(
            "roots whose middle sent the leaf a second attempt (a retry or a hedge): where their time went, mean ms; predicted (the imported graph simulated and traced under the file, same seed) against measured (the real run's spans); error = predicted − measured",
            &["policy file", "part", "predicted", "measured", "error"],
        );
        for row in &self.rows {
            let [p, m] = row.phases;
            if p.is_none() && m.is_none() {
                continue;
            }
            let count = |x: Option<Phases>| x.map_or(0, |x| x.roots).to_string();
            table.row(vec![
                row.file.to_owned(),
                "roots".to_owned(),
                count(p),
                count(m),
                String::new(),
            ]);
            for (i, part) in PARTS.iter().enumerate() {
                let mean = |x: Option<Phases>| x.map(|x| x.means[i]);
                let shown = |v: Option<f64>| v.map_or("–".to_owned(), |v| format!("{v:.2}"));
                let error = match (mean(p), mean(m)) {
                    (Some(a), Some(b)) => format!("{:+.2}", a - b),
                    _ => "–".to_owned(),
                };
                table.row(vec![
                    String::new(),
                    (*part).to_owned(),
                    shown(mean(p)),
                    shown(mean(m)),
                    error,
                ]);
            }
        }
        table
    }

    /// The report as text: what was imported, the policy files' configurations, the tables.
    pub fn text(&self) -> String {
        let mut out = self.preamble();
        out.push('\n');
        for table in self.tables() {
            out.push_str(&table.text());
            out.push('\n');
        }
        out.push_str(&self.closing());
        out
    }

    /// The report as one self-contained HTML page (the default report's styles; no scripts,
    /// fonts or linked files): what was imported and the policy files as the text says them,
    /// then the two tables, then the closing notes.
    pub fn html(&self) -> String {
        let mut out = page_head("rampart-sim validate");
        out.push_str("<h1>The what-if against the real chain</h1>\n");
        let _ = writeln!(
            out,
            "<section><h2>What was recorded, imported and filled in</h2>\n<pre>{}</pre></section>",
            escape(&self.preamble())
        );
        out.push_str("<section><h2>Predicted against measured</h2>\n");
        for table in self.tables() {
            out.push_str(&table.html());
        }
        let _ = writeln!(
            out,
            "<pre>{}</pre></section>\n</body>\n</html>",
            escape(&self.closing())
        );
        out
    }

    /// Writes [`html`](Self::html) to `path`.
    ///
    /// # Errors
    ///
    /// The file cannot be written (the message names it).
    pub fn write_html(&self, path: &Path) -> Result<(), SimError> {
        std::fs::write(path, self.html())
            .map_err(|e| SimError::new(format!("cannot write {}: {e}", path.display())))
    }

    /// What was recorded and imported, what was filled in, and the policy files.
    fn preamble(&self) -> String {
        let mut out = String::new();
        let g = &self.imported;
        let _ = writeln!(
            out,
            "validate: the loopback chain (edge → middle → leaf on 127.0.0.1, rampart-http on every hop; 5% of leaf requests never answer; the client waits 500 ms)"
        );
        let _ = writeln!(
            out,
            "recorded under {}: {} spans in {} traces; imported: entry {}, {} roots",
            FILES[0].1, g.spans, g.traces, g.entry, g.traffic.roots
        );
        for s in &g.services {
            let calls: Vec<String> = s
                .calls
                .iter()
                .map(|c| {
                    format!(
                        "→ {} {:.2}/request ({} retries, {:.1}% failed)",
                        c.to,
                        c.per_parent,
                        c.retries,
                        c.error_rate * 100.0
                    )
                })
                .collect();
            let p = |q: f64| {
                let mut at = 0;
                for &(mean, count) in &s.own_time.buckets {
                    at += count;
                    if at as f64 >= q * s.own_time.samples as f64 {
                        return ms(mean);
                    }
                }
                0.0
            };
            let _ = writeln!(
                out,
                "  {}: {} requests, workers {}, own time p50 {:.1} ms p99 {:.1} ms, errors {:.1}% {}",
                s.name,
                s.requests,
                s.workers,
                p(0.5),
                p(0.99),
                s.error_rate * 100.0,
                calls.join(", ")
            );
        }
        for note in &g.notes {
            let _ = writeln!(out, "  note: {note}");
        }
        // Only a service's own failures: one whose call failed fails with it, and the graph
        // keeps that.
        for s in g.services.iter().filter(|s| s.own_errors > 0) {
            if let Some(slow) = slow_failures(&self.spans, &s.name) {
                let _ = writeln!(
                    out,
                    "  {}: {} of its {} failed requests took longer than its p95 ({:.1} ms); the graph keeps failures (error_rate) and time (service_time) apart, and the what-if draws them independently",
                    s.name,
                    slow.slow,
                    slow.failed,
                    ms(slow.p95)
                );
            }
        }
        let filled: Vec<String> = FILLED.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        let _ = writeln!(
            out,
            "filled in (not inferred, known of the chain): {}",
            filled.join(", ")
        );
        let _ = writeln!(out, "\npolicy files (resolved):");
        for row in &self.rows {
            let what = if row.change.is_empty() {
                String::new()
            } else {
                format!(" [{}]", row.change)
            };
            let _ = writeln!(out, "  {} ({}){what}", row.file, row.name);
            for (name, config) in &row.config {
                let _ = writeln!(out, "    policies.{name} = {config}");
            }
        }
        out
    }

    /// What follows the tables: the roots each prediction simulated, and notes.
    fn closing(&self) -> String {
        let mut out = String::new();
        let simulated: Vec<String> = self
            .rows
            .iter()
            .map(|r| format!("{} {}", r.file, r.predicted_roots))
            .collect();
        let _ = writeln!(
            out,
            "predicted roots (simulated at the imported rate): {}",
            simulated.join(", ")
        );
        for row in self.rows.iter().filter(|r| !r.drained) {
            let _ = writeln!(
                out,
                "note: {}: some spans had not ended 5 s after the last root; they are not in the spans",
                row.file
            );
        }
        out
    }

    /// Every number, as JSON: the run's size and seed, what was imported and filled in, then
    /// per policy file its policies (as `what-if --json` writes them), the numbers predicted,
    /// measured and their error, and the what-if's whole run (`outcome`, as `what-if --json`
    /// writes it); then each change's effect on the baseline, predicted, measured and error.
    pub fn json(&self) -> Value {
        let g = &self.imported;
        let services: Vec<Value> = g
            .services
            .iter()
            .map(|s| {
                let calls: Vec<Value> = s
                    .calls
                    .iter()
                    .map(|c| {
                        json!({
                            "to": c.to,
                            "per_request": c.per_parent,
                            "retries": c.retries,
                            "failed_share": c.error_rate,
                        })
                    })
                    .collect();
                json!({
                    "name": s.name,
                    "requests": s.requests,
                    "workers": s.workers,
                    "error_rate": s.error_rate,
                    "hang_rate": s.hang_rate,
                    "calls": calls,
                })
            })
            .collect();
        let filled: serde_json::Map<String, Value> = FILLED
            .iter()
            .map(|(key, value)| {
                // The TOML value as JSON: `"500ms"` a string, `true` a boolean.
                let value = serde_json::to_value(filled_value(value))
                    .unwrap_or_else(|_| Value::from(*value));
                ((*key).to_owned(), value)
            })
            .collect();
        let files: Vec<Value> = self
            .rows
            .iter()
            .map(|row| {
                json!({
                    "name": row.name,
                    "path": row.file,
                    "change": row.change,
                    "policies": whatif::print::policies_json(&row.resolved),
                    "predicted": row.predicted.json(),
                    "measured": row.measured.json(),
                    "error": row.predicted.minus(&row.measured).json(),
                    "predicted_roots": row.predicted_roots,
                    "drained": row.drained,
                    "second_attempt_roots": phases_json(row.phases),
                    "outcome": whatif::print::outcome_json(&row.outcome),
                })
            })
            .collect();
        let effects: Vec<Value> = self
            .rows
            .split_first()
            .map(|(base, changes)| {
                changes
                    .iter()
                    .map(|row| {
                        let predicted = row.predicted.minus(&base.predicted);
                        let measured = row.measured.minus(&base.measured);
                        json!({
                            "change": row.name,
                            "predicted": predicted.json(),
                            "measured": measured.json(),
                            "error": predicted.minus(&measured).json(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        json!({
            "roots_per_real_run": self.roots,
            "rate_per_s": RATE,
            "seed": self.seed,
            "imported": {
                "entry": g.entry,
                "spans": g.spans,
                "traces": g.traces,
                "roots": g.traffic.roots,
                "services": services,
                "notes": g.notes,
            },
            "filled": filled,
            "files": files,
            "effects": effects,
        })
    }

    /// Writes [`json`](Self::json) to `path`.
    ///
    /// # Errors
    ///
    /// The file cannot be written.
    pub fn write_json(&self, path: &Path) -> Result<(), SimError> {
        whatif::print::write_json(path, &self.json())
    }

    /// Writes the baseline's spans (OTLP JSON) to `dir/spans.jsonl` and the graph the what-if
    /// ran to `dir/imported.toml`; returns both paths.
    ///
    /// # Errors
    ///
    /// The folder or a file cannot be written.
    pub fn write(&self, dir: &Path) -> Result<[std::path::PathBuf; 2], SimError> {
        let cannot = |path: &Path, e: std::io::Error| {
            SimError::new(format!("cannot write {}: {e}", path.display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| cannot(dir, e))?;
        let spans = dir.join("spans.jsonl");
        let file = std::fs::File::create(&spans).map_err(|e| cannot(&spans, e))?;
        write_otlp(&self.spans, std::io::BufWriter::new(file)).map_err(|e| cannot(&spans, e))?;
        let graph = dir.join("imported.toml");
        std::fs::write(&graph, &self.graph_file).map_err(|e| cannot(&graph, e))?;
        Ok([spans, graph])
    }
}
