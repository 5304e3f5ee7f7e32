//! The rules, driven by one syntax-tree walk per file.
//!
//! The walk keeps a stack of the enclosing contexts that matter to R005
//! (loop bodies, callbacks) and looks at every method chain once, from its
//! root outwards, so that chain-wide rules (R002, R004) see the whole chain.

mod builder;
mod callback;
mod construction;

use syn::visit::{self, Visit};
use syn::{Expr, ExprCall, ExprForLoop, ExprLoop, ExprMethodCall, ExprWhile, Item, Macro};

use crate::finding::Raw;
use crate::syntax;

/// Runs every rule over a parsed file.
pub(crate) fn check_file(file: &syn::File) -> Vec<Raw> {
    let mut linter = Linter::default();
    linter.visit_file(file);
    linter.findings
}

/// Where an expression sits, for R005.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Context {
    /// Inside the body (or the condition) of `for`, `while` or `loop`.
    Loop,
    /// Inside a closure passed to one of the run methods (named here).
    Callback(&'static str),
}

#[derive(Default)]
struct Linter {
    findings: Vec<Raw>,
    contexts: Vec<Context>,
}

impl Linter {
    fn within<T>(&mut self, context: Context, node: T, visit: impl FnOnce(&mut Self, T)) {
        self.contexts.push(context);
        visit(self, node);
        self.contexts.pop();
    }
}

impl<'ast> Visit<'ast> for Linter {
    /// A nested item (a `fn` in a loop body, say) starts afresh: its body is
    /// not executed per iteration of the enclosing loop.
    fn visit_item(&mut self, item: &'ast Item) {
        let saved = std::mem::take(&mut self.contexts);
        visit::visit_item(self, item);
        self.contexts = saved;
    }

    fn visit_expr_for_loop(&mut self, node: &'ast ExprForLoop) {
        self.visit_pat(&node.pat);
        // The iterated expression is evaluated once, before the loop.
        self.visit_expr(&node.expr);
        self.within(Context::Loop, &node.body, |linter, body| {
            linter.visit_block(body);
        });
    }

    fn visit_expr_while(&mut self, node: &'ast ExprWhile) {
        self.within(Context::Loop, node, |linter, node| {
            visit::visit_expr_while(linter, node);
        });
    }

    fn visit_expr_loop(&mut self, node: &'ast ExprLoop) {
        self.within(Context::Loop, node, |linter, node| {
            visit::visit_expr_loop(linter, node);
        });
    }

    fn visit_expr_call(&mut self, call: &'ast ExprCall) {
        construction::check(call, self.contexts.last().copied(), &mut self.findings);
        visit::visit_expr_call(self, call);
    }

    /// Each method chain is handled once, at its outermost call.
    fn visit_expr_method_call(&mut self, outermost: &'ast ExprMethodCall) {
        let (root, chain) = flatten(outermost);
        builder::check_chain(&chain, &mut self.findings);
        self.visit_expr(root);

        let mut caller_token: Option<String> = None;
        for call in chain {
            if call.method == "with_token" {
                caller_token = call.args.first().and_then(syntax::token_argument_key);
            }
            let run_method = callback::run_method(&call.method.to_string());
            for argument in &call.args {
                let closure = run_method.and(callback::callback_closure(argument));
                match (run_method, closure) {
                    (Some(method), Some(closure)) => {
                        callback::check(
                            method,
                            closure,
                            caller_token.as_deref(),
                            &mut self.findings,
                        );
                        self.within(Context::Callback(method), argument, |linter, argument| {
                            linter.visit_expr(argument);
                        });
                    }
                    _ => self.visit_expr(argument),
                }
            }
        }
    }

    /// Macro arguments that parse as Rust code are checked like any other code.
    fn visit_macro(&mut self, mac: &'ast Macro) {
        for statement in syntax::macro_statements(mac) {
            self.visit_stmt(&statement);
        }
    }
}

/// Splits `a.b().c().d()` into its root `a` and its calls, innermost first.
fn flatten(outermost: &ExprMethodCall) -> (&Expr, Vec<&ExprMethodCall>) {
    let mut chain = vec![outermost];
    let mut current = &*outermost.receiver;
    while let Expr::MethodCall(call) = current {
        chain.push(call);
        current = &*call.receiver;
    }
    chain.reverse();
    (current, chain)
}
