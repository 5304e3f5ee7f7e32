//! The gRPC edge's own tests, without a channel: the status each of rampart's decisions maps
//! to, and how origins and repeatable methods are matched.

use std::time::Duration;

use super::*;

fn status(error: rampart::Error<BoxError>) -> Status {
    Status::from(ClientError::Call(error))
}

fn rejected(reason: RejectReason, after: Option<Duration>) -> rampart::Error<BoxError> {
    rampart::Error::Rejected {
        reason,
        retry_after: after,
        attempts: 1,
        refused: 0,
        last: None,
    }
}

#[test]
fn a_call_whose_retry_the_budget_refused_gets_its_last_failures_status_and_no_pushback() {
    let unavailable: BoxError = Box::new(Status::unavailable("leaf down"));
    let refused = rampart::Error::Rejected {
        reason: RejectReason::BudgetExhausted,
        retry_after: Some(Duration::from_millis(300)),
        attempts: 1,
        refused: 0,
        last: Some(Box::new(rampart::Error::Inner(unavailable))),
    };
    let answer = status(refused);
    assert_eq!(answer.code(), Code::Unavailable);
    assert_eq!(answer.message(), "leaf down");
    assert!(answer.metadata().get("grpc-retry-pushback-ms").is_none());
    // Refused before any attempt failed: still a refusal with its pushback.
    let before = status(rejected(RejectReason::BudgetExhausted, None));
    assert_eq!(before.code(), Code::ResourceExhausted);
    assert!(before.metadata().get("grpc-retry-pushback-ms").is_some());
}

#[test]
fn an_origin_with_a_scheme_is_keyed_by_its_authority_with_an_explicit_port() {
    assert_eq!(origin_key("inventory:50051"), "inventory:50051");
    assert_eq!(origin_key("http://inventory:50051"), "inventory:50051");
    assert_eq!(origin_key("http://inventory:50051/"), "inventory:50051");
    assert_eq!(origin_key("https://inventory"), "inventory:443");
    assert_eq!(origin_key("http://inventory"), "inventory:80");
    assert_eq!(origin_key("http://[::1]:9"), "[::1]:9");
    assert_eq!(origin_key("127.0.0.1:50051"), "127.0.0.1:50051");
}

#[test]
fn a_repeatable_method_matches_its_path_and_a_service_wildcard_every_method_of_it() {
    let get = Method::parse("/inventory.Stock/Get");
    assert!(get.matches("/inventory.Stock/Get"));
    assert!(!get.matches("/inventory.Stock/GetAll"));
    assert_eq!(Method::parse("inventory.Stock/Get"), get);
    let all = Method::parse("/inventory.Stock/*");
    assert!(all.matches("/inventory.Stock/Get"));
    assert!(all.matches("/inventory.Stock/Put"));
    assert!(!all.matches("/inventory.StockLevels/Get"));
}

#[test]
fn a_service_covers_its_methods_and_itself_and_a_method_covers_only_itself() {
    let service = Method::parse("/inventory.Stock/*");
    let get = Method::parse("/inventory.Stock/Get");
    assert!(service.covers(&get));
    assert!(service.covers(&service));
    assert!(get.covers(&get));
    assert!(!get.covers(&service));
    assert!(!get.covers(&Method::parse("/inventory.Stock/Put")));
    assert!(!service.covers(&Method::parse("/inventory.Catalog/*")));
    assert_eq!(service.to_string(), "/inventory.Stock/*");
    assert_eq!(
        Method::parse("inventory.Stock/Get").to_string(),
        "/inventory.Stock/Get"
    );
}

#[test]
fn rampart_decisions_map_to_the_grpc_codes_a_caller_expects() {
    let timeout = status(rampart::Error::AttemptTimeout {
        timeout: Duration::from_millis(300),
        attempts: 2,
    });
    assert_eq!(timeout.code(), Code::DeadlineExceeded);
    assert_eq!(
        timeout.message(),
        "attempt timed out at its 300ms ceiling after 2 attempts"
    );
    let open = status(rejected(
        RejectReason::DependencyUnavailable,
        Some(Duration::from_millis(1500)),
    ));
    assert_eq!(open.code(), Code::Unavailable);
    assert_eq!(
        open.metadata()
            .get("grpc-retry-pushback-ms")
            .map(|v| v.to_str().ok()),
        Some(Some("1500"))
    );
    let draining = status(rejected(RejectReason::Draining, None));
    assert_eq!(draining.code(), Code::Unavailable);
    for reason in [RejectReason::BudgetExhausted, RejectReason::Overloaded] {
        let refused = status(rejected(reason, Some(Duration::from_millis(20))));
        assert_eq!(refused.code(), Code::ResourceExhausted, "{reason}");
        assert_eq!(
            refused
                .metadata()
                .get("grpc-retry-pushback-ms")
                .map(|v| v.to_str().ok()),
            Some(Some("20"))
        );
    }
    assert_eq!(status(rampart::Error::Cancelled).code(), Code::Cancelled);
    let transport = status(rampart::Error::Inner(Box::new(Status::unavailable("down"))));
    assert_eq!(
        (transport.code(), transport.message()),
        (Code::Unavailable, "down")
    );
    let body = Status::from(ClientError::<BoxError>::Body("broken".into()));
    assert_eq!(body.code(), Code::Internal);
    let spent = Status::from(ClientError::<BoxError>::QuotaSpent {
        host: "api.example:443".into(),
        retry_after: Duration::from_secs(4),
    });
    assert_eq!(spent.code(), Code::ResourceExhausted);
    assert_eq!(
        spent.message(),
        "not sent: the quota of api.example:443 is spent until it resets in 4s"
    );
    assert_eq!(
        spent
            .metadata()
            .get("grpc-retry-pushback-ms")
            .map(|v| v.to_str().ok()),
        Some(Some("4000"))
    );
}
