use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn deadline_ms_accepts_only_positive_whole_milliseconds_within_31_bits() {
    assert_eq!(parse_deadline_ms(b"1"), Some(ms(1)));
    assert_eq!(parse_deadline_ms(b"2147483647"), Some(ms(MAX_DEADLINE_MS)));
    for bad in [
        &b"0"[..],
        b"-5",
        b"+5",
        b"200ms",
        b"2.5",
        b" 200",
        b"200 ",
        b"",
        b"2147483648",
        b"99999999999999999999999",
        b"1e3",
        b"\xff",
    ] {
        assert_eq!(parse_deadline_ms(bad), None, "{bad:?}");
    }
}

#[test]
fn deadline_ms_formatting_floors_keeps_one_and_writes_nothing_for_zero_or_unbounded() {
    let f = |d| format_deadline_ms(d).map(|v| v.to_str().expect("ascii").to_owned());
    assert_eq!(f(Some(ms(300))), Some("300".into()));
    assert_eq!(f(Some(Duration::from_micros(1999))), Some("1".into()));
    assert_eq!(f(Some(Duration::from_nanos(1))), Some("1".into()));
    assert_eq!(f(Some(Duration::ZERO)), None);
    assert_eq!(f(None), None);
    assert_eq!(
        f(Some(Duration::from_secs(100 * 86_400))),
        Some(MAX_DEADLINE_MS.to_string())
    );
}

#[test]
fn grpc_timeout_parses_every_unit_and_rejects_the_rest() {
    assert_eq!(parse_grpc_timeout(b"2H"), Some(Duration::from_secs(7200)));
    assert_eq!(parse_grpc_timeout(b"2M"), Some(Duration::from_secs(120)));
    assert_eq!(parse_grpc_timeout(b"2S"), Some(Duration::from_secs(2)));
    assert_eq!(parse_grpc_timeout(b"2m"), Some(ms(2)));
    assert_eq!(parse_grpc_timeout(b"2u"), Some(Duration::from_micros(2)));
    assert_eq!(
        parse_grpc_timeout(b"99999999n"),
        Some(Duration::from_nanos(99_999_999))
    );
    for bad in [
        &b"0m"[..],
        b"123456789m",
        b"m",
        b"",
        b"5",
        b"5s",
        b"5x",
        b" 5m",
        b"-5m",
        b"5.0S",
    ] {
        assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
    }
}

#[test]
fn grpc_timeout_formatting_picks_the_finest_unit_that_fits_and_round_trips_down() {
    let f = |d| format_grpc_timeout(Some(d)).map(|v| v.to_str().expect("ascii").to_owned());
    assert_eq!(f(Duration::from_nanos(5)), Some("5n".into()));
    assert_eq!(f(ms(50)), Some("50000000n".into()));
    assert_eq!(f(ms(250)), Some("250000u".into()));
    assert_eq!(f(Duration::from_secs(300)), Some("300000m".into()));
    assert_eq!(
        f(Duration::from_secs(86_400 * 1000)),
        Some("86400000S".into())
    );
    assert_eq!(
        f(Duration::from_secs(86_400 * 2000)),
        Some("2880000M".into())
    );
    assert_eq!(f(Duration::MAX), Some("99999999H".into()));
    assert_eq!(format_grpc_timeout(Some(Duration::ZERO)), None);
    for d in [ms(1), ms(1234), Duration::from_secs(7 * 86_400)] {
        let v = format_grpc_timeout(Some(d)).expect("bounded");
        let back = parse_grpc_timeout(v.as_bytes()).expect("parses");
        assert!(back <= d && d - back < d / 10_000_000 + Duration::from_nanos(1));
    }
}

#[test]
fn the_last_value_of_a_repeated_header_counts() {
    let mut headers = HeaderMap::new();
    headers.append(X_DEADLINE_MS, HeaderValue::from_static("5000"));
    headers.append(X_DEADLINE_MS, HeaderValue::from_static("200"));
    headers.append(X_CRITICALITY, HeaderValue::from_static("Critical"));
    headers.append(X_CRITICALITY, HeaderValue::from_static("sheddable"));
    let got = Received::read(&headers, &Names::default(), None);
    assert_eq!(got.timeout, Some(ms(200)));
    assert_eq!(got.criticality, Some(Criticality::Sheddable));
    assert!(!got.retry);
}

#[test]
fn a_deadline_above_the_maximum_is_ignored_and_the_earlier_of_two_encodings_wins() {
    let mut headers = HeaderMap::new();
    headers.insert(X_DEADLINE_MS, HeaderValue::from_static("3600000"));
    let max = Some(Duration::from_secs(5));
    assert_eq!(
        Received::read(&headers, &Names::default(), max).timeout,
        None
    );
    headers.insert(GRPC_TIMEOUT, HeaderValue::from_static("2S"));
    assert_eq!(
        Received::read(&headers, &Names::default(), max).timeout,
        Some(Duration::from_secs(2))
    );
    assert_eq!(
        Received::read(&headers, &Names::default(), None).timeout,
        Some(Duration::from_secs(2))
    );
}

#[test]
fn received_critical_plus_is_critical_and_the_retry_mark_is_exactly_one() {
    let mut headers = HeaderMap::new();
    headers.insert(X_CRITICALITY, HeaderValue::from_static("CriticalPlus"));
    headers.insert(X_RAMPART_RETRY, HeaderValue::from_static("1"));
    let got = Received::read(&headers, &Names::default(), None);
    assert_eq!(got.criticality, Some(Criticality::Critical));
    assert!(got.retry);
    headers.insert(X_RAMPART_RETRY, HeaderValue::from_static("yes"));
    assert!(!Received::read(&headers, &Names::default(), None).retry);
}

#[test]
fn retry_after_reads_seconds_and_http_dates() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    assert_eq!(parse_retry_after(b"1", now), Some(Duration::from_secs(1)));
    let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
    assert_eq!(
        parse_retry_after(later.as_bytes(), now),
        Some(Duration::from_secs(30))
    );
    let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
    assert_eq!(
        parse_retry_after(earlier.as_bytes(), now),
        Some(Duration::ZERO)
    );
    assert_eq!(parse_retry_after(b"soon", now), None);
    assert_eq!(parse_retry_after(b"-1", now), None);
}

#[test]
fn retry_after_is_written_in_whole_seconds_rounded_up_and_at_least_one() {
    assert_eq!(format_retry_after(None), "1");
    assert_eq!(format_retry_after(Some(ms(10))), "1");
    assert_eq!(format_retry_after(Some(ms(14_000))), "14");
    assert_eq!(format_retry_after(Some(ms(14_001))), "15");
}

#[test]
fn every_deadline_header_is_read_and_the_smallest_counts() {
    // (header, value, the deadline it says alone)
    let table: [(&HeaderName, &str, Option<Duration>); 12] = [
        (&X_DEADLINE_MS, "700", Some(ms(700))),
        (&X_DEADLINE_MS, "0", None),
        (&GRPC_TIMEOUT, "600m", Some(ms(600))),
        (&GRPC_TIMEOUT, "600", None),
        (&X_ENVOY_EXPECTED_RQ_TIMEOUT_MS, "500", Some(ms(500))),
        (&X_ENVOY_EXPECTED_RQ_TIMEOUT_MS, "0", None),
        (&X_ENVOY_EXPECTED_RQ_TIMEOUT_MS, "5s", None),
        (&CONNECT_TIMEOUT_MS, "400", Some(ms(400))),
        (&CONNECT_TIMEOUT_MS, "9999999999", Some(ms(9_999_999_999))),
        (&CONNECT_TIMEOUT_MS, "10000000000", None),
        (&CONNECT_TIMEOUT_MS, "-1", None),
        (&CONNECT_TIMEOUT_MS, "0", None),
    ];
    for (name, value, expected) in table {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_static(value));
        let got = Received::read(&headers, &Names::default(), None).timeout;
        assert_eq!(got, expected, "{name}: {value}");
    }
    let mut headers = HeaderMap::new();
    for (name, value) in [
        (X_DEADLINE_MS, "700"),
        (GRPC_TIMEOUT, "600m"),
        (X_ENVOY_EXPECTED_RQ_TIMEOUT_MS, "500"),
        (CONNECT_TIMEOUT_MS, "400"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    assert_eq!(
        Received::read(&headers, &Names::default(), None).timeout,
        Some(ms(400))
    );
    let max = Some(ms(450));
    headers.insert(CONNECT_TIMEOUT_MS, HeaderValue::from_static("9000"));
    assert_eq!(
        Received::read(&headers, &Names::default(), max).timeout,
        None,
        "every one above the maximum is ignored"
    );
    headers.insert(
        X_ENVOY_EXPECTED_RQ_TIMEOUT_MS,
        HeaderValue::from_static("300"),
    );
    assert_eq!(
        Received::read(&headers, &Names::default(), max).timeout,
        Some(ms(300))
    );
}

#[test]
fn grpc_previous_rpc_attempts_of_one_or_more_marks_a_retry() {
    for (value, retry) in [
        ("1", true),
        ("4", true),
        ("0", false),
        ("x", false),
        ("-1", false),
    ] {
        let mut headers = HeaderMap::new();
        headers.insert(GRPC_PREVIOUS_RPC_ATTEMPTS, HeaderValue::from_static(value));
        let got = Received::read(&headers, &Names::default(), None).retry;
        assert_eq!(got, retry, "grpc-previous-rpc-attempts: {value}");
    }
}

#[test]
fn pushback_is_milliseconds_and_anything_else_means_do_not_retry() {
    assert_eq!(parse_pushback(b"250"), Pushback::After(ms(250)));
    assert_eq!(parse_pushback(b"0"), Pushback::After(Duration::ZERO));
    for bad in [&b"-1"[..], b"", b"soon", b"1.5"] {
        assert_eq!(parse_pushback(bad), Pushback::DoNotRetry, "{bad:?}");
    }
    assert_eq!(format_pushback(Some(ms(250))), "250");
    assert_eq!(format_pushback(Some(Duration::from_micros(1))), "1");
    assert_eq!(format_pushback(Some(Duration::from_micros(2500))), "3");
    assert_eq!(format_pushback(None), "1000");
    assert_eq!(
        format_pushback(Some(Duration::MAX)),
        u64::MAX.to_string().as_str()
    );
}

#[test]
fn retry_after_saturates_instead_of_overflowing() {
    assert_eq!(
        format_retry_after(Some(Duration::MAX)),
        u64::MAX.to_string().as_str()
    );
}

#[test]
fn connect_requests_are_recognised_by_their_headers_or_content_type() {
    let mut headers = HeaderMap::new();
    assert!(!is_connect(&headers));
    headers.insert(CONNECT_PROTOCOL_VERSION, HeaderValue::from_static("1"));
    assert!(is_connect(&headers));
    let mut headers = HeaderMap::new();
    headers.insert(CONNECT_TIMEOUT_MS, HeaderValue::from_static("100"));
    assert!(is_connect(&headers));
    let mut headers = HeaderMap::new();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/connect+json"),
    );
    assert!(is_connect(&headers));
}

#[test]
fn grpc_requests_are_recognised_by_content_type() {
    let mut headers = HeaderMap::new();
    assert!(!is_grpc(&headers));
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/grpc+proto"),
    );
    assert!(is_grpc(&headers));
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    assert!(!is_grpc(&headers));
}

#[test]
fn a_number_asked_for_again_is_the_same_value_and_its_unit_counts() {
    let text = |v: HeaderValue| v.to_str().expect("ascii").to_owned();
    assert_eq!(text(number(4999, "")), "4999");
    assert_eq!(
        text(number(4999, "")),
        "4999",
        "the kept value, handed out again"
    );
    assert_eq!(
        text(number(4999, "m")),
        "4999m",
        "another unit is another value"
    );
    assert_eq!(text(number(4998, "m")), "4998m");
    assert_eq!(text(number(4999, "")), "4999");
}

#[test]
fn values_cut_past_the_end_of_a_buffer_stay_whole() {
    // More values than one buffer holds, some held across its end: each still reads as
    // what it was made from (the kept value is let go before the buffer is replaced).
    let held: Vec<(u64, HeaderValue)> = (0..2_000u64)
        .map(|n| (n, number(1_000_000 + n, "u")))
        .collect();
    for (n, value) in &held {
        assert_eq!(
            value.to_str().expect("ascii"),
            format!("{}u", 1_000_000 + n)
        );
    }
}
