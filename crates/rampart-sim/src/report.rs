//! The report: text tables for the terminal, `report.json` with every number, and
//! `index.html` with one SVG chart per scenario (drawn by plotters' SVG backend, whose text
//! needs no font files) above its tables and two lines saying what they show.
//!
//! Longer than the ~600-line guide: the three outputs (text, JSON, HTML) render the same rows
//! and findings, and are kept together so that they cannot drift apart.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use serde_json::{Value, json};

use crate::SimError;

/// A table: a title, column headings and rows of formatted cells.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// What the table shows.
    pub title: String,
    /// Column headings.
    pub columns: Vec<String>,
    /// Rows of cells, as many as columns.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these headings and no rows.
    pub fn new(title: impl Into<String>, columns: &[&str]) -> Table {
        Table {
            title: title.into(),
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as aligned text: the first column left-aligned, the others right-aligned.
    pub fn text(&self) -> String {
        let mut widths: Vec<usize> = self.columns.iter().map(|c| c.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(cell.chars().count());
                }
            }
        }
        let line = |cells: &[String]| {
            let mut out = String::new();
            for (i, cell) in cells.iter().enumerate() {
                let width = widths.get(i).copied().unwrap_or(0);
                if i == 0 {
                    let _ = write!(out, "{cell:<width$}");
                } else {
                    let _ = write!(out, "  {cell:>width$}");
                }
            }
            out.trim_end().to_owned()
        };
        let mut out = format!("{}\n", self.title);
        out.push_str(&line(&self.columns));
        out.push('\n');
        let total: usize = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
        out.push_str(&"-".repeat(total));
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(row));
            out.push('\n');
        }
        out
    }

    /// The table as HTML, every cell escaped.
    pub(crate) fn html(&self) -> String {
        let mut out = format!("<table>\n<caption>{}</caption>\n<tr>", escape(&self.title));
        for c in &self.columns {
            let _ = write!(out, "<th>{}</th>", escape(c));
        }
        out.push_str("</tr>\n");
        for row in &self.rows {
            out.push_str("<tr>");
            for cell in row {
                let _ = write!(out, "<td>{}</td>", escape(cell));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</table>\n");
        out
    }

    fn json(&self) -> Value {
        json!({ "title": self.title, "columns": self.columns, "rows": self.rows })
    }
}

/// An RGB colour.
pub type Rgb = (u8, u8, u8);

/// The colour of each contender, and of references.
pub mod colors {
    use super::Rgb;
    /// `naive`.
    pub const NAIVE: Rgb = (214, 39, 40);
    /// `budgeted`.
    pub const BUDGETED: Rgb = (255, 127, 14);
    /// `rampart`.
    pub const RAMPART: Rgb = (31, 119, 180);
    /// A second rampart variant.
    pub const RAMPART_2: Rgb = (44, 160, 44);
    /// A third rampart variant.
    pub const RAMPART_3: Rgb = (148, 103, 189);
    /// References and ideals.
    pub const REFERENCE: Rgb = (127, 127, 127);

    /// The colour of a contender by name.
    pub fn of(name: &str) -> Rgb {
        match name {
            "naive" => NAIVE,
            "budgeted" => BUDGETED,
            "rampart" => RAMPART,
            n if n.contains("p95") || n.contains("breaker") => RAMPART_3,
            n if n.starts_with("rampart") => RAMPART_2,
            _ => REFERENCE,
        }
    }
}

/// One line on a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Its legend.
    pub name: String,
    /// Its colour.
    pub color: Rgb,
    /// Drawn dashed.
    pub dashed: bool,
    /// A marker on every point (for sweeps: shows where a point was measured).
    pub markers: bool,
    /// Its points, in x order. A `NaN` y is a point that was not measured: the line stops
    /// there and starts again after it.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A solid line with a marker on every measured point.
    pub fn sweep(name: impl Into<String>, color: Rgb, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            color,
            dashed: false,
            markers: true,
            points,
        }
    }

    /// The same, dashed.
    pub fn dashed_sweep(name: impl Into<String>, color: Rgb, points: Vec<(f64, f64)>) -> Series {
        Series {
            dashed: true,
            ..Series::sweep(name, color, points)
        }
    }
}

/// A shaded span of x on a chart (a fault window, a spike).
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// Start.
    pub from: f64,
    /// End.
    pub to: f64,
}

/// One axis of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// What it measures.
    pub label: String,
    /// Logarithmic.
    pub log: bool,
    /// Lowest value shown.
    pub min: f64,
    /// Highest value shown.
    pub max: f64,
}

impl Axis {
    /// A linear axis.
    pub fn linear(label: &str, min: f64, max: f64) -> Axis {
        Axis {
            label: label.to_owned(),
            log: false,
            min,
            max,
        }
    }

    /// A logarithmic axis.
    pub fn log(label: &str, min: f64, max: f64) -> Axis {
        Axis {
            label: label.to_owned(),
            log: true,
            min,
            max,
        }
    }
}

/// A line chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Its caption.
    pub title: String,
    /// The x axis.
    pub x: Axis,
    /// The y axis.
    pub y: Axis,
    /// The lines.
    pub series: Vec<Series>,
    /// Shaded spans of x.
    pub bands: Vec<Band>,
}

/// A calibration check: a number the simulator must reproduce before its comparisons are
/// believed.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// What is checked.
    pub name: String,
    /// The value arithmetic predicts.
    pub expected: f64,
    /// The value the simulator measured.
    pub measured: f64,
    /// The largest difference accepted.
    pub tolerance: f64,
}

impl Check {
    /// Whether the measured value is within tolerance.
    pub fn passed(&self) -> bool {
        (self.measured - self.expected).abs() <= self.tolerance
    }
}

/// What one scenario found.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioReport {
    /// Its name.
    pub name: &'static str,
    /// A heading.
    pub title: String,
    /// The question it asks.
    pub question: String,
    /// How it is set up, one line each.
    pub setup: Vec<String>,
    /// The reference it is held against.
    pub reference: String,
    /// Its chart.
    pub chart: Chart,
    /// Its tables.
    pub tables: Vec<Table>,
    /// What every column and label of its tables means: `(term, definition)`.
    pub terms: Vec<(String, String)>,
    /// Every contender's exact configuration: `(contender, configuration)`.
    pub configs: Vec<(String, String)>,
    /// What the numbers show, wins, ties and losses alike.
    pub findings: Vec<String>,
    /// Caveats.
    pub notes: Vec<String>,
    /// Every number, for `report.json`.
    pub data: Value,
}

/// A whole run's report.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Whether it was a `--quick` run.
    pub quick: bool,
    /// The calibration checks, run first.
    pub calibration: Vec<Check>,
    /// One report per scenario run.
    pub scenarios: Vec<ScenarioReport>,
}

/// Work not done yet, named in the report.
pub const FUTURE_WORK: &str = "Future work: the other scenarios over real HTTP (the loopback section runs only the deadline scenario, on three axum services on 127.0.0.1 through rampart-http's layers); the inbound edge of the simulated services is still a stand-in for rampart-http's InboundLayer.";

/// What in this simulator is the real component and what is a stand-in written here, with
/// what each stand-in simplifies.
pub const STAND_INS: [&str; 5] = [
    "Real: the client side of every rampart hop is rampart's executor (Policy::run, hedging when the policy hedges) with its real retry budget, breaker, hedge and backoff; the rampart servers' admission is rampart's own CriticalityLimit, asked as rampart-http's InboundLayer::admit asks it; the budgeted baseline's budget is tower's own TpsBudget.",
    "Stand-in: the inbound edge of a rampart server (reading X-Deadline-Ms and X-Criticality, subtracting the configured reserve, reject_expired on arrival, 503 with Retry-After in whole seconds for a refusal or a queue wait past the deadline) is written here after rampart-http's InboundLayer, because the simulated requests are not HTTP requests. It simplifies: no header parsing or maximum, no enforce (the layer's default: a handler is not dropped at its deadline), no problem+json body.",
    "Stand-in: a simulated service is a pool of workers (one per request being handled, held while the handler waits on its downstream call, as a thread-per-request server), a lognormal service time drawn per request, and injected faults; the baselines' FIFO queue is a plain bounded queue answering 503 without Retry-After when full (as a thread-pool server with a bounded queue does; tower's LoadShed alone has no queue).",
    "Stand-in: the wire is a channel. Nothing is cancelled over it: a caller that stops waiting leaves its request queued or running downstream, as an HTTP/1.1 server whose work is already queued keeps it; only a deadline that travelled with the request lets a service skip dead work. This favours propagation where a real server would drop the handler of a closed connection: the loopback section measures both cases on real sockets (handlers calling downstream themselves, where hyper's cancellation makes naive tie, and a queued middle tier). In the built-in scenarios a request costs no network time (a graph file gives a call its own: `wire`).",
    "Stand-in: time is tokio's paused clock with 1 ms timer resolution; every service time is rounded up to the next millisecond.",
];

impl Report {
    /// Whether every calibration check passed.
    pub fn calibrated(&self) -> bool {
        self.calibration.iter().all(Check::passed)
    }

    /// The report as text: calibration first, then each scenario's tables and findings.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let mut cal = Table::new(
            "calibration (run first: the simulator must reproduce these before its comparisons are believed)",
            &["check", "expected", "measured", ""],
        );
        for check in &self.calibration {
            cal.row(vec![
                check.name.clone(),
                format!("{:.3}", check.expected),
                format!("{:.3}", check.measured),
                if check.passed() { "ok" } else { "FAILED" }.to_owned(),
            ]);
        }
        out.push_str(&cal.text());
        out.push('\n');
        out.push_str(&self.config_box());
        for s in &self.scenarios {
            let _ = write!(out, "\n== {}: {}\n", s.name, s.title);
            let _ = writeln!(out, "reference: {}", s.reference);
            for table in &s.tables {
                out.push('\n');
                out.push_str(&table.text());
            }
            out.push_str("\ncolumns:\n");
            for (term, meaning) in &s.terms {
                let _ = writeln!(out, "  {term}: {meaning}");
            }
            out.push_str("\nfindings:\n");
            for finding in &s.findings {
                let _ = writeln!(out, "> {finding}");
            }
        }
        out.push_str("\nwhat is real and what is a stand-in:\n");
        for line in STAND_INS {
            let _ = writeln!(out, "- {line}");
        }
        out
    }

    /// Every contender's exact configuration, scenario by scenario, in a box.
    pub fn config_box(&self) -> String {
        let mut lines = vec![
            "contenders, exactly as configured (rampart's line is policy.explain() of one hop)"
                .to_owned(),
        ];
        for s in &self.scenarios {
            lines.push(String::new());
            lines.push(format!("[{}]", s.name));
            for (name, config) in &s.configs {
                lines.push(format!("{name}: {config}"));
            }
        }
        let width = 100;
        let mut out = format!("+{}+\n", "-".repeat(width + 2));
        for line in lines {
            for part in wrap(&line, width) {
                let _ = writeln!(out, "| {part:<width$} |");
            }
        }
        let _ = writeln!(out, "+{}+", "-".repeat(width + 2));
        out
    }

    /// Every number of the run. Contains nothing that depends on the wall clock or the
    /// machine, so the same seed gives the same bytes.
    pub fn json(&self) -> Value {
        let calibration: Vec<Value> = self
            .calibration
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "expected": c.expected,
                    "measured": c.measured,
                    "tolerance": c.tolerance,
                    "passed": c.passed(),
                })
            })
            .collect();
        let scenarios: Vec<Value> = self
            .scenarios
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "title": s.title,
                    "question": s.question,
                    "setup": s.setup,
                    "reference": s.reference,
                    "findings": s.findings,
                    "notes": s.notes,
                    "terms": s.terms.iter().map(|(t, m)| json!({ "term": t, "meaning": m })).collect::<Vec<_>>(),
                    "configs": s.configs.iter().map(|(c, m)| json!({ "contender": c, "configuration": m })).collect::<Vec<_>>(),
                    "tables": s.tables.iter().map(Table::json).collect::<Vec<_>>(),
                    "data": s.data,
                })
            })
            .collect();
        json!({
            "tool": "rampart-sim",
            "version": env!("CARGO_PKG_VERSION"),
            "seed": self.seed,
            "quick": self.quick,
            "calibration": calibration,
            "stand_ins": STAND_INS,
            "scenarios": scenarios,
        })
    }

    /// The report as pretty JSON text.
    pub fn json_text(&self) -> Result<String, SimError> {
        serde_json::to_string_pretty(&self.json())
            .map(|mut s| {
                s.push('\n');
                s
            })
            .map_err(|e| SimError::new(format!("cannot write the JSON report: {e}")))
    }

    /// The report as one HTML page with inline SVG charts.
    pub fn html(&self) -> Result<String, SimError> {
        let mut out = String::from(HEAD);
        let _ = write!(
            out,
            "<h1>rampart-sim report</h1>\n<p class=\"meta\">seed {}{} &middot; every number below is also in <a href=\"report.json\">report.json</a> &middot; virtual time (tokio's paused clock, 1 ms timer resolution): the same seed gives the same numbers.</p>\n",
            self.seed,
            if self.quick {
                ", --quick size (fewer roots on proportionally smaller services than the setups below describe)"
            } else {
                ""
            }
        );
        out.push_str("<section><h2>Calibration</h2>\n<p>Run first: arithmetic the simulator must reproduce before its comparisons are believed.</p>\n");
        let mut cal = Table::new("calibration checks", &["check", "expected", "measured", ""]);
        for check in &self.calibration {
            cal.row(vec![
                check.name.clone(),
                format!("{:.3}", check.expected),
                format!("{:.3}", check.measured),
                if check.passed() { "ok" } else { "FAILED" }.to_owned(),
            ]);
        }
        out.push_str(&cal.html());
        out.push_str("</section>\n");
        out.push_str("<section id=\"contenders\"><h2>Contenders, exactly as configured</h2>\n<p>rampart's line is <code>policy.explain()</code> of one hop; every contender reads replies with the same classifier (rampart-http's HTTP rules) and honours Retry-After the same way.</p>\n<div class=\"box\">");
        for s in &self.scenarios {
            let _ = write!(out, "<p><b>{}</b></p><ul>", escape(s.name));
            for (name, config) in &s.configs {
                let _ = write!(out, "<li><b>{}</b>: {}</li>", escape(name), escape(config));
            }
            out.push_str("</ul>");
        }
        out.push_str("</div></section>\n");
        for s in &self.scenarios {
            let _ = write!(
                out,
                "<section id=\"{}\"><h2>{}: {}</h2>\n<p class=\"question\">{}</p>\n",
                s.name,
                escape(s.name),
                escape(&s.title),
                escape(&s.question)
            );
            out.push_str("<div class=\"findings\">");
            for finding in &s.findings {
                let _ = write!(out, "<p>{}</p>", escape(finding));
            }
            out.push_str("</div>\n");
            out.push_str(&svg(&s.chart)?);
            out.push('\n');
            for table in &s.tables {
                out.push_str(&table.html());
            }
            out.push_str("<dl class=\"terms\">");
            for (term, meaning) in &s.terms {
                let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", escape(term), escape(meaning));
            }
            out.push_str("</dl>\n");
            let _ = write!(
                out,
                "<p class=\"reference\"><b>Reference.</b> {}</p>\n<details><summary>Setup</summary><ul>",
                escape(&s.reference)
            );
            for line in &s.setup {
                let _ = write!(out, "<li>{}</li>", escape(line));
            }
            out.push_str("</ul></details>\n");
            for note in &s.notes {
                let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(note));
            }
            out.push_str("</section>\n");
        }
        out.push_str("<section><h2>What is real and what is a stand-in</h2>");
        for line in STAND_INS {
            let _ = write!(out, "<p class=\"note\">{}</p>", escape(line));
        }
        let _ = write!(
            out,
            "<p class=\"note\">{}</p></section>\n</body>\n</html>\n",
            escape(FUTURE_WORK)
        );
        Ok(out)
    }

    /// Writes `index.html`, `report.json` and one SVG per scenario into `dir`; returns the
    /// path of `index.html`.
    pub fn write(&self, dir: &Path) -> Result<PathBuf, SimError> {
        let io = |what: &Path, e: std::io::Error| {
            SimError::new(format!("cannot write {}: {e}", what.display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        for s in &self.scenarios {
            let path = dir.join(format!("{}.svg", s.name));
            std::fs::write(&path, svg(&s.chart)?).map_err(|e| io(&path, e))?;
        }
        let json = dir.join("report.json");
        std::fs::write(&json, self.json_text()?).map_err(|e| io(&json, e))?;
        let index = dir.join("index.html");
        std::fs::write(&index, self.html()?).map_err(|e| io(&index, e))?;
        Ok(index)
    }
}

const HEAD: &str = r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>rampart-sim report</title>
<style>
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 980px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 2em; }
.meta, .note { color: #666; font-size: 0.9em; }
.question { font-style: italic; }
.findings p { margin: 0.3em 0; font-weight: 600; }
.box { border: 1px solid #bbb; background: #fafafa; padding: 0.2em 1em; font-size: 0.85em; }
dl.terms { font-size: 0.85em; } dl.terms dt { font-weight: 600; } dl.terms dd { margin: 0 0 0.3em 1.5em; }
svg { display: block; margin: 1em 0; max-width: 100%; height: auto; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
caption { text-align: left; font-weight: 600; padding-bottom: 0.3em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f5f5f5; }
</style>
</head>
<body>
"#;

/// `text` broken into lines of at most `width` characters, at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
}

/// The opening of a self-contained page (no scripts, fonts or files it links to): the
/// report's own styles, titled `title`.
pub(crate) fn page_head(title: &str) -> String {
    HEAD.replacen(
        "<title>rampart-sim report</title>",
        &format!("<title>{}</title>", escape(title)),
        1,
    )
}

/// `text` with HTML's special characters escaped.
pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The chart as an SVG document.
pub fn svg(chart: &Chart) -> Result<String, SimError> {
    let (x, y) = (&chart.x, &chart.y);
    match (x.log, y.log) {
        (false, false) => draw(chart, x.min..x.max, y.min..y.max),
        (true, false) => draw(chart, (x.min..x.max).log_scale(), y.min..y.max),
        (false, true) => draw(chart, x.min..x.max, (y.min..y.max).log_scale()),
        (true, true) => draw(
            chart,
            (x.min..x.max).log_scale(),
            (y.min..y.max).log_scale(),
        ),
    }
}

fn plot_error(e: impl std::fmt::Debug) -> SimError {
    SimError::new(format!("cannot draw a chart: {e:?}"))
}

/// The width of the whole SVG, and of the plot inside it (the rest holds the legend).
const WIDTH: u32 = 980;
const PLOT_WIDTH: u32 = 700;
const HEIGHT: u32 = 460;

/// Stroke widths of a chart's series: solid lines get thinner in drawing order (6, 4, then 2),
/// dashed ones too (4, 3, then 2), so that a line drawn over an identical one leaves the one
/// below visible at its edges.
fn widths(chart: &Chart) -> Vec<u32> {
    let (mut solid, mut dashed) = (0usize, 0usize);
    chart
        .series
        .iter()
        .map(|s| {
            let (count, steps) = if s.dashed {
                (&mut dashed, [4, 3, 2])
            } else {
                (&mut solid, [6, 4, 2])
            };
            *count += 1;
            steps[(*count - 1).min(2)]
        })
        .collect()
}

fn draw<X, Y>(chart: &Chart, x: X, y: Y) -> Result<String, SimError>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let (plot, legend) = root.split_horizontally(PLOT_WIDTH);
        let mut ctx = ChartBuilder::on(&plot)
            .caption(&chart.title, ("sans-serif", 19))
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(70)
            .build_cartesian_2d(x, y)
            .map_err(plot_error)?;
        ctx.configure_mesh()
            .x_desc(chart.x.label.as_str())
            .y_desc(chart.y.label.as_str())
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .light_line_style(RGBColor(242, 242, 242))
            .bold_line_style(RGBColor(215, 215, 215))
            .x_label_formatter(&|v| number(*v))
            .y_label_formatter(&|v| number(*v))
            .draw()
            .map_err(plot_error)?;
        let (ylo, yhi) = (chart.y.min, chart.y.max);
        for band in &chart.bands {
            ctx.draw_series(std::iter::once(Rectangle::new(
                [(band.from, ylo), (band.to, yhi)],
                RGBColor(255, 236, 200).filled(),
            )))
            .map_err(plot_error)?;
        }
        let clamp = |(px, py): (f64, f64)| (px, py.clamp(ylo, yhi));
        let widths = widths(chart);
        let mut dashes = 0usize;
        for (index, (series, &width)) in chart.series.iter().zip(&widths).enumerate() {
            let (r, g, b) = series.color;
            let color = RGBColor(r, g, b);
            let style = color.stroke_width(width);
            // Dashed lines get their own dash pattern each, so that two that overlap can be
            // told apart.
            let (dash, gap) = [(8, 5), (3, 4), (14, 6), (6, 3)][dashes % 4];
            if series.dashed {
                dashes += 1;
            }
            // A NaN is a point that was not measured: no line is drawn across it.
            for run in series.points.split(|(_, py)| py.is_nan()) {
                let points: Vec<(f64, f64)> = run.iter().copied().map(clamp).collect();
                if series.dashed {
                    ctx.draw_series(DashedLineSeries::new(points, dash, gap, style))
                        .map_err(plot_error)?;
                } else {
                    ctx.draw_series(LineSeries::new(points, style))
                        .map_err(plot_error)?;
                }
            }
            if series.markers {
                let measured = series.points.iter().filter(|(_, py)| !py.is_nan());
                for &(px, py) in measured {
                    let at = clamp((px, py));
                    let filled = color.filled();
                    match index % 4 {
                        0 => ctx.draw_series(std::iter::once(Circle::new(at, 5, filled))),
                        1 => ctx.draw_series(std::iter::once(TriangleMarker::new(at, 6, filled))),
                        2 => ctx.draw_series(std::iter::once(Cross::new(
                            at,
                            5,
                            color.stroke_width(2),
                        ))),
                        _ => ctx.draw_series(std::iter::once(Circle::new(
                            at,
                            5,
                            color.stroke_width(2),
                        ))),
                    }
                    .map_err(plot_error)?;
                }
            }
        }
        // The legend, beside the plot so that it never hides a line.
        let top = 48;
        let mut dashes = 0usize;
        for (i, (series, &width)) in chart.series.iter().zip(&widths).enumerate() {
            let y = top + 24 * i as i32;
            let (r, g, b) = series.color;
            let color = RGBColor(r, g, b);
            let style = color.stroke_width(width.min(4));
            let segments: Vec<(i32, i32)> = if series.dashed {
                let (dash, gap) = [(8, 5), (3, 4), (14, 6), (6, 3)][dashes % 4];
                dashes += 1;
                (0..)
                    .map(|k| 4 + k * (dash + gap))
                    .take_while(|&from| from < 36)
                    .map(|from| (from, (from + dash).min(36)))
                    .collect()
            } else {
                vec![(4, 36)]
            };
            for (from, to) in segments {
                legend
                    .draw(&PathElement::new(vec![(from, y), (to, y)], style))
                    .map_err(plot_error)?;
            }
            if series.markers {
                let at = (20, y);
                match i % 4 {
                    0 => legend.draw(&Circle::new(at, 5, color.filled())),
                    1 => legend.draw(&TriangleMarker::new(at, 6, color.filled())),
                    2 => legend.draw(&Cross::new(at, 5, color.stroke_width(2))),
                    _ => legend.draw(&Circle::new(at, 5, color.stroke_width(2))),
                }
                .map_err(plot_error)?;
            }
            legend
                .draw(&Text::new(
                    series.name.clone(),
                    (44, y - 7),
                    ("sans-serif", 13).into_font().color(&BLACK),
                ))
                .map_err(plot_error)?;
        }
        root.present().map_err(plot_error)?;
    }
    Ok(out)
}

/// A number for an axis label: no trailing zeros, thousands as `k`.
fn number(v: f64) -> String {
    let a = v.abs();
    if a >= 10_000.0 {
        format!("{}k", trim(v / 1000.0))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_tables_align() {
        let mut t = Table::new("t", &["who", "n"]);
        t.row(vec!["naive".into(), "64.0".into()]);
        t.row(vec!["rampart".into(), "1.0".into()]);
        assert_eq!(
            t.text(),
            "t\nwho         n\n-------------\nnaive    64.0\nrampart   1.0\n"
        );
    }

    #[test]
    fn axis_numbers_are_short() {
        assert_eq!(number(64.0), "64");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(0.001), "0.001");
        assert_eq!(number(2.5), "2.5");
        assert_eq!(number(20_000.0), "20k");
    }

    #[test]
    fn a_chart_draws_on_every_scale() {
        for (xl, yl) in [(false, false), (true, false), (false, true), (true, true)] {
            let chart = Chart {
                title: "t".into(),
                x: Axis {
                    label: "x".into(),
                    log: xl,
                    min: 1.0,
                    max: 100.0,
                },
                y: Axis {
                    label: "y".into(),
                    log: yl,
                    min: 1.0,
                    max: 100.0,
                },
                series: vec![Series {
                    name: "a".into(),
                    color: colors::RAMPART,
                    dashed: yl,
                    markers: xl,
                    points: vec![(1.0, 1.0), (5.0, f64::NAN), (10.0, 50.0), (100.0, 1e6)],
                }],
                bands: vec![Band { from: 2.0, to: 3.0 }],
            };
            let svg = svg(&chart).expect("draws");
            assert!(svg.starts_with("<svg"), "{svg}");
            assert!(svg.contains("</svg>"));
        }
    }
}
