//! Evaluation of literal `std::time::Duration` expressions.
//!
//! Only expressions whose value is plain in the source are evaluated:
//! `Duration::ZERO`, `Duration::MAX`, `Duration::from_secs(5)`,
//! `Duration::from_millis(500)`, `from_micros`, `from_nanos`, `from_mins`,
//! `from_hours`, `Duration::new(1, 500)`, `from_secs_f64(1.5)` and
//! `from_secs_f32(1.5)`, optionally prefixed with `std::time::` or
//! `core::time::`. Anything else (a constant, a variable, arithmetic) is not
//! a literal and evaluates to `None`.

use std::time::Duration;

use syn::{Expr, ExprCall, ExprLit, ExprPath, Lit, Path};

const NANOS_PER_MICRO: u128 = 1_000;
const NANOS_PER_MILLI: u128 = 1_000_000;
const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Returns the value of a literal duration expression in nanoseconds, or
/// `None` when `expr` is not a literal duration.
///
/// ```
/// let expr: syn::Expr = syn::parse_str("std::time::Duration::from_millis(1_500)").unwrap();
/// assert_eq!(rampart_lint::duration::literal_nanos(&expr), Some(1_500_000_000));
///
/// let expr: syn::Expr = syn::parse_str("Duration::from_secs(timeout)").unwrap();
/// assert_eq!(rampart_lint::duration::literal_nanos(&expr), None);
/// ```
pub fn literal_nanos(expr: &Expr) -> Option<u128> {
    match expr {
        Expr::Paren(inner) => literal_nanos(&inner.expr),
        Expr::Group(inner) => literal_nanos(&inner.expr),
        Expr::Path(ExprPath {
            qself: None, path, ..
        }) => match duration_item(path)? {
            "ZERO" => Some(0),
            "MAX" => Some(u128::from(u64::MAX) * NANOS_PER_SEC + (NANOS_PER_SEC - 1)),
            _ => None,
        },
        Expr::Call(call) => constructor_nanos(call),
        _ => None,
    }
}

/// Formats nanoseconds the way `Duration`'s `Debug` does: `10s`, `500ms`,
/// `1.5s`, `0ns`.
///
/// ```
/// assert_eq!(rampart_lint::duration::format_nanos(10_000_000_000), "10s");
/// assert_eq!(rampart_lint::duration::format_nanos(1_500_000), "1.5ms");
/// ```
pub fn format_nanos(nanos: u128) -> String {
    let secs = u64::try_from(nanos / NANOS_PER_SEC).unwrap_or(u64::MAX);
    // The remainder is below one billion, so it always fits.
    let subsec = u32::try_from(nanos % NANOS_PER_SEC).unwrap_or(0);
    format!("{:?}", Duration::new(secs, subsec))
}

fn constructor_nanos(call: &ExprCall) -> Option<u128> {
    let Expr::Path(ExprPath {
        qself: None, path, ..
    }) = &*call.func
    else {
        return None;
    };
    let constructor = duration_item(path)?;
    let args: Vec<&Expr> = call.args.iter().collect();
    match (constructor, args.as_slice()) {
        ("from_secs", [n]) => int_literal(n)?.checked_mul(NANOS_PER_SEC),
        ("from_millis", [n]) => int_literal(n)?.checked_mul(NANOS_PER_MILLI),
        ("from_micros", [n]) => int_literal(n)?.checked_mul(NANOS_PER_MICRO),
        ("from_nanos", [n]) => int_literal(n),
        ("from_mins", [n]) => int_literal(n)?.checked_mul(60 * NANOS_PER_SEC),
        ("from_hours", [n]) => int_literal(n)?.checked_mul(3_600 * NANOS_PER_SEC),
        ("new", [secs, nanos]) => int_literal(secs)?
            .checked_mul(NANOS_PER_SEC)?
            .checked_add(int_literal(nanos)?),
        ("from_secs_f64" | "from_secs_f32", [secs]) => float_secs_to_nanos(float_literal(secs)?),
        ("default", []) => Some(0),
        _ => None,
    }
}

/// When `path` names an associated item of `Duration` (`Duration::X`,
/// `std::time::Duration::X`, `core::time::Duration::X`), returns `X`.
fn duration_item(path: &Path) -> Option<&'static str> {
    let segments: Vec<String> = path
        .segments
        .iter()
        .map(|segment| segment.ident.to_string())
        .collect();
    let (item, prefix) = segments.split_last()?;
    let prefix_ok = matches!(
        prefix
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice(),
        ["Duration"] | ["std" | "core", "time", "Duration"]
    );
    if !prefix_ok {
        return None;
    }
    const ITEMS: [&str; 12] = [
        "ZERO",
        "MAX",
        "from_secs",
        "from_millis",
        "from_micros",
        "from_nanos",
        "from_mins",
        "from_hours",
        "new",
        "from_secs_f64",
        "from_secs_f32",
        "default",
    ];
    ITEMS.into_iter().find(|known| item == known)
}

/// An unsuffixed or integer-suffixed integer literal, e.g. `5`, `1_000u64`.
fn int_literal(expr: &Expr) -> Option<u128> {
    match strip(expr) {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => int.base10_parse::<u128>().ok(),
        _ => None,
    }
}

/// A float literal (`1.5`, `0.0f64`) or an integer literal read as a float.
fn float_literal(expr: &Expr) -> Option<f64> {
    match strip(expr) {
        Expr::Lit(ExprLit {
            lit: Lit::Float(float),
            ..
        }) => float.base10_parse::<f64>().ok(),
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => int.base10_parse::<f64>().ok(),
        _ => None,
    }
}

fn float_secs_to_nanos(secs: f64) -> Option<u128> {
    let nanos = (secs * 1e9).round();
    // `u128::MAX as f64` is about 3.4e38; anything this large is not a
    // duration `Duration::from_secs_f64` accepts anyway.
    if nanos.is_finite() && (0.0..3.0e38).contains(&nanos) {
        // Non-negative, finite and in range: the conversion cannot wrap.
        Some(nanos as u128)
    } else {
        None
    }
}

fn strip(expr: &Expr) -> &Expr {
    match expr {
        Expr::Paren(inner) => strip(&inner.expr),
        Expr::Group(inner) => strip(&inner.expr),
        _ => expr,
    }
}

#[cfg(test)]
mod tests {
    use super::{format_nanos, literal_nanos};

    fn eval(source: &str) -> Option<u128> {
        match syn::parse_str::<syn::Expr>(source) {
            Ok(expr) => literal_nanos(&expr),
            Err(error) => panic!("test input `{source}` does not parse: {error}"),
        }
    }

    #[test]
    fn zero_is_recognised_in_every_spelling() {
        for source in [
            "Duration::ZERO",
            "std::time::Duration::ZERO",
            "core::time::Duration::ZERO",
            "::std::time::Duration::ZERO",
            "Duration::from_secs(0)",
            "Duration::from_millis(0)",
            "Duration::from_micros(0)",
            "Duration::from_nanos(0)",
            "Duration::from_secs_f64(0.0)",
            "Duration::from_secs_f32(0.0)",
            "Duration::new(0, 0)",
            "std::time::Duration::from_millis(0u64)",
            "(Duration::from_secs(0))",
            "Duration::default()",
        ] {
            assert_eq!(eval(source), Some(0), "{source}");
        }
    }

    #[test]
    fn constructors_scale_to_nanoseconds() {
        assert_eq!(eval("Duration::from_secs(5)"), Some(5_000_000_000));
        assert_eq!(eval("Duration::from_millis(1_500)"), Some(1_500_000_000));
        assert_eq!(eval("Duration::from_micros(7)"), Some(7_000));
        assert_eq!(eval("Duration::from_nanos(42)"), Some(42));
        assert_eq!(eval("Duration::from_mins(2)"), Some(120_000_000_000));
        assert_eq!(eval("Duration::from_hours(1)"), Some(3_600_000_000_000));
        assert_eq!(eval("Duration::new(1, 500)"), Some(1_000_000_500));
        assert_eq!(eval("Duration::from_secs_f64(1.5)"), Some(1_500_000_000));
        assert_eq!(eval("Duration::from_secs_f32(0.25)"), Some(250_000_000));
        assert_eq!(eval("Duration::from_secs(0x10)"), Some(16_000_000_000));
    }

    #[test]
    fn non_literal_durations_are_not_evaluated() {
        for source in [
            "Duration::from_secs(n)",
            "Duration::from_secs(1 + 1)",
            "TIMEOUT",
            "Duration::from_secs(1) * 2",
            "other::Duration::from_secs(1)",
            "Instant::from_secs(1)",
            "Duration::from_secs()",
            "Duration::new(1)",
            "Duration::from_secs_f64(-1.0)",
            "Duration::from_secs_f64(1e300)",
            "config.timeout",
        ] {
            assert_eq!(eval(source), None, "{source}");
        }
    }

    #[test]
    fn huge_literals_do_not_overflow() {
        assert_eq!(
            eval("Duration::from_secs(18446744073709551615)"),
            Some(18_446_744_073_709_551_615 * 1_000_000_000)
        );
        assert_eq!(
            eval("Duration::from_hours(340282366920938463463374607431768211455)"),
            None
        );
        assert!(eval("Duration::MAX").is_some());
    }

    #[test]
    fn durations_format_like_debug() {
        assert_eq!(format_nanos(10_000_000_000), "10s");
        assert_eq!(format_nanos(500_000_000), "500ms");
        assert_eq!(format_nanos(1_500_000_000), "1.5s");
        assert_eq!(format_nanos(0), "0ns");
        let max = eval("Duration::MAX").unwrap_or_default();
        assert_eq!(format_nanos(max), format!("{:?}", std::time::Duration::MAX));
    }
}
