//! R005 and R006: shared-state components built where they are rebuilt per
//! call, so that their state (breaker, retry budget, latency estimate) never
//! accumulates.
//!
//! R005 looks at where a constructor call sits (a loop body, a callback).
//! R006 looks at a policy built inside a request handler: it fires when the
//! handler then runs that policy, through a local (`let policy = ..;
//! policy.run(..)`) or on the built value itself (`..build()?.run(..)`).

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Expr, ExprCall, Pat};

use super::Context;
use crate::finding::{Raw, Rule};
use crate::syntax;

const REBUILT_HELP: &str = "build it once, outside, and clone it (clones share state)";
const PER_REQUEST_HELP: &str = "build it once, at startup, and keep it in the handler's state, a `OnceLock` or a struct field (clones share state)";

/// The component a constructor call builds afresh: `Policy::builder()`,
/// `RetryBudget::builder()`, `Breaker::builder()`. Not `Policy::none()`, which
/// clones one shared pass-through policy.
fn component(call: &ExprCall) -> Option<&'static str> {
    let path = syntax::called_path(call)?;
    match syntax::last_two(&path)? {
        ("Policy", "builder") => Some("Policy"),
        ("RetryBudget", "builder") => Some("RetryBudget"),
        ("Breaker", "builder") => Some("Breaker"),
        _ => None,
    }
}

/// R005: checks one call expression, given the innermost enclosing loop or
/// callback.
pub(crate) fn check(call: &ExprCall, context: Option<Context>, out: &mut Vec<Raw>) {
    let Some(component) = component(call) else {
        return;
    };
    let place = match context {
        Some(Context::Loop) => "a loop body".to_owned(),
        Some(Context::Callback(method)) => format!("a callback passed to `{method}`"),
        Some(Context::AmbientScope) | None => return,
    };
    out.push(Raw::at(
        call.span(),
        Rule::R005,
        format!(
            "`{component}` built inside {place}: its state (budget, breaker, latency estimate) never accumulates across calls"
        ),
        REBUILT_HELP,
    ));
}

/// The policies a request handler has built and bound to locals (R006).
#[derive(Debug, Default)]
pub(crate) struct PerRequest {
    /// Local name, where the policy is built, and whether it was reported.
    locals: Vec<(String, Span, bool)>,
}

impl PerRequest {
    /// A `let` in the handler's own body (not in a loop or a callback):
    /// `let NAME = Policy::builder()..build()?` starts tracking `NAME`; any
    /// other `let NAME` ends it (the name is shadowed).
    pub(crate) fn bind(&mut self, pattern: &Pat, init: Option<&Expr>) {
        let Some(name) = binding_name(pattern) else {
            return;
        };
        self.locals.retain(|(local, _, _)| *local != name);
        if let Some(span) = init.and_then(built_policy) {
            self.locals.push((name, span, false));
        }
    }

    /// A run method called on `receiver` in the handler: reports the policy
    /// it runs when the handler built it. `direct` says whether a policy
    /// built in the receiver itself counts: not in a loop or a callback,
    /// where R005 reports the construction.
    pub(crate) fn run(&mut self, receiver: &Expr, direct: bool, out: &mut Vec<Raw>) {
        let receiver = peel_call(receiver);
        if let Some(span) = built_policy(receiver) {
            if direct {
                out.push(per_request(span));
            }
            return;
        }
        let Some(name) = local_name(receiver) else {
            return;
        };
        for (local, span, reported) in &mut self.locals {
            if *local == name && !*reported {
                *reported = true;
                out.push(per_request(*span));
            }
        }
    }
}

fn per_request(span: Span) -> Raw {
    Raw::at(
        span,
        Rule::R006,
        "`Policy` built per request and run in the handler: breaker, retry budget and latency estimate are per policy, so this one's breaker never opens and its budget is never spent",
        PER_REQUEST_HELP,
    )
}

/// When `expr` builds a policy, the span of the constructor call:
/// `Policy::builder()...build()`, through `?`, `.unwrap()`, `.expect(..)`.
/// `Policy::none()` is not one: it clones one shared pass-through policy.
fn built_policy(expr: &Expr) -> Option<Span> {
    match syntax::strip(expr) {
        Expr::Try(inner) => built_policy(&inner.expr),
        Expr::MethodCall(call) if ["unwrap", "expect"].iter().any(|m| call.method == m) => {
            built_policy(&call.receiver)
        }
        Expr::MethodCall(call) if call.method == "build" => builder_root(&call.receiver),
        _ => None,
    }
}

/// The `Policy::builder()` call at the root of a chain of builder setters.
fn builder_root(expr: &Expr) -> Option<Span> {
    match syntax::strip(expr) {
        Expr::MethodCall(call) => builder_root(&call.receiver),
        Expr::Call(call) => {
            let path = syntax::called_path(call)?;
            (syntax::last_two(&path)? == ("Policy", "builder")).then(|| call.span())
        }
        _ => None,
    }
}

/// What a run method is called on, without the call's setters (`.call()`, `.token(..)`,
/// `.deadline(..)`, `.fallback(..)`), `.clone()` or borrows:
/// `policy.call().token(&t).run(..)` runs `policy`.
fn peel_call(expr: &Expr) -> &Expr {
    match syntax::strip(expr) {
        Expr::MethodCall(call)
            if matches!(
                call.method.to_string().as_str(),
                "call" | "token" | "deadline" | "fallback" | "clone"
            ) =>
        {
            peel_call(&call.receiver)
        }
        Expr::Reference(reference) => peel_call(&reference.expr),
        other => other,
    }
}

/// A plain local: `policy`.
fn local_name(expr: &Expr) -> Option<String> {
    match syntax::strip(expr) {
        Expr::Path(path) if path.qself.is_none() && path.path.segments.len() == 1 => {
            path.path.get_ident().map(ToString::to_string)
        }
        _ => None,
    }
}

/// The name a `let` binds: `policy`, `mut policy`, `policy: Policy`.
fn binding_name(pattern: &Pat) -> Option<String> {
    match pattern {
        Pat::Ident(binding) if binding.subpat.is_none() => Some(binding.ident.to_string()),
        Pat::Type(typed) => binding_name(&typed.pat),
        _ => None,
    }
}
