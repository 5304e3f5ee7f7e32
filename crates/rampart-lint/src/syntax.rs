//! Small syntactic helpers shared by the rules.

use proc_macro2::{TokenStream, TokenTree};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Block, Expr, ExprCall, ExprPath, Macro, Member, Path, Stmt, Token};

/// The identifiers of `path`'s segments, ignoring generic arguments.
pub(crate) fn segments(path: &Path) -> Vec<String> {
    path.segments
        .iter()
        .map(|segment| segment.ident.to_string())
        .collect()
}

/// When `call` is a call of a plain path (`a::b::c(..)`), returns its segments.
pub(crate) fn called_path(call: &ExprCall) -> Option<Vec<String>> {
    match strip(&call.func) {
        Expr::Path(ExprPath {
            qself: None, path, ..
        }) => Some(segments(path)),
        _ => None,
    }
}

/// The last two segments of `segments`, e.g. `("Policy", "builder")`.
pub(crate) fn last_two(segments: &[String]) -> Option<(&str, &str)> {
    match segments {
        [.., ty, item] => Some((ty.as_str(), item.as_str())),
        _ => None,
    }
}

/// Removes parentheses and invisible groups around an expression.
pub(crate) fn strip(expr: &Expr) -> &Expr {
    match expr {
        Expr::Paren(inner) => strip(&inner.expr),
        Expr::Group(inner) => strip(&inner.expr),
        _ => expr,
    }
}

/// A textual key for a "place" expression, used to recognise the same
/// token expression in two spots: `token`, `self.token`, `ctx.token()`,
/// `a::B`. Returns `None` for anything else (calls with arguments,
/// literals, indexing...).
pub(crate) fn place_key(expr: &Expr) -> Option<String> {
    match strip(expr) {
        Expr::Path(ExprPath {
            qself: None, path, ..
        }) => Some(segments(path).join("::")),
        Expr::Field(field) => {
            let base = place_key(&field.base)?;
            let member = match &field.member {
                Member::Named(ident) => ident.to_string(),
                Member::Unnamed(index) => index.index.to_string(),
            };
            Some(format!("{base}.{member}"))
        }
        Expr::MethodCall(call) if call.args.is_empty() && call.turbofish.is_none() => {
            let base = place_key(&call.receiver)?;
            Some(format!("{base}.{}()", call.method))
        }
        _ => None,
    }
}

/// The key of the token handed to `.call().token(..)`: borrows, derefs and a
/// trailing `.clone()` are peeled off (`&self.token` -> `self.token`).
pub(crate) fn token_argument_key(expr: &Expr) -> Option<String> {
    match strip(expr) {
        Expr::Reference(reference) => token_argument_key(&reference.expr),
        Expr::Unary(unary) if matches!(unary.op, syn::UnOp::Deref(_)) => {
            token_argument_key(&unary.expr)
        }
        Expr::MethodCall(call) if call.method == "clone" && call.args.is_empty() => {
            token_argument_key(&call.receiver)
        }
        other => place_key(other),
    }
}

/// The first segment of a key made by [`place_key`]: `self.token` -> `self`.
pub(crate) fn key_root(key: &str) -> &str {
    let end = key.find(['.', ':']).unwrap_or(key.len());
    &key[..end]
}

/// The code inside a function-like macro call, as statements, when its
/// tokens parse as comma-separated expressions (`assert!`, `println!`,
/// `vec![a, b]`, `join!`) or as statements. Other macros (`select!`,
/// `matches!` with a pattern, `vec![x; n]`, custom syntax) yield nothing:
/// they are skipped.
pub(crate) fn macro_statements(mac: &Macro) -> Vec<Stmt> {
    let tokens = mac.tokens.clone();
    if let Ok(list) = Punctuated::<Expr, Token![,]>::parse_terminated.parse2(tokens.clone()) {
        return list
            .into_iter()
            .map(|expr| Stmt::Expr(expr, None))
            .collect();
    }
    Block::parse_within.parse2(tokens).unwrap_or_default()
}

/// Whether `tokens` mention the identifier `name`, either as a token or as an
/// inline format argument in a string literal (`"{name}"`, `"{name:?}"`).
pub(crate) fn tokens_mention(tokens: &TokenStream, name: &str) -> bool {
    tokens.clone().into_iter().any(|tree| match tree {
        TokenTree::Ident(ident) => ident == name,
        TokenTree::Group(group) => tokens_mention(&group.stream(), name),
        TokenTree::Literal(literal) => {
            let text = literal.to_string();
            text.starts_with(['"', 'r'])
                && (text.contains(&format!("{{{name}}}")) || text.contains(&format!("{{{name}:")))
        }
        TokenTree::Punct(_) => false,
    })
}

#[cfg(test)]
mod tests {
    use super::{key_root, place_key, token_argument_key, tokens_mention};

    fn expr(source: &str) -> syn::Expr {
        match syn::parse_str(source) {
            Ok(expr) => expr,
            Err(error) => panic!("test input `{source}` does not parse: {error}"),
        }
    }

    #[test]
    fn token_arguments_lose_borrows_and_clones() {
        assert_eq!(
            token_argument_key(&expr("&token")).as_deref(),
            Some("token")
        );
        assert_eq!(
            token_argument_key(&expr("&self.token")).as_deref(),
            Some("self.token")
        );
        assert_eq!(
            token_argument_key(&expr("&ctx.token().clone()")).as_deref(),
            Some("ctx.token()")
        );
        assert_eq!(token_argument_key(&expr("&make(1)")), None);
    }

    #[test]
    fn place_keys_distinguish_fields_from_locals() {
        assert_ne!(place_key(&expr("token")), place_key(&expr("self.token")));
        assert_eq!(key_root("self.token"), "self");
        assert_eq!(key_root("token"), "token");
        assert_eq!(key_root("a::B"), "a");
    }

    #[test]
    fn inline_format_arguments_count_as_mentions() {
        let tokens: proc_macro2::TokenStream = match "\"{attempt:?}\"".parse() {
            Ok(tokens) => tokens,
            Err(error) => panic!("{error}"),
        };
        assert!(tokens_mention(&tokens, "attempt"));
        assert!(!tokens_mention(&tokens, "attempts"));
    }
}
