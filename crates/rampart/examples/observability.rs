//! rampart's metrics in Prometheus's text format, served for a running policy, and how many
//! series they make before and after traffic.
//!
//! A recorder is installed (with histogram buckets for the durations: the exporter's default
//! summaries are quantiles over its whole lifetime), a policy is built, `/metrics` is scraped,
//! a flaky dependency is called 100 times, and `/metrics` is scraped again. The second scrape
//! is printed, then the number of series in each (lines of the exposition that are not
//! comments), as the last line:
//!
//! ```text
//! cargo run -p rampart --example observability --features metrics
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use rampart::backoff::Backoff;
use rampart::{Breaker, Policy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Calls made between the two scrapes.
const CALLS: u32 = 100;

/// Bucket bounds, in seconds, of the duration histograms.
const BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];

/// The dependency: fails every third call, answers in a millisecond.
async fn flaky(n: u32) -> Result<u32, std::io::Error> {
    tokio::time::sleep(Duration::from_millis(1)).await;
    match n % 3 {
        0 => Err(std::io::Error::other("connection reset")),
        _ => Ok(n),
    }
}

/// The body of `GET /metrics` from `addr`, as a Prometheus scrape gets it.
async fn scrape(addr: SocketAddr) -> Result<String, std::io::Error> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned())
}

/// Series in an exposition: its lines that are neither blank nor comments (`# HELP`, `# TYPE`).
fn series(text: &str) -> usize {
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .count()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. A recorder, before the first call.
    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("duration".to_owned()), &BUCKETS)?
        .install_recorder()?;

    // 2. A named policy: its name is the `policy` attribute of every metric.
    let policy = Policy::builder()
        .name("inventory")
        .max_attempts(3)
        .attempt_timeout(Duration::from_millis(200))
        .backoff(Backoff::constant(Duration::from_millis(2)))
        .breaker(Breaker::builder().build()?)
        .build()?;

    // 3. Serve the text at /metrics, as a service would.
    let app = Router::new().route(
        "/metrics",
        get(move || std::future::ready(prometheus.render())),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });

    let before = series(&scrape(addr).await?);
    for call in 0..CALLS {
        let _ = policy
            .run(async |attempt| flaky(call + attempt.number()).await)
            .await;
    }
    let body = scrape(addr).await?;
    println!("GET http://{addr}/metrics\n\n{body}");
    println!(
        "series: {before} before any call, {} after {CALLS} calls",
        series(&body)
    );
    Ok(())
}
