//! rampart's metrics in Prometheus's text format, served for a running policy.
//!
//! The recorder is installed before the policy is built (a policy registers its metric handles
//! when it is built), a flaky dependency is called a few hundred times, and the text a
//! Prometheus scrape of `/metrics` would get is fetched from the server and printed.
//!
//! ```text
//! cargo run -p rampart --example observability --features metrics,tracing
//! ```

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusBuilder;
use rampart::backoff::Backoff;
use rampart::{Breaker, Policy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The dependency: fails every third call, answers in a millisecond.
async fn flaky(n: u32) -> Result<u32, std::io::Error> {
    tokio::time::sleep(Duration::from_millis(1)).await;
    match n % 3 {
        0 => Err(std::io::Error::other("connection reset")),
        _ => Ok(n),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. A recorder, before any policy is built.
    let prometheus = PrometheusBuilder::new().install_recorder()?;

    // 2. A named policy: its name is the `policy` attribute of every metric.
    let policy = Policy::builder()
        .name("inventory")
        .max_attempts(3)
        .attempt_timeout(Duration::from_millis(200))
        .backoff(Backoff::constant(Duration::from_millis(2)))
        .breaker(Breaker::builder().build()?)
        .build()?;

    for call in 0..300u32 {
        let _ = policy
            .run(async |attempt| flaky(call + attempt.number()).await)
            .await;
    }

    // 3. Serve the text at /metrics, as a service would.
    let app = Router::new().route(
        "/metrics",
        get(move || std::future::ready(prometheus.render())),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });

    // A scrape, by hand.
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    println!("GET http://{addr}/metrics\n\n{body}");
    Ok(())
}
