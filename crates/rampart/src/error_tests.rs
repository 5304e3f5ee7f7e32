//! The errors' own tests: their messages, sources and sizes.

use super::*;

#[test]
fn reject_reasons_have_label_names_apart_from_their_messages() {
    let labels = [
        RejectReason::BudgetExhausted,
        RejectReason::DependencyUnavailable,
        RejectReason::Overloaded,
        RejectReason::Draining,
    ]
    .map(RejectReason::as_str);
    assert_eq!(
        labels,
        [
            "budget_exhausted",
            "dependency_unavailable",
            "overloaded",
            "draining"
        ]
    );
    assert_eq!(RejectReason::Overloaded.to_string(), "admission refused");
}

#[test]
fn an_unfit_retry_names_what_it_needed_besides_the_backoff() {
    let ms = Duration::from_millis;
    let floor = Unfit::new(Duration::ZERO, ms(5), ms(10), true);
    assert_eq!(
        floor.to_string(),
        "the next backoff of 0ns and the 10ms min_attempt_time would not fit in the 5ms left"
    );
    let latency = Unfit::new(ms(300), ms(700), ms(500), false);
    assert_eq!(
        latency.to_string(),
        "the next backoff of 300ms and the 500ms an attempt typically takes would not fit \
         in the 700ms left"
    );
    let backoff = Unfit::new(ms(800), ms(600), Duration::ZERO, true);
    assert_eq!(
        backoff.to_string(),
        "the next backoff of 800ms would not fit in the 600ms left"
    );
    assert_eq!(
        (floor.delay(), floor.needed(), floor.left()),
        (Duration::ZERO, ms(10), ms(5))
    );
    assert!(floor.is_min_attempt_time() && !latency.is_min_attempt_time());
    let forever = Unfit::new(Duration::MAX, Duration::MAX, Duration::ZERO, true);
    assert_eq!(forever.left(), Duration::from_nanos(u64::MAX), "saturates");
}

/// A third duration in `Unfit` once grew `Error<E>` by 16 bytes, and every call future
/// that holds one with it.
#[test]
#[cfg(target_pointer_width = "64")]
fn an_error_of_an_io_error_stays_64_bytes() {
    assert_eq!(size_of::<Unfit>(), 32);
    assert_eq!(size_of::<Option<Unfit>>(), 32);
    assert_eq!(size_of::<Error<std::io::Error>>(), 64);
}

#[test]
fn deadline_message_names_the_deadline_and_attempts_and_the_source_is_the_last_failure() {
    let e: Error<&str> = Error::DeadlineExceeded {
        timeout: Duration::from_millis(200),
        source: DeadlineSource::Policy,
        attempts: 1,
        unfit: None,
        last: Some(Box::new(Error::Inner("connection reset"))),
    };
    assert_eq!(e.to_string(), "deadline of 200ms exceeded after 1 attempt");
    let io: Error<std::io::Error> = Error::DeadlineExceeded {
        timeout: Duration::from_millis(200),
        source: DeadlineSource::Policy,
        attempts: 1,
        unfit: None,
        last: Some(Box::new(Error::Inner(std::io::Error::other(
            "connection reset",
        )))),
    };
    let source = StdError::source(&io).map(ToString::to_string);
    assert_eq!(source.as_deref(), Some("connection reset"));
    assert_eq!(e.last().inner(), Some(&"connection reset"));
}

#[test]
fn rejection_message_says_who_refused_and_when_to_come_back() {
    let e: Error<&str> = Error::Rejected {
        reason: RejectReason::BudgetExhausted,
        retry_after: Some(Duration::from_millis(300)),
        attempts: 2,
        refused: 0,
        last: None,
    };
    assert_eq!(
        e.to_string(),
        "rejected: retry budget exhausted after 2 attempts sent; retry after 300ms"
    );
    assert!(e.is_rejected());
    assert_eq!(e.retry_after(), Some(Duration::from_millis(300)));
}

#[test]
fn rejection_message_says_what_was_sent_and_what_was_refused() {
    let rejected = |reason, attempts, refused| {
        Error::<&str>::Rejected {
            reason,
            retry_after: None,
            attempts,
            refused,
            last: None,
        }
        .to_string()
    };
    let open = RejectReason::DependencyUnavailable;
    let overloaded = RejectReason::Overloaded;
    assert_eq!(
        rejected(open, 0, 0),
        "rejected: circuit breaker open before the first attempt"
    );
    assert_eq!(
        rejected(overloaded, 1, 1),
        "rejected: admission refused; nothing sent, 1 attempt refused"
    );
    assert_eq!(
        rejected(overloaded, 3, 2),
        "rejected: admission refused after 1 attempt sent and 2 attempts refused"
    );
    assert_eq!(
        rejected(open, 2, 0),
        "rejected: circuit breaker open after 2 attempts sent"
    );
}

#[test]
fn idle_timeout_message_gives_the_timeout_and_the_items_delivered_and_is_a_timeout() {
    let e: Error<&str> = Error::IdleTimeout {
        idle: Duration::from_secs(5),
        items: 1,
    };
    assert_eq!(
        e.to_string(),
        "stream stalled: no item within its 5s idle timeout after 1 item"
    );
    assert!(e.is_timeout());
    assert_eq!(e.attempts(), None);
}

#[test]
fn config_error_lists_every_problem() {
    let e = ConfigError::new(vec![
        ConfigProblem::new("max_attempts", "must be at least 1 (was 0)"),
        ConfigProblem::new("attempt_timeout", "must be positive (was 0ns)"),
    ]);
    assert_eq!(
        e.to_string(),
        "max_attempts must be at least 1 (was 0); attempt_timeout must be positive (was 0ns)"
    );
}
