//! Three services on loopback, edge → middle → leaf, each an axum server behind the inbound
//! layer, each calling the next through a hyper-util client behind the outbound layer. The
//! edge gives every request 300 ms; watch the deadline shrink along the chain.
//!
//! ```sh
//! cargo run -p rampart-http --example chain
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use bytes::Bytes;
use http::{HeaderMap, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rampart::{Criticality, Deadline};
use rampart_http::{InboundLayer, Outbound, OutboundLayer, ReplayBody};
use tower::ServiceExt;
use tower_layer::Layer;

type HttpClient = Outbound<Client<HttpConnector, ReplayBody<Full<Bytes>>>>;

#[derive(Clone)]
struct Hop {
    name: &'static str,
    /// Time this hop works before calling on (or answering, at the leaf).
    work: Duration,
    next: Option<(HttpClient, SocketAddr)>,
}

async fn handle(State(hop): State<Hop>, headers: HeaderMap, uri: Uri) -> Response {
    let received = headers
        .get("x-deadline-ms")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none");
    let left = Deadline::current().map(|d| d.remaining());
    println!(
        "  {:<6} received x-deadline-ms: {:>4}   time left here: {:>9}   criticality: {}",
        hop.name,
        received,
        left.map_or_else(|| "none".to_owned(), |d| format!("{:.1?}", d)),
        Criticality::current(),
    );
    let slow_leaf = uri.query() == Some("slow");
    let work = if slow_leaf && hop.next.is_none() {
        Duration::from_secs(2)
    } else {
        hop.work
    };
    tokio::time::sleep(work).await;
    match &hop.next {
        None => Response::new(Body::from(format!("answered by the {}", hop.name))),
        Some((client, addr)) => {
            let uri = if slow_leaf {
                format!("http://{addr}/?slow")
            } else {
                format!("http://{addr}/")
            };
            let request = Request::get(uri)
                .body(Full::default())
                .expect("valid request");
            match client.clone().oneshot(request).await {
                Ok(response) => response.map(Body::new),
                Err(error) => error.into_problem_response().map(Body::new),
            }
        }
    }
}

async fn serve(hop: Hop, inbound: InboundLayer) -> SocketAddr {
    let app = Router::new()
        .route("/", get(handle))
        .with_state(hop)
        .layer(inbound);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn client() -> HttpClient {
    OutboundLayer::new().layer(Client::builder(TokioExecutor::new()).build_http())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let leaf = Hop {
        name: "leaf",
        work: Duration::from_millis(5),
        next: None,
    };
    let leaf = serve(leaf, InboundLayer::new().reserve(Duration::from_millis(5))).await;
    let middle = Hop {
        name: "middle",
        work: Duration::from_millis(40),
        next: Some((client(), leaf)),
    };
    let middle = serve(
        middle,
        InboundLayer::new().reserve(Duration::from_millis(5)),
    )
    .await;
    let edge = Hop {
        name: "edge",
        work: Duration::from_millis(20),
        next: Some((client(), middle)),
    };
    let edge = serve(
        edge,
        InboundLayer::new().default_timeout(Duration::from_millis(300)),
    )
    .await;

    let outside = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    for (what, uri, level) in [
        (
            "a request with 300 ms to live",
            format!("http://{edge}/"),
            None,
        ),
        (
            "a sheddable request",
            format!("http://{edge}/"),
            Some("Sheddable"),
        ),
        (
            "a request whose leaf works for 2 s",
            format!("http://{edge}/?slow"),
            None,
        ),
    ] {
        println!("{what}:");
        let mut request = Request::get(uri)
            .body(Full::default())
            .expect("valid request");
        if let Some(level) = level {
            request
                .headers_mut()
                .insert("x-criticality", level.parse().expect("valid header"));
        }
        let started = std::time::Instant::now();
        let response = outside.request(request).await.expect("the edge answers");
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("a body")
            .to_bytes();
        println!(
            "  edge answered {status} after {:.1?}: {}\n",
            started.elapsed(),
            String::from_utf8_lossy(&body)
        );
    }
}
