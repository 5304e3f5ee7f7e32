//! The `rampart.http.attempt` spans a test captures on its thread, as `name fields in
//! parent` lines when they close; shared by `observe.rs` and `reqwest_spans.rs`.
#![allow(dead_code)]

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::{LookupSpan, Registry};

/// With one dispatcher registered, tracing computes a new callsite's interest from the
/// registering thread's own default, so a test thread without a subscriber would cache
/// "never" for the thread that has one. A second dispatcher, registered for the whole test
/// binary, makes it ask every dispatcher.
static SECOND: std::sync::LazyLock<tracing::Dispatch> =
    std::sync::LazyLock::new(|| tracing::Dispatch::new(Registry::default()));

/// The `rampart.http.attempt` spans, as `name{fields} in parent` when they close.
#[derive(Clone, Default)]
pub(crate) struct Spans(Arc<Mutex<Vec<String>>>);

struct Fields(String);

struct Writer<'a>(&'a mut String);

impl Visit for Writer<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = String::new();
        attrs.record(&mut Writer(&mut fields));
        let span = ctx.span(id).expect("span");
        span.extensions_mut().insert(Fields(fields));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("span");
        let mut extensions = span.extensions_mut();
        let fields = extensions.get_mut::<Fields>().expect("fields");
        values.record(&mut Writer(&mut fields.0));
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let span = ctx.span(&id).expect("span");
        if span.name() != "rampart.http.attempt" {
            return;
        }
        let fields = span.extensions().get::<Fields>().expect("fields").0.clone();
        let parent = span.parent().map_or("none", |p| p.name());
        let line = format!("{}{fields} in {parent}", span.name());
        self.0.lock().expect("spans").push(line);
    }
}

impl Spans {
    /// Captures spans on this thread until the guard is dropped.
    pub(crate) fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let guard = tracing::subscriber::set_default(Registry::default().with(self.clone()));
        std::sync::LazyLock::force(&SECOND);
        // Recomputes what another thread cached before the second dispatcher existed.
        tracing::callsite::rebuild_interest_cache();
        guard
    }

    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().expect("spans"))
    }
}
