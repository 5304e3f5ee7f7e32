//! How many cases a property test runs: shared by the proptest files of this crate.

use proptest::prelude::ProptestConfig;

/// `default` cases, or as many as `PROPTEST_CASES` says when it is set (as proptest's own
/// default configuration reads it), so CI can run more and a quick local run fewer.
pub(crate) fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(default);
    ProptestConfig::with_cases(cases)
}
