//! Properties of the header codecs: received bytes are untrusted, so the parsers must never
//! panic, never hand out a deadline above the maximum, and never hand out `CriticalPlus`.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;
use rampart::Criticality;
use rampart_http::header::{
    self, GRPC_TIMEOUT, MAX_DEADLINE_MS, Names, Received, X_CRITICALITY, X_DEADLINE_MS,
    X_RAMPART_RETRY,
};

/// Bytes a header might hold: noise, and near misses of every format.
fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..40),
        "[0-9]{0,12}".prop_map(String::into_bytes),
        "[ +-]?[0-9]{1,10}(ms|\\.5| )?".prop_map(String::into_bytes),
        "[0-9]{0,10}[HMSmunsx]?".prop_map(String::into_bytes),
        "(?i)(sheddable|sheddableplus|critical|criticalplus)".prop_map(String::into_bytes),
        " ?(?i)criticalplus ?".prop_map(String::into_bytes),
    ]
}

fn insert_all(headers: &mut HeaderMap, name: &http::HeaderName, values: &[Vec<u8>]) {
    for value in values {
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.append(name, value);
        }
    }
}

proptest! {
    #[test]
    fn parsers_never_panic_and_never_yield_critical_plus(bytes in header_bytes()) {
        let _ = header::parse_deadline_ms(&bytes);
        let _ = header::parse_grpc_timeout(&bytes);
        let _ = header::parse_retry_after(&bytes, SystemTime::now());
        prop_assert_ne!(header::parse_criticality(&bytes), Some(Criticality::CriticalPlus));
        if let Some(d) = header::parse_deadline_ms(&bytes) {
            prop_assert!(d >= Duration::from_millis(1));
            prop_assert!(d <= Duration::from_millis(MAX_DEADLINE_MS));
        }
        if let Some(d) = header::parse_grpc_timeout(&bytes) {
            prop_assert!(!d.is_zero());
        }
    }

    #[test]
    fn a_received_deadline_never_exceeds_the_maximum(
        deadlines in proptest::collection::vec(header_bytes(), 0..3),
        grpc in proptest::collection::vec(header_bytes(), 0..3),
        levels in proptest::collection::vec(header_bytes(), 0..3),
        retry in proptest::collection::vec(header_bytes(), 0..2),
        maximum_ms in 1u64..100_000_000,
    ) {
        let mut headers = HeaderMap::new();
        insert_all(&mut headers, &X_DEADLINE_MS, &deadlines);
        insert_all(&mut headers, &GRPC_TIMEOUT, &grpc);
        insert_all(&mut headers, &X_CRITICALITY, &levels);
        insert_all(&mut headers, &X_RAMPART_RETRY, &retry);
        let maximum = Duration::from_millis(maximum_ms);
        let received = Received::read(&headers, &Names::default(), Some(maximum));
        if let Some(d) = received.timeout {
            prop_assert!(d <= maximum, "{d:?} > {maximum:?}");
        }
        prop_assert_ne!(received.criticality, Some(Criticality::CriticalPlus));
    }

    #[test]
    fn whole_milliseconds_parse_exactly_within_31_bits(n in 0u64..(1u64 << 33)) {
        let parsed = header::parse_deadline_ms(n.to_string().as_bytes());
        let expected = (1..=MAX_DEADLINE_MS).contains(&n).then(|| Duration::from_millis(n));
        prop_assert_eq!(parsed, expected);
    }

    #[test]
    fn formatting_never_promises_more_time_than_is_left(nanos in 1u64..u64::MAX) {
        let left = Duration::from_nanos(nanos);
        let ms = header::format_deadline_ms(Some(left)).expect("bounded");
        let back = header::parse_deadline_ms(ms.as_bytes()).expect("parses");
        prop_assert!(back <= left.max(Duration::from_millis(1)));
        prop_assert!(back + Duration::from_millis(1) > left.min(Duration::from_millis(MAX_DEADLINE_MS)));
        let grpc = header::format_grpc_timeout(Some(left)).expect("bounded");
        prop_assert!(grpc.len() <= 9);
        let back = header::parse_grpc_timeout(grpc.as_bytes()).expect("parses");
        prop_assert!(back <= left);
    }
}
