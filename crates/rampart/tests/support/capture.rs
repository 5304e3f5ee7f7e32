//! A capturing `tracing` subscriber for the tests that read rampart's spans and events as
//! lines, and the second dispatcher that keeps its callsites' interest honest.

use std::fmt::Write as _;
use std::sync::{Arc, LazyLock, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::{LookupSpan, Registry};

/// With one dispatcher registered, tracing computes a new callsite's interest from the
/// registering thread's own default, so a test thread without a subscriber would cache
/// "never" for the thread that has one. A second dispatcher, registered for the whole test
/// binary, makes it ask every dispatcher.
static SECOND: LazyLock<tracing::Dispatch> =
    LazyLock::new(|| tracing::Dispatch::new(Registry::default()));

/// Every line in order: `LEVEL message {fields} in span` for an event, `span name {fields}`
/// when a span closes, `new name in parent` when one opens; each with its target (an
/// event's, a span's). The `elapsed` field is left out (it is whatever the test's virtual
/// time made it, and asserted elsewhere).
#[derive(Clone, Default)]
pub(crate) struct Capture(Arc<Mutex<Vec<(String, &'static str)>>>);

/// A span's fields so far.
struct Fields(String);

/// Writes fields into the first string and the message into the second.
struct Writer<'a>(&'a mut String, &'a mut String);

impl Visit for Writer<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.1, "{value:?}");
        } else if field.name() != "elapsed" {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = String::new();
        attrs.record(&mut Writer(&mut fields, &mut String::new()));
        let span = ctx.span(id).expect("span");
        let parent = span.parent().map_or("none", |p| p.name());
        self.push(
            format!("new {} in {parent}", span.name()),
            span.metadata().target(),
        );
        span.extensions_mut().insert(Fields(fields));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("span");
        let mut extensions = span.extensions_mut();
        let fields = extensions.get_mut::<Fields>().expect("fields");
        values.record(&mut Writer(&mut fields.0, &mut String::new()));
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let (mut fields, mut message) = (String::new(), String::new());
        event.record(&mut Writer(&mut fields, &mut message));
        let within = ctx
            .event_span(event)
            .map_or_else(|| "none".to_owned(), |s| s.name().to_owned());
        let meta = event.metadata();
        let level = meta.level();
        self.push(
            format!("{level} {message}{fields} in {within}"),
            meta.target(),
        );
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let span = ctx.span(&id).expect("span");
        let fields = span.extensions().get::<Fields>().expect("fields").0.clone();
        self.push(
            format!("span {}{fields}", span.name()),
            span.metadata().target(),
        );
    }
}

impl Capture {
    fn push(&self, line: String, target: &'static str) {
        self.0.lock().expect("lines").push((line, target));
    }

    /// Every line, spans opening included.
    pub(crate) fn all(&self) -> Vec<String> {
        let lines = self.0.lock().expect("lines");
        lines.iter().map(|(line, _)| line.clone()).collect()
    }

    /// The lines whose event or span has the target `target`.
    #[allow(dead_code)]
    pub(crate) fn of_target(&self, target: &str) -> Vec<String> {
        let lines = self.0.lock().expect("lines");
        lines
            .iter()
            .filter(|(_, t)| *t == target)
            .map(|(line, _)| line.clone())
            .collect()
    }

    /// The events and the spans closing, in order.
    #[allow(dead_code)] // not every test binary reads both views
    pub(crate) fn lines(&self) -> Vec<String> {
        let all = self.all();
        all.into_iter().filter(|l| !l.starts_with("new ")).collect()
    }

    /// Each span as it opened: `name in parent`.
    #[allow(dead_code)]
    pub(crate) fn parents(&self) -> Vec<String> {
        let all = self.all();
        all.iter()
            .filter_map(|l| l.strip_prefix("new ").map(str::to_owned))
            .collect()
    }
}

/// A capture installed as this thread's default subscriber until the guard drops.
pub(crate) fn capture() -> (Capture, tracing::subscriber::DefaultGuard) {
    let capture = Capture::default();
    let guard = tracing::subscriber::set_default(Registry::default().with(capture.clone()));
    LazyLock::force(&SECOND);
    // Recomputes what another thread cached before the second dispatcher existed.
    tracing::callsite::rebuild_interest_cache();
    (capture, guard)
}
