//! R008: a request sent through the reqwest client underneath rampart-http's
//! `Client` (`client.bypass_policy()`), which no policy governs.

use syn::ExprMethodCall;

use crate::finding::{Raw, Rule};

/// Checks one method chain, given innermost call first: a `bypass_policy()`
/// call, unless the chain goes on to build the request (a request built from
/// the raw client and then given to the rampart client's `execute` is
/// governed; the chain alone cannot tell, so building is left alone).
pub(crate) fn check_chain(chain: &[&ExprMethodCall], out: &mut Vec<Raw>) {
    let Some(at) = chain
        .iter()
        .position(|call| call.method == "bypass_policy" && call.args.is_empty())
    else {
        return;
    };
    let built = chain[at + 1..]
        .iter()
        .any(|call| call.method == "build" || call.method == "build_split");
    if built {
        return;
    }
    out.push(Raw::at(
        chain[at].method.span(),
        Rule::R008,
        "`bypass_policy()` is the reqwest client underneath rampart: what is sent through it has no deadline or attempt timeout, no retry, breaker, budget or quota, and carries no deadline, criticality or retry mark to the next service",
        "send through the rampart client's own `get`, `post`, ..., `request` (or give the built request to its `execute`); keep `bypass_policy()` for a request that must not be governed",
    ));
}
