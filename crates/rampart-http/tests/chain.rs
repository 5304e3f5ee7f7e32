//! Three real services on loopback (edge → middle → leaf), each an axum server with the
//! inbound layer and a hyper-util client behind the outbound layer. Real sockets mean real
//! time: the waits are tens of milliseconds, and the assertions are what the layers
//! guarantee (a deadline never grows along the chain), never exact durations.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rampart::{Ambient, Instant};
use rampart_http::{EdgeEvent, InboundLayer, Outbound, OutboundLayer, ReplayBody};
use tower::ServiceExt;
use tower_layer::Layer;

type HttpClient = Outbound<Client<HttpConnector, ReplayBody<Full<Bytes>>>>;

/// What a hop saw when a request arrived.
#[derive(Debug, Clone)]
struct Arrival {
    header: Option<u64>,
    criticality: Option<String>,
    deadline: Option<Instant>,
}

/// One service in the chain.
#[derive(Clone)]
struct Hop {
    next: Option<(HttpClient, String)>,
    /// Time spent before calling the next hop (or, at the leaf, before answering).
    work: Duration,
    arrivals: Arc<Mutex<Vec<Arrival>>>,
    finished: Arc<AtomicBool>,
    dropped: Arc<AtomicBool>,
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Hop {
    fn new(work: Duration, next: Option<(OutboundLayer, SocketAddr)>) -> Self {
        Hop {
            next: next.map(|(layer, addr)| {
                let client = Client::builder(TokioExecutor::new()).build_http();
                (layer.layer(client), format!("http://{addr}/"))
            }),
            work,
            arrivals: Arc::default(),
            finished: Arc::default(),
            dropped: Arc::default(),
        }
    }

    fn arrivals(&self) -> Vec<Arrival> {
        self.arrivals.lock().expect("arrivals").clone()
    }
}

async fn handle(State(hop): State<Hop>, headers: HeaderMap) -> Response {
    let ambient = Ambient::current();
    hop.arrivals.lock().expect("arrivals").push(Arrival {
        header: headers
            .get("x-deadline-ms")
            .and_then(|v| v.to_str().ok()?.parse().ok()),
        criticality: headers
            .get("x-criticality")
            .and_then(|v| Some(v.to_str().ok()?.to_owned())),
        deadline: ambient.deadline().map(|d| d.instant()),
    });
    let _guard = DropFlag(hop.dropped.clone());
    tokio::time::sleep(hop.work).await;
    let response = match &hop.next {
        Some((client, url)) => {
            let request = Request::get(url)
                .body(Full::default())
                .expect("valid request");
            match client.clone().oneshot(request).await {
                Ok(response) => response.map(Body::new),
                Err(error) => error.into_problem_response().map(Body::new),
            }
        }
        None => Response::new(Body::from("leaf")),
    };
    hop.finished.store(true, Ordering::SeqCst);
    response
}

async fn serve(hop: &Hop, inbound: InboundLayer) -> SocketAddr {
    let app = Router::new()
        .route("/", get(handle))
        .with_state(hop.clone())
        .layer(inbound);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// The edge's client call in the test: plain hyper-util, no layer.
async fn call(addr: SocketAddr, headers: &[(&'static str, &'static str)]) -> (StatusCode, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = Request::get(format!("http://{addr}/"))
        .body(Full::default())
        .expect("valid request");
    for (name, value) in headers {
        request
            .headers_mut()
            .insert(*name, value.parse().expect("valid header"));
    }
    let response = client.request(request).await.expect("a response");
    let status = response.status();
    let body = response.into_body().collect().await.expect("a body");
    (
        status,
        String::from_utf8_lossy(&body.to_bytes()).into_owned(),
    )
}

fn outbound() -> OutboundLayer {
    OutboundLayer::builder()
        .build()
        .expect("valid outbound layer")
}

/// The edge gives each request `budget` ms.
fn edge_inbound(budget: u64) -> InboundLayer {
    InboundLayer::new().default_timeout(Duration::from_millis(budget))
}

const MS: Duration = Duration::from_millis(1);

#[tokio::test]
async fn the_leaf_sees_no_more_than_the_edge_gave_minus_the_time_already_spent() {
    let leaf = Hop::new(Duration::ZERO, None);
    let leaf_addr = serve(&leaf, InboundLayer::new()).await;
    let middle = Hop::new(20 * MS, Some((outbound(), leaf_addr)));
    let middle_addr = serve(&middle, InboundLayer::new()).await;
    let edge = Hop::new(10 * MS, Some((outbound(), middle_addr)));
    // A generous budget, so that a slow machine cannot make the chain miss it: what is
    // checked is how the deadline shrinks, not how fast loopback is.
    let edge_addr = serve(&edge, edge_inbound(2000)).await;

    let (status, body) = call(edge_addr, &[("x-criticality", "CriticalPlus")]).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "leaf"));

    let edge_deadline = edge.arrivals()[0].deadline.expect("the edge's own budget");
    let middle = &middle.arrivals()[0];
    let leaf = &leaf.arrivals()[0];
    let sent_to_middle = middle.header.expect("a deadline header");
    let sent_to_leaf = leaf.header.expect("a deadline header");
    println!(
        "edge gave 2000 ms; middle received {sent_to_middle} ms; leaf received {sent_to_leaf} ms"
    );
    // The edge spent 10 ms, the middle 20 ms, before calling on.
    assert!(sent_to_middle <= 1990, "{sent_to_middle}");
    assert!(sent_to_leaf <= sent_to_middle - 20, "{sent_to_leaf}");
    assert!(middle.deadline.is_some() && leaf.deadline.is_some());
    // A span crosses the wire, not an instant: a hop's deadline is its arrival plus what it
    // received, so it may lie later than the edge's by the transit it cannot see. Only the
    // spans are compared above; the instants are printed.
    println!(
        "leaf deadline - edge deadline: {:?}",
        leaf.deadline
            .map(|d| d.checked_duration_since(edge_deadline))
    );
    // CriticalPlus from outside is read as Critical, and sent on as Critical.
    assert_eq!(middle.criticality.as_deref(), Some("Critical"));
    assert_eq!(leaf.criticality.as_deref(), Some("Critical"));
}

#[tokio::test]
async fn a_leaf_that_outlives_the_deadline_makes_the_edge_answer_504_within_its_budget() {
    let leaf = Hop::new(Duration::from_secs(3), None);
    let leaf_addr = serve(&leaf, InboundLayer::new()).await;
    let middle = Hop::new(Duration::ZERO, Some((outbound(), leaf_addr)));
    let middle_addr = serve(&middle, InboundLayer::new()).await;
    let edge = Hop::new(Duration::ZERO, Some((outbound(), middle_addr)));
    let edge_addr = serve(&edge, edge_inbound(300)).await;

    let started = std::time::Instant::now();
    let (status, body) = call(edge_addr, &[]).await;
    let elapsed = started.elapsed();
    println!("edge answered {status} after {elapsed:?}: {body}");
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert!(body.contains("urn:rampart:"), "{body}");
    // Bounded by the 300 ms budget, not by the leaf's 3 s of work.
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[tokio::test]
async fn with_enforce_the_leaf_handler_is_dropped_at_its_deadline() {
    let leaf = Hop::new(Duration::from_secs(3), None);
    let enforced = Arc::new(AtomicU32::new(0));
    let seen = enforced.clone();
    // The leaf keeps 100 ms for itself: its deadline passes before anyone upstream gives up,
    // so what stops the handler is the enforcement, not a closed connection.
    let leaf_inbound = InboundLayer::new()
        .reserve(100 * MS)
        .enforce(true)
        .listener(move |e: &EdgeEvent<'_>| {
            if matches!(e, EdgeEvent::Enforced { .. }) {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        });
    let leaf_addr = serve(&leaf, leaf_inbound).await;
    let middle = Hop::new(Duration::ZERO, Some((outbound(), leaf_addr)));
    let middle_addr = serve(&middle, InboundLayer::new()).await;
    let edge = Hop::new(Duration::ZERO, Some((outbound(), middle_addr)));
    let edge_addr = serve(&edge, edge_inbound(300)).await;

    let (status, _) = call(edge_addr, &[]).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert!(enforced.load(Ordering::SeqCst) >= 1, "the leaf enforced");
    assert!(
        leaf.dropped.load(Ordering::SeqCst),
        "the handler was dropped"
    );
    assert!(
        !leaf.finished.load(Ordering::SeqCst),
        "the handler ran to the end"
    );
}

#[tokio::test]
async fn a_middle_hop_whose_deadline_has_passed_makes_no_outbound_call() {
    let leaf = Hop::new(Duration::ZERO, None);
    let leaf_addr = serve(&leaf, InboundLayer::new()).await;
    let middle = Hop::new(Duration::ZERO, Some((outbound(), leaf_addr)));
    // 10 ms received, 50 ms reserved: expired on arrival (and not rejected: the handler runs).
    let middle_addr = serve(&middle, InboundLayer::new().reserve(50 * MS)).await;

    let (status, body) = call(middle_addr, &[("x-deadline-ms", "10")]).await;
    println!("middle answered {status}: {body}");
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert!(body.contains("before the first attempt"), "{body}");
    assert_eq!(middle.arrivals().len(), 1, "the middle's handler ran");
    assert!(leaf.arrivals().is_empty(), "the leaf was called");
}
