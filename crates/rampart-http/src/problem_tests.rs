//! The problem documents' own tests: each decision's status, type and headers, in every
//! form (problem JSON, gRPC, Connect).

use super::*;

#[test]
fn json_escapes_quotes_backslashes_and_control_characters() {
    let p = Problem::new(
        StatusCode::GATEWAY_TIMEOUT,
        DEADLINE_EXCEEDED,
        "Deadline exceeded",
        "a \"quoted\" \\ path\n\u{1}",
    );
    assert_eq!(
        p.to_json(),
        r#"{"type":"urn:rampart:deadline-exceeded","title":"Deadline exceeded","status":504,"detail":"a \"quoted\" \\ path\n\u0001"}"#
    );
}

#[test]
fn timeouts_are_504_and_rejections_503_with_retry_after() {
    let timeout: rampart::Error<&str> = rampart::Error::AttemptTimeout {
        timeout: Duration::from_secs(3),
        attempts: 1,
    };
    let p = Problem::from_error(&timeout);
    assert_eq!((p.status().as_u16(), p.kind()), (504, ATTEMPT_TIMEOUT));
    assert!(!p.into_http_response().headers().contains_key(RETRY_AFTER));

    let budget: rampart::Error<&str> = rampart::Error::Rejected {
        reason: RejectReason::BudgetExhausted,
        retry_after: None,
        attempts: 2,
        refused: 0,
        last: None,
    };
    let response = Problem::from_error(&budget).into_http_response();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()[RETRY_AFTER], "1");

    let transport: rampart::Error<&str> = rampart::Error::Inner("connection refused");
    assert_eq!(
        Problem::from_error(&transport).status(),
        StatusCode::BAD_GATEWAY
    );
}

#[test]
fn the_status_without_the_document_is_the_documents_for_every_kind_of_error() {
    let refused = |reason, last: Option<rampart::Error<&'static str>>| rampart::Error::Rejected {
        reason,
        retry_after: None,
        attempts: 1,
        refused: 0,
        last: last.map(Box::new),
    };
    let errors: Vec<rampart::Error<&'static str>> = vec![
        rampart::Error::Inner("reset"),
        rampart::Error::Cancelled,
        rampart::Error::AttemptTimeout {
            timeout: Duration::from_secs(1),
            attempts: 1,
        },
        rampart::Error::IdleTimeout {
            idle: Duration::from_secs(1),
            items: 2,
        },
        refused(RejectReason::BudgetExhausted, None),
        refused(
            RejectReason::BudgetExhausted,
            Some(rampart::Error::Inner("reset")),
        ),
        refused(RejectReason::DependencyUnavailable, None),
        refused(RejectReason::Draining, None),
        rampart::Error::Config(rampart::ConfigError::new(vec![
            rampart::ConfigProblem::new("x", "bad"),
        ])),
    ];
    for error in &errors {
        assert_eq!(
            status_of(error),
            Problem::from_error(error).status(),
            "{error}"
        );
    }
    assert_eq!(
        Problem::from_error(&errors[3]).kind(),
        "urn:rampart:idle-timeout"
    );
}

#[test]
fn a_call_whose_retry_the_budget_refused_answers_as_its_last_failure_without_retry_after() {
    let refused = |last: rampart::Error<&'static str>| rampart::Error::Rejected {
        reason: RejectReason::BudgetExhausted,
        retry_after: Some(Duration::from_millis(300)),
        attempts: 1,
        refused: 0,
        last: Some(Box::new(last)),
    };
    let failed = refused(rampart::Error::Inner("connection reset"));
    let p = Problem::from_error(&failed);
    assert_eq!(
        (p.status().as_u16(), p.kind()),
        (502, "urn:rampart:upstream-error")
    );
    assert_eq!(p.retry_after(), None);
    assert_eq!(
        p.detail(),
        "connection reset; not retried: the retry budget had nothing left after 1 attempt"
    );
    let response = p.into_http_response();
    assert!(!response.headers().contains_key(RETRY_AFTER));

    let timed_out = refused(rampart::Error::AttemptTimeout {
        timeout: Duration::from_secs(1),
        attempts: 1,
    });
    let p = Problem::from_error(&timed_out);
    assert_eq!((p.status().as_u16(), p.kind()), (504, ATTEMPT_TIMEOUT));
    assert_eq!(p.retry_after(), None);
}

#[test]
fn a_refusal_in_grpc_form_carries_pushback_beside_retry_after() {
    let p = Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        OVERLOADED,
        "Overloaded",
        "full",
    )
    .with_retry_after(Some(Duration::from_millis(1500)));
    let response = p.into_grpc_response();
    assert_eq!(response.headers()["grpc-status"], "14");
    assert_eq!(response.headers()["grpc-retry-pushback-ms"], "1500");
    assert_eq!(response.headers()["retry-after"], "2");
    let unsaid = Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        OVERLOADED,
        "Overloaded",
        "full",
    );
    assert_eq!(
        unsaid.into_grpc_response().headers()["grpc-retry-pushback-ms"],
        "1000"
    );
    let timeout = Problem::new(
        StatusCode::GATEWAY_TIMEOUT,
        DEADLINE_EXCEEDED,
        "Deadline exceeded",
        "late",
    );
    assert!(
        !timeout
            .into_grpc_response()
            .headers()
            .contains_key("grpc-retry-pushback-ms")
    );
}

#[test]
fn the_connect_form_is_connects_json_error_with_its_http_status() {
    let p = Problem::new(
        StatusCode::GATEWAY_TIMEOUT,
        EXPIRED_ON_ARRIVAL,
        "Deadline expired on arrival",
        "no \"time\" left",
    );
    let response = p.into_connect_response();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body = response.into_body();
    let bytes = futures_bytes(body);
    assert_eq!(
        bytes,
        r#"{"code":"deadline_exceeded","message":"no \"time\" left"}"#
    );
    let shed = Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        OVERLOADED,
        "Overloaded",
        "full",
    )
    .into_connect_response();
    assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(shed.headers()["retry-after"], "1");
}

/// The bytes of a `Full` body (ready at once).
#[test]
fn the_connect_stream_form_is_an_end_of_stream_message_in_a_200() {
    let p = Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        OVERLOADED,
        "Overloaded",
        "full",
    );
    let response =
        p.into_connect_stream_response(HeaderValue::from_static("application/connect+json"));
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "application/connect+json"
    );
    assert_eq!(response.headers()[RETRY_AFTER], "1");
    let body = futures_bytes(response.into_body());
    let json = br#"{"error":{"code":"unavailable","message":"full"}}"#;
    assert_eq!(body[0], 0x02, "the end-of-stream flag");
    assert_eq!(
        body[1..5],
        u32::try_from(json.len()).expect("short").to_be_bytes()
    );
    assert_eq!(&body[5..], &json[..]);
}

fn futures_bytes(body: Full<Bytes>) -> Bytes {
    use http_body::Body as _;
    let mut body = std::pin::pin!(body);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match body.as_mut().poll_frame(&mut cx) {
        std::task::Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap_or_default(),
        _ => Bytes::new(),
    }
}

#[test]
fn grpc_form_carries_the_status_code_and_an_encoded_message() {
    let p = Problem::new(
        StatusCode::GATEWAY_TIMEOUT,
        DEADLINE_EXCEEDED,
        "Deadline exceeded",
        "100% gone ✓",
    );
    let response = p.into_grpc_response();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["grpc-status"], "4");
    assert_eq!(response.headers()["grpc-message"], "100%25 gone %E2%9C%93");
}
