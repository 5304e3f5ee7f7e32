//! R007: a plain spawn inside a request scope, of work that needs the
//! ambient context.
//!
//! rampart's ambient deadline and criticality live in a task-local: a task
//! started with `tokio::spawn` (or a thread, or a blocking task) starts
//! outside the scope, so a policy in it that reads them
//! (`use_ambient_deadline`, `use_ambient_criticality`) sees none and works
//! on for its own deadline after the caller has given up. `Ambient::spawn`,
//! `Ambient::bind`, `Ambient::spawn_blocking` and `Ambient::carry` carry
//! them across.
//!
//! The rule fires on `tokio::spawn(..)`, `tokio::task::spawn(..)`,
//! `task::spawn(..)`, their `spawn_local` and `spawn_blocking` forms and
//! `std::thread::spawn(..)` when both hold:
//!
//! - the spawn sits where an ambient scope is expected: in a request handler
//!   (see [`super::handler`]), inside a single-argument `.scope(..)` or
//!   `.sync_scope(..)` call, or in a function that itself reads or carries
//!   the ambient context (mentions `Ambient`, or calls `Deadline::current()`
//!   or `Criticality::current()`) outside the spawned work;
//! - the spawned work, written in place, calls a run method or reads the
//!   ambient context, and does not enter a scope of its own (`.scope(..)`,
//!   `.sync_scope(..)`, `Ambient::bind(..)`).
//!
//! Work meant to outlive the request spawns `Ambient::new().scope(work)`:
//! an empty scope of its own, which says so and is left alone.
//!
//! Work spawned by name (`tokio::spawn(job)`, `tokio::spawn(worker(..))`) is
//! not followed, and neither are `JoinSet::spawn` or `Handle::spawn`.

use syn::spanned::Spanned;
use syn::visit::{self, Visit};
use syn::{Expr, ExprCall, ExprMethodCall, ExprPath, Item, Macro};

use super::callback;
use crate::finding::{Raw, Rule};
use crate::syntax;

/// A spawn function that starts work outside the ambient scope.
struct Spawn {
    /// The path as written, `tokio::spawn`.
    path: String,
    /// What it starts: "task" or "thread".
    starts: &'static str,
    /// How to carry the context instead.
    help: &'static str,
}

fn spawn_kind(call: &ExprCall) -> Option<Spawn> {
    let path = syntax::called_path(call)?;
    let (starts, help) = match path.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [.., "tokio", "spawn"] | [.., "task", "spawn"] => (
            "task",
            "spawn it with `rampart::Ambient::spawn` (or wrap the future in `rampart::Ambient::bind`), which carries them into the task",
        ),
        [.., "task", "spawn_local"] => (
            "task",
            "wrap the future in `rampart::Ambient::bind`, which carries them into the task",
        ),
        [.., "task", "spawn_blocking"] => (
            "task",
            "spawn it with `rampart::Ambient::spawn_blocking`, which carries them onto the blocking thread",
        ),
        [.., "thread", "spawn"] => (
            "thread",
            "wrap the closure in `rampart::Ambient::carry(..)`, which carries them onto the thread",
        ),
        _ => return None,
    };
    Some(Spawn {
        path: path.join("::"),
        starts,
        help,
    })
}

/// Checks one call. `in_scope` says whether it sits where an ambient scope
/// is expected (see the module docs).
pub(crate) fn check(call: &ExprCall, in_scope: bool, out: &mut Vec<Raw>) {
    if !in_scope {
        return;
    }
    let Some(spawn) = spawn_kind(call) else {
        return;
    };
    let Some(work) = call.args.first() else {
        return;
    };
    let mut spawned = Spawned::default();
    spawned.visit_expr(work);
    if spawned.rescoped || !(spawned.runs || spawned.reads) {
        return;
    }
    out.push(Raw::at(
        call.func.span(),
        Rule::R007,
        format!(
            "`{}` does not carry the ambient deadline and criticality into the {}: what reads them there (a policy with `use_ambient_deadline` / `use_ambient_criticality`, `Deadline::current()`) sees none",
            spawn.path, spawn.starts
        ),
        spawn.help,
    ));
}

/// Whether a function body reads or carries the ambient context itself,
/// outside the work it spawns and outside nested items.
pub(crate) fn block_mentions_ambient(body: &syn::Block) -> bool {
    let mut finder = AmbientMention::default();
    finder.visit_block(body);
    finder.found
}

/// [`block_mentions_ambient`] for a closure's body.
pub(crate) fn expr_mentions_ambient(body: &Expr) -> bool {
    let mut finder = AmbientMention::default();
    finder.visit_expr(body);
    finder.found
}

/// A call of `Ambient::current()`, `Deadline::current()` or
/// `Criticality::current()`.
fn reads_current(path: &ExprPath) -> bool {
    let segments = syntax::segments(&path.path);
    matches!(
        syntax::last_two(&segments),
        Some(("Ambient" | "Deadline" | "Criticality", "current"))
    )
}

#[derive(Default)]
struct AmbientMention {
    found: bool,
}

impl<'ast> Visit<'ast> for AmbientMention {
    fn visit_item(&mut self, _: &'ast Item) {}

    fn visit_expr_path(&mut self, path: &'ast ExprPath) {
        if reads_current(path)
            || path
                .path
                .segments
                .iter()
                .any(|segment| segment.ident == "Ambient")
        {
            self.found = true;
        }
    }

    fn visit_expr_call(&mut self, call: &'ast ExprCall) {
        if spawn_kind(call).is_some() {
            return;
        }
        visit::visit_expr_call(self, call);
    }

    fn visit_macro(&mut self, mac: &'ast Macro) {
        for statement in syntax::macro_statements(mac) {
            self.visit_stmt(&statement);
        }
    }
}

/// What the spawned work does with rampart.
#[derive(Default)]
struct Spawned {
    /// Calls a run method.
    runs: bool,
    /// Reads the ambient context.
    reads: bool,
    /// Enters a scope of its own, so the context is set again inside.
    rescoped: bool,
}

impl<'ast> Visit<'ast> for Spawned {
    fn visit_item(&mut self, _: &'ast Item) {}

    fn visit_expr_method_call(&mut self, call: &'ast ExprMethodCall) {
        let method = call.method.to_string();
        if callback::run_method(&method).is_some() && call.args.len() == 1 {
            self.runs = true;
        }
        if is_scope(call) {
            self.rescoped = true;
        }
        visit::visit_expr_method_call(self, call);
    }

    fn visit_expr_path(&mut self, path: &'ast ExprPath) {
        if reads_current(path) {
            self.reads = true;
        }
        let segments = syntax::segments(&path.path);
        if matches!(
            syntax::last_two(&segments),
            Some(("Ambient", "bind" | "carry"))
        ) {
            self.rescoped = true;
        }
    }

    fn visit_macro(&mut self, mac: &'ast Macro) {
        for statement in syntax::macro_statements(mac) {
            self.visit_stmt(&statement);
        }
    }
}

/// `ambient.scope(future)` or `ambient.sync_scope(f)`: one argument, so not
/// a `task_local!` key's `KEY.scope(value, future)`.
pub(crate) fn is_scope(call: &ExprMethodCall) -> bool {
    (call.method == "scope" || call.method == "sync_scope") && call.args.len() == 1
}
