//! R003 and R004: literal builder values that cannot work.

use proc_macro2::Span;
use syn::{Expr, ExprLit, ExprMethodCall, Lit};

use crate::duration::{format_nanos, literal_nanos};
use crate::finding::{Raw, Rule};
use crate::syntax;

/// Checks one method chain, given innermost call first (the order in which
/// the setters run).
pub(crate) fn check_chain(chain: &[&ExprMethodCall], out: &mut Vec<Raw>) {
    // The last literal value each setter received, if any; a setter called
    // with a non-literal value, or cleared, forgets it.
    let mut attempt_timeout: Option<(u128, Span)> = None;
    let mut total: Option<u128> = None;
    // `build().expect_err(..)` and friends: the chain is there to show the
    // rejection (a test), so R003 has nothing to add.
    let expects_rejection = chain.iter().any(|call| {
        ["expect_err", "unwrap_err", "is_err", "err"]
            .iter()
            .any(|method| call.method == method)
    });

    for call in chain {
        let method = call.method.to_string();
        let argument = single_argument(call);
        match method.as_str() {
            "max_attempts" if !expects_rejection && argument.and_then(int_literal) == Some(0) => {
                out.push(Raw::at(
                    call.method.span(),
                    Rule::R003,
                    "`max_attempts(0)`: a policy makes at least one attempt; `build()` rejects zero",
                    "use `.max_attempts(1)` for a single attempt without retries",
                ));
            }
            "attempt_timeout" | "total_timeout" => {
                let nanos = argument.and_then(literal_nanos);
                if nanos == Some(0) && !expects_rejection {
                    out.push(zero_duration(call, &method));
                }
                if method == "total_timeout" {
                    total = nanos;
                } else {
                    attempt_timeout = nanos.map(|nanos| (nanos, call.method.span()));
                }
            }
            "no_attempt_timeout" => attempt_timeout = None,
            "no_total_timeout" => total = None,
            _ => {}
        }
    }

    if let (Some((timeout, span)), Some(total)) = (attempt_timeout, total) {
        // A zero total timeout is already reported by R003.
        if total > 0 && timeout > total {
            out.push(Raw::at(
                span,
                Rule::R004,
                format!(
                    "attempt timeout {} is longer than the total timeout {}; every attempt will be cut to the deadline",
                    format_nanos(timeout),
                    format_nanos(total)
                ),
                "make the attempt timeout shorter than the total timeout (to leave room for retries), or drop it",
            ));
        }
    }
}

fn zero_duration(call: &ExprMethodCall, method: &str) -> Raw {
    let disable = if method == "total_timeout" {
        "no_total_timeout"
    } else {
        "no_attempt_timeout"
    };
    Raw::at(
        call.method.span(),
        Rule::R003,
        format!("`{method}` of zero: `build()` rejects a zero duration"),
        format!("give a positive duration, or call `.{disable}()` to go without one"),
    )
}

fn single_argument(call: &ExprMethodCall) -> Option<&Expr> {
    match (call.args.first(), call.args.len()) {
        (Some(argument), 1) => Some(argument),
        _ => None,
    }
}

fn int_literal(expr: &Expr) -> Option<u128> {
    match syntax::strip(expr) {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => int.base10_parse().ok(),
        _ => None,
    }
}
