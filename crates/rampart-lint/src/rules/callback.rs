//! R001 and R002: what a callback passed to `run` does with its attempt.

use syn::spanned::Spanned;
use syn::visit::{self, Visit};
use syn::{Expr, ExprClosure, ExprPath, Macro, Pat};

use crate::finding::{Raw, Rule};
use crate::syntax;

/// The finishers that run a callback: `Policy::run` and `Call`'s.
const RUN_METHODS: [&str; 4] = ["run", "try_run", "run_blocking", "try_run_blocking"];

const R001_HELP: &str =
    "pass `attempt.token()` (or `attempt`) to the work so the ceiling can cancel it";
const R002_HELP: &str = "use `attempt.token()`: the attempt's token fires at the attempt's ceiling and on caller cancellation";

/// When `method` is one of the policy's run methods, returns its name.
pub(crate) fn run_method(method: &str) -> Option<&'static str> {
    RUN_METHODS.into_iter().find(|known| *known == method)
}

/// The argument as a callback: a closure taking exactly one parameter (the
/// attempt handle), possibly in parentheses.
pub(crate) fn callback_closure(argument: &Expr) -> Option<&ExprClosure> {
    match syntax::strip(argument) {
        Expr::Closure(closure) if closure.inputs.len() == 1 => Some(closure),
        _ => None,
    }
}

/// Checks one callback passed to `method`. `caller_token` is the key of the
/// expression given to `.call().token(..)` earlier in the chain, if any.
pub(crate) fn check(
    method: &str,
    closure: &ExprClosure,
    caller_token: Option<&str>,
    out: &mut Vec<Raw>,
) {
    let Some(pattern) = closure.inputs.first() else {
        return;
    };
    let handle = handle_name(pattern);

    // R001
    let unused = match &handle {
        Some(name) if name.starts_with('_') => Some(name.as_str()),
        Some(name) if !mentions(&closure.body, name) => Some(name.as_str()),
        _ => None,
    };
    if let Some(name) = unused {
        out.push(Raw::at(
            closure.span(),
            Rule::R001,
            format!(
                "callback never uses its attempt handle `{name}`; {}",
                unreached(method)
            ),
            R001_HELP,
        ));
    }

    // R002. A parameter named like the caller's token shadows it.
    let caller_token = caller_token.filter(|key| handle.as_deref() != Some(syntax::key_root(key)));
    let mut finder = TokenMisuse { caller_token, out };
    finder.visit_expr(&closure.body);
}

/// What the attempt's ceiling does to a callback that never sees its attempt.
///
/// A blocking attempt is always awaited (`rampart::blocking`). An async
/// attempt's future is dropped at the ceiling in the default abandon mode
/// (`rampart::TimeoutMode`), so only work that outlives the future, or an
/// attempt under the cooperative mode (which awaits it), escapes.
fn unreached(method: &str) -> &'static str {
    if method.ends_with("_blocking") {
        "a blocking attempt is never abandoned, so its ceiling cannot stop this work"
    } else {
        "the ceiling drops the attempt's future (the default abandon mode) but cannot stop work that outlives it (a spawned task, a thread) or a cooperative-mode attempt"
    }
}

/// The name bound by the callback's parameter: `attempt`, `_attempt`, `_`,
/// through `: Type` ascriptions, `&` patterns and parentheses. `None` for
/// destructuring patterns, which are not analysed.
fn handle_name(pattern: &Pat) -> Option<String> {
    match pattern {
        Pat::Wild(_) => Some("_".to_owned()),
        Pat::Ident(binding) if binding.subpat.is_none() => Some(binding.ident.to_string()),
        Pat::Type(typed) => handle_name(&typed.pat),
        Pat::Reference(reference) => handle_name(&reference.pat),
        Pat::Paren(paren) => handle_name(&paren.pat),
        _ => None,
    }
}

/// Whether `body` refers to the local `name` (as a path expression, or
/// inside a macro call's tokens).
fn mentions(body: &Expr, name: &str) -> bool {
    let mut mentions = Mentions { name, found: false };
    mentions.visit_expr(body);
    mentions.found
}

struct Mentions<'n> {
    name: &'n str,
    found: bool,
}

impl<'ast> Visit<'ast> for Mentions<'_> {
    fn visit_expr_path(&mut self, node: &'ast ExprPath) {
        let path = &node.path;
        if node.qself.is_none()
            && path.leading_colon.is_none()
            && path.segments.len() == 1
            && path
                .segments
                .iter()
                .all(|segment| segment.ident == self.name)
        {
            self.found = true;
        }
        visit::visit_expr_path(self, node);
    }

    fn visit_macro(&mut self, mac: &'ast Macro) {
        if syntax::tokens_mention(&mac.tokens, self.name) {
            self.found = true;
        }
    }
}

/// Finds the caller's token and fresh `CancellationToken`s inside a callback.
struct TokenMisuse<'k, 'o> {
    caller_token: Option<&'k str>,
    out: &'o mut Vec<Raw>,
}

impl<'ast> Visit<'ast> for TokenMisuse<'_, '_> {
    fn visit_expr(&mut self, expr: &'ast Expr) {
        if let Some(key) = self.caller_token
            && syntax::place_key(expr).as_deref() == Some(key)
        {
            self.out.push(Raw::at(
                expr.span(),
                Rule::R002,
                format!(
                    "callback uses the caller's token `{key}` where the attempt's token belongs; it does not fire at the attempt's ceiling"
                ),
                R002_HELP,
            ));
            return;
        }
        if let Expr::Call(call) = expr {
            let fresh = syntax::called_path(call).is_some_and(|path| {
                matches!(
                    syntax::last_two(&path),
                    Some(("CancellationToken", "new" | "default"))
                )
            });
            if fresh {
                self.out.push(Raw::at(
                    expr.span(),
                    Rule::R002,
                    "callback creates a fresh `CancellationToken`; neither the attempt timeout nor the caller can cancel it",
                    R002_HELP,
                ));
            }
        }
        visit::visit_expr(self, expr);
    }

    fn visit_macro(&mut self, mac: &'ast Macro) {
        for statement in syntax::macro_statements(mac) {
            self.visit_stmt(&statement);
        }
    }
}
