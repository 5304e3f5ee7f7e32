//! The rules, driven by one syntax-tree walk per file.
//!
//! The walk keeps the function (or handler closure) it is in as a [`Frame`]
//! (for R006 and R007), a stack of the enclosing contexts that matter to
//! R005 and R007 (loop bodies, callbacks, ambient scopes), and looks at every
//! method chain once, from its root outwards, so that chain-wide rules
//! (R002, R004, R008) see the whole chain.

mod builder;
mod bypass;
mod callback;
mod construction;
mod handler;
mod spawn;

use std::collections::HashSet;

use syn::visit::{self, Visit};
use syn::{
    Expr, ExprCall, ExprForLoop, ExprLoop, ExprMethodCall, ExprWhile, ImplItemFn, Item, Local,
    Macro,
};

use crate::finding::Raw;
use crate::syntax;

/// Runs every rule over a parsed file.
pub(crate) fn check_file(file: &syn::File) -> Vec<Raw> {
    let mut linter = Linter {
        routed: handler::routed_functions(file),
        ..Linter::default()
    };
    linter.visit_file(file);
    linter.findings
}

/// Where an expression sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Context {
    /// Inside the body (or the condition) of `for`, `while` or `loop` (R005).
    Loop,
    /// Inside a closure passed to one of the run methods (named here) (R005).
    Callback(&'static str),
    /// Inside the future or closure given to `.scope(..)` / `.sync_scope(..)` (R007).
    AmbientScope,
}

/// The function or handler closure being walked: its body runs once per
/// call, whatever loop the definition sits in.
#[derive(Debug, Default)]
struct Frame {
    /// It looks like a request handler (see [`handler`]).
    handler: bool,
    /// Its body reads or carries the ambient context outside spawned work.
    ambient: bool,
    /// Policies built in the handler (R006).
    built: construction::PerRequest,
}

impl Frame {
    /// The frame of a function or closure. `ambient` says whether its body
    /// reads or carries the ambient context ([`spawn::block_mentions_ambient`]).
    fn new(handler: bool, ambient: bool) -> Frame {
        Frame {
            handler,
            ambient,
            built: construction::PerRequest::default(),
        }
    }
}

#[derive(Default)]
struct Linter {
    findings: Vec<Raw>,
    contexts: Vec<Context>,
    frame: Frame,
    /// Names of the functions the file passes to routers.
    routed: HashSet<String>,
}

impl Linter {
    fn within<T>(&mut self, context: Context, node: T, visit: impl FnOnce(&mut Self, T)) {
        self.contexts.push(context);
        visit(self, node);
        self.contexts.pop();
    }

    /// Walks `node` as a new function body, with no enclosing contexts.
    fn in_frame<T>(&mut self, frame: Frame, node: T, visit: impl FnOnce(&mut Self, T)) {
        let saved_contexts = std::mem::take(&mut self.contexts);
        let saved_frame = std::mem::replace(&mut self.frame, frame);
        visit(self, node);
        self.frame = saved_frame;
        self.contexts = saved_contexts;
    }

    /// The innermost loop or callback around the current node: what R005
    /// reports, and what makes a construction in a handler R005's, not R006's.
    fn repeating(&self) -> Option<Context> {
        self.contexts
            .iter()
            .rev()
            .find(|context| matches!(context, Context::Loop | Context::Callback(_)))
            .copied()
    }

    /// Whether an ambient scope is expected here (R007).
    fn in_ambient_scope(&self) -> bool {
        self.frame.handler || self.frame.ambient || self.contexts.contains(&Context::AmbientScope)
    }

    /// Whether the current node runs once per request, in a handler (R006).
    fn per_request(&self) -> bool {
        self.frame.handler && self.repeating().is_none()
    }

    /// Visits an argument that may be a handler closure.
    fn visit_argument(&mut self, argument: &Expr, routed: bool) {
        match syntax::strip(argument) {
            Expr::Closure(closure) if routed && handler::is_handler_closure(argument) => {
                let frame = Frame::new(true, spawn::expr_mentions_ambient(&closure.body));
                self.in_frame(frame, closure, |linter, closure| {
                    linter.visit_expr_closure(closure);
                });
            }
            _ => self.visit_expr(argument),
        }
    }
}

impl<'ast> Visit<'ast> for Linter {
    /// A nested item (a `fn` in a loop body, say) starts afresh: its body is
    /// not executed per iteration of the enclosing loop.
    fn visit_item(&mut self, item: &'ast Item) {
        let frame = match item {
            Item::Fn(function) => {
                let handler = handler::is_handler_fn(&function.sig, &function.attrs, &self.routed);
                Frame::new(handler, spawn::block_mentions_ambient(&function.block))
            }
            _ => Frame::default(),
        };
        self.in_frame(frame, item, visit::visit_item);
    }

    fn visit_impl_item_fn(&mut self, function: &'ast ImplItemFn) {
        let handler = handler::is_handler_fn(&function.sig, &function.attrs, &self.routed);
        let frame = Frame::new(handler, spawn::block_mentions_ambient(&function.block));
        self.in_frame(frame, function, |linter, function| {
            visit::visit_impl_item_fn(linter, function);
        });
    }

    fn visit_local(&mut self, local: &'ast Local) {
        if self.per_request() {
            let init = local.init.as_ref().map(|init| &*init.expr);
            self.frame.built.bind(&local.pat, init);
        }
        visit::visit_local(self, local);
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
        construction::check(call, self.repeating(), &mut self.findings);
        spawn::check(call, self.in_ambient_scope(), &mut self.findings);
        self.visit_expr(&call.func);
        let routed = handler::is_router_call(call);
        for argument in &call.args {
            self.visit_argument(argument, routed);
        }
    }

    /// Each method chain is handled once, at its outermost call.
    fn visit_expr_method_call(&mut self, outermost: &'ast ExprMethodCall) {
        let (root, chain) = flatten(outermost);
        builder::check_chain(&chain, &mut self.findings);
        bypass::check_chain(&chain, &mut self.findings);
        self.visit_expr(root);

        let routed_chain = handler::starts_with_router(root);
        let mut caller_token: Option<String> = None;
        for call in chain {
            // `Call::token(&t)` gives the caller's token (`attempt.token()` takes none).
            if call.method == "token" && !call.args.is_empty() {
                caller_token = call.args.first().and_then(syntax::token_argument_key);
            }
            let method = call.method.to_string();
            let run_method = callback::run_method(&method);
            if run_method.is_some() && self.frame.handler {
                let direct = self.per_request();
                self.frame
                    .built
                    .run(&call.receiver, direct, &mut self.findings);
            }
            let routed = routed_chain && handler::is_router(&method);
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
                    _ if spawn::is_scope(call) => {
                        self.within(Context::AmbientScope, argument, |linter, argument| {
                            linter.visit_expr(argument);
                        });
                    }
                    _ => self.visit_argument(argument, routed),
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
