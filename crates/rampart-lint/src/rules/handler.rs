//! What looks like a request handler, for R006 and R007: code that runs once
//! per request, inside the ambient scope an inbound edge opens.
//!
//! Without types the lint cannot know what a router calls, so it takes the
//! signs a handler leaves in the source:
//!
//! - an `async fn` (not `main`) with a parameter of an extractor type
//!   (`Request<..>`, `HeaderMap`, `State<..>`, `Json<..>`...);
//! - an `async fn` carrying a route or handler attribute (`#[get("/")]`,
//!   `#[handler]`, `#[debug_handler]`);
//! - an `async fn` whose name is passed to a router in the same file
//!   (`get(health)`, `.route("/", post(create))`, `service_fn(serve)`);
//! - an async closure (or a closure returning an `async` block) passed to a
//!   router (`get(async || ..)`, `service_fn(|request| async move { .. })`).

use std::collections::HashSet;

use syn::visit::{self, Visit};
use syn::{
    Attribute, Expr, ExprCall, ExprMethodCall, FnArg, GenericArgument, PathArguments, Signature,
    Type,
};

use crate::syntax;

/// Extractor types that only a handler takes.
const EXTRACTORS: [&str; 10] = [
    "Request",
    "HttpRequest",
    "HeaderMap",
    "Multipart",
    "WebSocketUpgrade",
    "OriginalUri",
    "MatchedPath",
    "RawQuery",
    "ConnectInfo",
    "TypedHeader",
];

/// Extractor names that are common elsewhere too (`std::path::Path`), so
/// they count only with generic arguments: `Path<u64>`, `State<App>`.
const GENERIC_EXTRACTORS: [&str; 7] = [
    "State",
    "Json",
    "Path",
    "Query",
    "Form",
    "Extension",
    "Data",
];

/// The HTTP methods, as router functions (`get(..)`) and route attributes
/// (`#[get("/")]`) spell them.
const METHODS: [&str; 7] = ["get", "post", "put", "delete", "patch", "head", "options"];

/// Route and handler attributes besides the methods (actix-web, rocket,
/// poem, axum).
const HANDLER_ATTRIBUTES: [&str; 3] = ["route", "handler", "debug_handler"];

/// Functions (and method-router methods) that take a handler, besides the
/// methods.
const ROUTERS: [&str; 3] = ["trace", "any", "service_fn"];

/// Whether a function with this signature and these attributes looks like a
/// request handler. `routed` holds the names passed to routers in the file.
pub(crate) fn is_handler_fn(
    signature: &Signature,
    attributes: &[Attribute],
    routed: &HashSet<String>,
) -> bool {
    if signature.asyncness.is_none() || signature.ident == "main" {
        return false;
    }
    let attributed = attributes.iter().any(|attribute| {
        attribute.path().segments.last().is_some_and(|segment| {
            let name = segment.ident.to_string();
            METHODS.contains(&name.as_str()) || HANDLER_ATTRIBUTES.contains(&name.as_str())
        })
    });
    let extracts = signature.inputs.iter().any(|input| match input {
        FnArg::Typed(typed) => is_extractor(&typed.ty),
        FnArg::Receiver(_) => false,
    });
    attributed || extracts || routed.contains(&signature.ident.to_string())
}

/// Whether `ty` is an extractor: `Request`, `&HeaderMap`, `Json<Order>`...
fn is_extractor(ty: &Type) -> bool {
    match ty {
        Type::Reference(reference) => is_extractor(&reference.elem),
        Type::Paren(paren) => is_extractor(&paren.elem),
        Type::Group(group) => is_extractor(&group.elem),
        Type::Path(path) if path.qself.is_none() => {
            path.path.segments.last().is_some_and(|segment| {
                let generic = matches!(&segment.arguments, PathArguments::AngleBracketed(arguments)
                    if arguments.args.iter().any(|argument| matches!(argument, GenericArgument::Type(_))));
                EXTRACTORS.iter().any(|name| segment.ident == name)
                    || (generic && GENERIC_EXTRACTORS.iter().any(|name| segment.ident == name))
            })
        }
        _ => false,
    }
}

/// Whether a function or method called `name` takes handlers.
pub(crate) fn is_router(name: &str) -> bool {
    METHODS.contains(&name) || ROUTERS.contains(&name)
}

/// Whether `call` calls a router function: `get(..)`, `axum::routing::post(..)`.
pub(crate) fn is_router_call(call: &ExprCall) -> bool {
    syntax::called_path(call)
        .and_then(|path| path.last().map(|name| is_router(name)))
        .unwrap_or(false)
}

/// Whether `argument` is a handler written in place: an async closure, or a
/// closure whose body is an `async` block.
pub(crate) fn is_handler_closure(argument: &Expr) -> bool {
    match syntax::strip(argument) {
        Expr::Closure(closure) => {
            closure.asyncness.is_some() || matches!(syntax::strip(&closure.body), Expr::Async(_))
        }
        _ => false,
    }
}

/// The names of the functions that `file` passes to routers:
/// `get(health)`, `get(handlers::health)`, `get(list).post(create)`.
pub(crate) fn routed_functions(file: &syn::File) -> HashSet<String> {
    let mut routes = Routes::default();
    routes.visit_file(file);
    routes.names
}

#[derive(Default)]
struct Routes {
    names: HashSet<String>,
}

impl Routes {
    fn add(&mut self, argument: &Expr) {
        if let Expr::Path(path) = syntax::strip(argument)
            && let Some(last) = path.path.segments.last()
        {
            self.names.insert(last.ident.to_string());
        }
    }
}

impl<'ast> Visit<'ast> for Routes {
    fn visit_expr_call(&mut self, call: &'ast ExprCall) {
        if is_router_call(call) {
            call.args.iter().for_each(|argument| self.add(argument));
        }
        visit::visit_expr_call(self, call);
    }

    /// `get(list).post(create)`: a router method on a chain that starts
    /// with a router function. (`map.get(key)` starts elsewhere.)
    fn visit_expr_method_call(&mut self, call: &'ast ExprMethodCall) {
        if is_router(&call.method.to_string()) && starts_with_router(&call.receiver) {
            call.args.iter().for_each(|argument| self.add(argument));
        }
        visit::visit_expr_method_call(self, call);
    }
}

/// Whether the method chain `expr` starts with a router function call.
pub(crate) fn starts_with_router(expr: &Expr) -> bool {
    match syntax::strip(expr) {
        Expr::MethodCall(call) => starts_with_router(&call.receiver),
        Expr::Call(call) => is_router_call(call),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::{is_handler_fn, routed_functions};

    fn handler(source: &str) -> bool {
        match syn::parse_str::<syn::ItemFn>(source) {
            Ok(item) => is_handler_fn(&item.sig, &item.attrs, &HashSet::new()),
            Err(error) => panic!("test input `{source}` does not parse: {error}"),
        }
    }

    #[test]
    fn extractor_parameters_make_an_async_fn_a_handler() {
        assert!(handler("async fn a(request: Request<Body>) {}"));
        assert!(handler(
            "async fn a(State(app): State<App>, Json(o): Json<Order>) {}"
        ));
        assert!(handler("async fn a(headers: &http::HeaderMap) {}"));
        assert!(handler("#[get(\"/\")] async fn a() {}"));
    }

    #[test]
    fn plain_async_fns_main_and_sync_fns_are_not_handlers() {
        assert!(!handler("async fn a(client: &Client, url: &str) {}"));
        assert!(!handler("async fn a(path: &std::path::Path) {}"));
        assert!(!handler("async fn a(requests: Vec<Request>) {}"));
        assert!(!handler("async fn main() {}"));
        assert!(!handler("fn a(request: Request<Body>) {}"));
        assert!(!handler("#[tokio::test] async fn a() {}"));
    }

    #[test]
    fn functions_passed_to_routers_are_collected_by_name() {
        let file: syn::File = match syn::parse_str(
            "fn app() { Router::new().route(\"/\", get(list).post(handlers::create)).route(\"/h\", axum::routing::get(health)); map.get(key); }",
        ) {
            Ok(file) => file,
            Err(error) => panic!("{error}"),
        };
        let names = routed_functions(&file);
        let mut names: Vec<_> = names.iter().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["create", "health", "list"]);
    }
}
