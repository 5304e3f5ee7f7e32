//! R005: shared-state components built where they are rebuilt per call.

use syn::ExprCall;
use syn::spanned::Spanned;

use super::Context;
use crate::finding::{Raw, Rule};
use crate::syntax;

/// Checks one call expression, given the innermost enclosing context.
pub(crate) fn check(call: &ExprCall, context: Option<Context>, out: &mut Vec<Raw>) {
    let Some(context) = context else {
        return;
    };
    let Some(path) = syntax::called_path(call) else {
        return;
    };
    let component = match syntax::last_two(&path) {
        Some(("Policy", "builder" | "none")) => "Policy",
        Some(("RetryBudget", "new" | "builder")) => "RetryBudget",
        Some(("Breaker", "new" | "builder")) => "Breaker",
        _ => return,
    };
    let place = match context {
        Context::Loop => "a loop body".to_owned(),
        Context::Callback(method) => format!("a callback passed to `{method}`"),
    };
    out.push(Raw::at(
        call.span(),
        Rule::R005,
        format!(
            "`{component}` built inside {place}: its state (budget, breaker, latency estimate) never accumulates across calls"
        ),
        "build it once, outside, and clone it (clones share state)",
    ));
}
