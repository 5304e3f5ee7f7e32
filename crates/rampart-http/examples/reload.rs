//! An axum service whose policies come from a TOML file, reloaded when the file changes:
//! what a running policy or the running outbound layer can change is applied live and logged
//! by its key path, and what needs the service restarted (a layer's header name, a policy's
//! budget) is named by its key path.
//!
//! ```sh
//! cargo run -p rampart-http --features serde --example reload             # a demo, then exits
//! cargo run -p rampart-http --features serde --example reload -- edge.toml # serves until killed
//! ```
//!
//! Given a path, the service reads that file (writing the starting file below there if there
//! is none) and serves until it is killed: edit the file and watch the log. Without one, it
//! runs a demo on a file in the temporary directory: a quote whose dependency answers on the
//! third attempt fails under `max_attempts = 2`, the file is rewritten with 3, a shorter
//! outbound attempt timeout and a new deadline header, and the next quote succeeds on the
//! same policy, the outbound layer's requests carry the new timeout, and the header is logged
//! as needing a restart.
//!
//! The file is polled for its modification time every second on tokio's clock: no file
//! watcher, and no signal handler (tokio's `signal` feature is not among this crate's
//! dependencies). `/quote` calls the dependency under the named policy `prices`; `/stock`
//! calls it through the outbound layer of `[outbound]`, whose attempts, timeouts and breaker
//! thresholds reload live (its header names and budget are built once).

use std::collections::BTreeMap;
use std::error::Error;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rampart::Policy;
use rampart_http::config::HttpConfig;
use rampart_http::{InboundLayer, Outbound, OutboundLayer, ReplayBody};
use tower::ServiceExt;
use tower_layer::Layer;

/// The file the service starts with.
const FIRST: &str = r#"# The service's edge and the policies of its calls (see rampart_http::config).
[inbound]
default_timeout = "2s"

[outbound]
max_attempts = 2
deadline_header = "x-deadline-ms"

[outbound.policy]
attempt_timeout = "500ms"

[defaults]
total_timeout = "1s"
attempt_timeout = "200ms"
backoff = { kind = "constant", delay = "10ms", jitter = "none" }
use_ambient_deadline = true

[policies.prices]
max_attempts = 2
"#;

type PlainClient = Client<HttpConnector, Full<Bytes>>;
type LayerClient = Outbound<Client<HttpConnector, ReplayBody<Full<Bytes>>>>;

#[derive(Clone)]
struct App {
    addr: SocketAddr,
    policies: Arc<BTreeMap<String, Policy>>,
    plain: PlainClient,
    client: LayerClient,
}

/// The dependency: answers 503 to the first two attempts of a quote (`?attempt=1`, `2`), 200
/// to the third.
async fn prices(uri: http::Uri) -> StatusCode {
    let attempt = uri.query().and_then(|q| q.strip_prefix("attempt="));
    if attempt.and_then(|n| n.parse::<u32>().ok()) >= Some(3) {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

/// Calls the dependency under the named policy `prices`, as the file says now.
async fn quote(State(app): State<App>) -> (StatusCode, String) {
    let policy = &app.policies["prices"];
    let attempts = AtomicU32::new(0);
    let outcome = policy
        .run(async |_attempt| {
            let n = attempts.fetch_add(1, Ordering::SeqCst) + 1;
            let uri = format!("http://{}/prices?attempt={n}", app.addr);
            let request = Request::get(uri).body(Full::default()).expect("valid");
            match app.plain.request(request).await {
                Ok(response) if response.status().is_success() => Ok(()),
                Ok(response) => Err(format!("status {}", response.status())),
                Err(error) => Err(error.to_string()),
            }
        })
        .await;
    let n = attempts.load(Ordering::SeqCst);
    match outcome {
        Ok(()) => (StatusCode::OK, format!("quoted after {n} attempts")),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no quote after {n} attempts: {error}"),
        ),
    }
}

/// Calls the dependency through the outbound layer built from `[outbound]`; answers with
/// the deadline header the layer wrote on the request.
async fn stock(State(app): State<App>) -> (StatusCode, String) {
    use http_body_util::BodyExt;
    let uri = format!("http://{}/deadline", app.addr);
    let request = Request::get(uri).body(Full::default()).expect("valid");
    match app.client.oneshot(request).await {
        Ok(response) => {
            let status = response.status();
            let body = match response.into_body().collect().await {
                Ok(body) => body.to_bytes(),
                Err(_) => Bytes::new(),
            };
            (status, String::from_utf8_lossy(&body).into_owned())
        }
        Err(error) => (StatusCode::BAD_GATEWAY, error.to_string()),
    }
}

/// The dependency's other route: answers with the deadline header the request carried (the
/// outbound layer's attempt ceiling), under whichever of the file's names it has.
async fn deadline(headers: http::HeaderMap) -> String {
    ["x-deadline-ms", "x-budget-ms"]
        .iter()
        .find_map(|name| Some(format!("{name}: {}", headers.get(*name)?.to_str().ok()?)))
        .unwrap_or_default()
}

/// What identifies a version of the file: its modification time and length.
fn version(path: &Path) -> Option<(SystemTime, u64)> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}

fn read(path: &Path) -> Result<HttpConfig, Box<dyn Error>> {
    Ok(toml::from_str(&std::fs::read_to_string(path)?)?)
}

/// Applies the file at `path` to `outbound` and `policies`, logging what changed; the file
/// applied, or why nothing was.
fn reload(
    path: &Path,
    file: &HttpConfig,
    outbound: &OutboundLayer,
    policies: &BTreeMap<String, Policy>,
) -> Result<HttpConfig, Box<dyn Error>> {
    let next = read(path)?;
    let reloaded = file.reload(&next, outbound, policies)?;
    println!("reloaded {}", path.display());
    for key in &reloaded.applied {
        println!("  applied live: {key}");
    }
    for policy in policies.values() {
        println!("  live: {}", policy.explain());
    }
    let settings = outbound.settings();
    println!(
        "  live: outbound {} attempts, attempt timeout {:?}",
        settings.max_attempts, settings.policy.attempt_timeout
    );
    for key in &reloaded.restart {
        println!("  needs a restart: {key}");
    }
    Ok(next)
}

/// Polls `path` every second and reloads it when it changes; an invalid file is logged and
/// changes nothing (the service keeps the file it has).
async fn watch(
    path: PathBuf,
    mut file: HttpConfig,
    outbound: OutboundLayer,
    policies: Arc<BTreeMap<String, Policy>>,
) {
    let mut seen = version(&path);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let now = version(&path);
        if now == seen {
            continue;
        }
        seen = now;
        match reload(&path, &file, &outbound, &policies) {
            Ok(next) => file = next,
            Err(error) => println!("not reloaded, the file is unchanged in effect: {error}"),
        }
    }
}

async fn get_text(client: &PlainClient, uri: String) -> Result<String, Box<dyn Error>> {
    use http_body_util::BodyExt;
    let response = client
        .request(Request::get(uri).body(Full::default())?)
        .await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    Ok(format!("{status} {}", String::from_utf8_lossy(&body)))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let (path, demo) = match std::env::args().nth(1) {
        Some(path) => (PathBuf::from(path), false),
        None => (
            std::env::temp_dir().join("rampart-reload-example.toml"),
            true,
        ),
    };
    if demo || !path.exists() {
        std::fs::write(&path, FIRST)?;
    }
    let file = read(&path)?;
    file.check()?;
    let policies = Arc::new(file.policies().build()?);
    let outbound = file.outbound.build()?;
    let client = outbound.layer(Client::builder(TokioExecutor::new()).build_http());
    let plain = Client::builder(TokioExecutor::new()).build_http();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = Router::new()
        .route("/prices", get(prices))
        .route("/deadline", get(deadline))
        .route("/quote", get(quote))
        .route("/stock", get(stock))
        .with_state(App {
            addr,
            policies: Arc::clone(&policies),
            plain: plain.clone(),
            client,
        })
        .layer(file.inbound.apply(InboundLayer::new()));
    tokio::spawn(async move { axum::serve(listener, app).await });
    tokio::spawn(watch(
        path.clone(),
        file,
        outbound.clone(),
        Arc::clone(&policies),
    ));
    println!(
        "serving on http://{addr} (/quote, /stock) from {}",
        path.display()
    );
    println!("  live: {}", policies["prices"].explain());
    if !demo {
        std::future::pending::<()>().await;
    }

    println!(
        "GET /quote: {}",
        get_text(&plain, format!("http://{addr}/quote")).await?
    );
    println!(
        "GET /stock: {}",
        get_text(&plain, format!("http://{addr}/stock")).await?
    );
    let next = FIRST
        .replace(
            "[policies.prices]\nmax_attempts = 2",
            "[policies.prices]\nmax_attempts = 3",
        )
        .replace("attempt_timeout = \"500ms\"", "attempt_timeout = \"300ms\"")
        .replace("\"x-deadline-ms\"", "\"x-budget-ms\"");
    std::fs::write(&path, next)?;
    // The watcher polls every second: two ticks see the change.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    println!(
        "GET /quote: {}",
        get_text(&plain, format!("http://{addr}/quote")).await?
    );
    println!(
        "GET /stock: {}",
        get_text(&plain, format!("http://{addr}/stock")).await?
    );
    Ok(())
}
