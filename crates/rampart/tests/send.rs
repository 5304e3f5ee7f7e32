//! The call a service writes first, where services run it: borrowing `&self` and `&str`,
//! awaited inside an axum handler and inside `tokio::spawn`. Compiling is most of the
//! assertion (a call future that is not `Send` fails to build here); running checks the value.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{Request, StatusCode};
use axum::routing::get;
use rampart::hedge::Hedge;
use rampart::{CancellationToken, Deadline, Error, Policy};
use tower::ServiceExt;

#[derive(Debug)]
struct PriceError;

impl std::fmt::Display for PriceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("price backend failed")
    }
}

impl std::error::Error for PriceError {}

/// A backend that fails its first call, then answers the SKU's length in cents.
struct Backend {
    calls: AtomicU32,
}

impl Backend {
    async fn fetch(&self, sku: &str, token: CancellationToken) -> Result<u32, PriceError> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if token.is_cancelled() || self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(PriceError);
        }
        Ok(sku.len() as u32 * 100)
    }
}

struct PriceClient {
    policy: Policy,
    backend: Backend,
}

impl PriceClient {
    fn new(policy: Policy) -> Arc<Self> {
        Arc::new(PriceClient {
            policy,
            backend: Backend {
                calls: AtomicU32::new(0),
            },
        })
    }

    /// The same call within the deadline its own caller gave (a header, say).
    async fn get_price_within(
        &self,
        sku: &str,
        caller: Deadline,
    ) -> Result<u32, Error<PriceError>> {
        self.policy
            .call()
            .deadline(caller)
            .run(async |attempt| self.backend.fetch(sku, attempt.token()).await)
            .await
    }

    /// The example, verbatim in shape: the callback borrows `self` and `sku`.
    async fn get_price(&self, sku: &str) -> Result<u32, Error<PriceError>> {
        self.policy
            .run(async |attempt| self.backend.fetch(sku, attempt.token()).await)
            .await
    }
}

fn retrying() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .total_timeout(Duration::from_secs(2))
        .attempt_timeout(Duration::from_millis(500))
        .backoff(rampart::backoff::Backoff::constant(Duration::from_millis(
            10,
        )))
        .build()
        .expect("valid policy")
}

async fn price(
    State(client): State<Arc<PriceClient>>,
    Path(sku): Path<String>,
) -> Result<String, StatusCode> {
    client
        .get_price(&sku)
        .await
        .map(|cents| cents.to_string())
        .map_err(|_| StatusCode::BAD_GATEWAY)
}

#[tokio::test(start_paused = true)]
async fn borrowing_call_runs_inside_an_axum_handler() {
    let client = PriceClient::new(retrying());
    let app = axum::Router::new()
        .route("/price/{sku}", get(price))
        .with_state(Arc::clone(&client));
    let request = Request::get("/price/sku-42")
        .body(axum::body::Body::empty())
        .expect("valid request");
    let response = app.oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    let body = axum::body::to_bytes(response.into_body(), 64)
        .await
        .expect("small body");
    assert_eq!(&body[..], b"600");
    assert_eq!(client.backend.calls.load(Ordering::SeqCst), 2, "one retry");
}

#[tokio::test(start_paused = true)]
async fn borrowing_call_runs_inside_tokio_spawn() {
    let client = PriceClient::new(retrying());
    let spawned = Arc::clone(&client);
    let handle = tokio::spawn(async move {
        let sku = String::from("sku-7");
        spawned.get_price(&sku).await
    });
    assert_eq!(handle.await.expect("joined").ok(), Some(500));
}

#[tokio::test(start_paused = true)]
async fn borrowing_call_within_a_given_deadline_runs_inside_tokio_spawn() {
    let client = PriceClient::new(retrying());
    let spawned = Arc::clone(&client);
    let handle = tokio::spawn(async move {
        let sku = String::from("sku-7");
        // Room for the failed first attempt (5 ms), the 10 ms backoff and the retry (5 ms).
        spawned
            .get_price_within(&sku, Deadline::after(Duration::from_millis(30)))
            .await
    });
    assert_eq!(handle.await.expect("joined").ok(), Some(500));
    // 12 ms, to a backend failing its first call: its 10 ms backoff cannot fit.
    let cut = PriceClient::new(retrying())
        .get_price_within("sku", Deadline::after(Duration::from_millis(12)))
        .await;
    assert!(
        matches!(cut, Err(Error::DeadlineExceeded { attempts: 1, .. })),
        "{cut:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn borrowing_call_of_a_hedging_policy_runs_inside_tokio_spawn() {
    let policy = Policy::builder()
        .max_attempts(3)
        .hedge(Hedge::fixed(Duration::from_millis(1)))
        .build()
        .expect("valid policy");
    let client = PriceClient::new(policy);
    let spawned = Arc::clone(&client);
    let handle = tokio::spawn(async move { spawned.get_price("sku").await });
    // The first leg fails, the hedge started 1 ms later answers.
    assert_eq!(handle.await.expect("joined").ok(), Some(300));
}

#[tokio::test(start_paused = true)]
async fn owning_callback_returns_an_async_move_block() {
    let client = PriceClient::new(retrying());
    let owned = Arc::clone(&client);
    let handle = tokio::spawn(async move {
        let policy = owned.policy.clone();
        policy
            .run(move |attempt: &rampart::Attempt| {
                let client = Arc::clone(&owned);
                let token = attempt.token();
                async move { client.backend.fetch("abc", token).await }
            })
            .await
    });
    assert_eq!(handle.await.expect("joined").ok(), Some(300));
}

/// A one-attempt policy whose failures a fallback answers with a cached price, borrowing
/// `self` and `sku` in both the callback and the fallback.
async fn price_or_cached(
    State(client): State<Arc<PriceClient>>,
    Path(sku): Path<String>,
) -> Result<String, StatusCode> {
    let cached = sku.len() as u32;
    client
        .policy
        .call()
        .fallback(
            rampart::fallback::Fallback::on([rampart::StopReason::AttemptsExhausted])
                .with(async |_error| Ok(cached)),
        )
        .run(async |attempt| client.backend.fetch(&sku, attempt.token()).await)
        .await
        .map(|cents| cents.to_string())
        .map_err(|_| StatusCode::BAD_GATEWAY)
}

#[tokio::test(start_paused = true)]
async fn a_call_with_a_borrowing_fallback_runs_inside_an_axum_handler() {
    let one_attempt = Policy::builder()
        .max_attempts(1)
        .build()
        .expect("valid policy");
    let client = PriceClient::new(one_attempt);
    let app = axum::Router::new()
        .route("/price/{sku}", get(price_or_cached))
        .with_state(Arc::clone(&client));
    let request = Request::get("/price/sku-42")
        .body(axum::body::Body::empty())
        .expect("valid request");
    let response = app.oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    let body = axum::body::to_bytes(response.into_body(), 64)
        .await
        .expect("small body");
    assert_eq!(
        &body[..],
        b"6",
        "the backend's first call fails: the cached price answers"
    );
}
