//! reqwest under a per-host policy: the policy's deadline and attempt timeout are the only
//! timeouts.
//!
//! [`Client`] sends reqwest requests the way the [outbound layer](crate::outbound) sends
//! `http` requests, sharing a layer's host table and settings: a policy per `host:port`, the
//! deadline, criticality and retry mark written on every attempt, retries only for replayable
//! requests (or those marked [`repeatable`](RequestBuilder::repeatable)) whose body is in
//! memory and within the replay limit.
//!
//! Every way the client makes a request goes through the policy: [`get`](Client::get),
//! [`post`](Client::post), [`put`](Client::put), [`delete`](Client::delete),
//! [`head`](Client::head), [`patch`](Client::patch) and [`request`](Client::request) return
//! this module's [`RequestBuilder`], whose [`send`](RequestBuilder::send) runs the request
//! under its host's policy; [`execute`](Client::execute) and the methods beside it take a
//! request already built. The reqwest client underneath is reachable only as
//! [`bypass_policy`](Client::bypass_policy), a name that says what sending through it does
//! (`rampart-lint` reports every use, rule R008).
//!
//! reqwest has timeouts of its own (a total timeout on the client and on each request). Two
//! timeout systems that do not know about each other give answers nobody can explain, so
//! [`Client::new`] builds its reqwest client without any, and every request's own timeout is
//! cleared before it is sent. A client you build yourself ([`Client::with_client`]) should be
//! built without `timeout` too.
//!
//! Every response carries the [`CallReport`](crate::CallReport) of its call in its extensions
//! (why the call stopped, its attempts, the deadline that applied); with
//! [`fail_on_retryable_status`](Client::fail_on_retryable_status) (or the layer's), a call
//! that ends on a retryable status fails with [`ClientError::Status`], which carries the
//! response. [`try_execute`](Client::try_execute) and
//! [`try_execute_repeatable`](Client::try_execute_repeatable) return the report of the call
//! itself (rampart's [`CallResult`]: the outcome, the stop reason, the attempts).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use rampart_http::OutboundLayer;
//! use rampart_http::reqwest::Client;
//!
//! let layer = OutboundLayer::builder()
//!     .policy(|p| p.total_timeout(Duration::from_secs(2)).attempt_timeout(Duration::from_millis(500)))
//!     .build()?;
//! let client = Client::new(&layer)?;
//! let response = client.get("http://127.0.0.1:3000/").send().await?;
//! println!("{}", response.status());
//! # Ok(()) }
//! ```

mod builder;

use std::fmt;
use std::sync::Arc;

use rampart::admit::{Admit, Unlimited};
use rampart::{CallResult, Cancelled};

use crate::classify::HttpResponse;
use crate::error::ClientError;
use crate::outbound::{Engine, HostKey, OutboundLayer, Plan, Read, Stamp, within};

pub use builder::RequestBuilder;

impl HttpResponse for ::reqwest::Response {
    fn status(&self) -> http::StatusCode {
        ::reqwest::Response::status(self)
    }

    fn headers(&self) -> &http::HeaderMap {
        ::reqwest::Response::headers(self)
    }
}

/// A reqwest client whose requests run under an [`OutboundLayer`]'s per-host policies.
pub struct Client<A = Unlimited> {
    http: ::reqwest::Client,
    engine: Arc<Engine<A>>,
    /// The client's own `fail_on_retryable_status`, over the layer's.
    fail_on_status: Option<bool>,
}

impl<A> Clone for Client<A> {
    fn clone(&self) -> Self {
        Client {
            http: self.http.clone(),
            engine: Arc::clone(&self.engine),
            fail_on_status: self.fail_on_status,
        }
    }
}

impl<A> fmt::Debug for Client<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

impl<A: Admit + Clone> Client<A> {
    /// A client with a reqwest client of its own, built with no timeout at all (reqwest's
    /// defaults otherwise), sharing `layer`'s host table and settings.
    ///
    /// # Errors
    ///
    /// The `reqwest::Error` of building the reqwest client (its TLS backend could not be
    /// initialised, say).
    pub fn new(layer: &OutboundLayer<A>) -> Result<Self, ::reqwest::Error> {
        let http = ::reqwest::Client::builder().build()?;
        Ok(Client::with_client(http, layer))
    }

    /// A client around `http`, which should have been built without `timeout`.
    pub fn with_client(http: ::reqwest::Client, layer: &OutboundLayer<A>) -> Self {
        Client {
            http,
            engine: Arc::clone(layer.engine()),
            fail_on_status: None,
        }
    }

    /// Whether a call that ends on a response with a status the classifier retries fails
    /// with [`ClientError::Status`] (carrying the response and its
    /// [`CallReport`](crate::CallReport)) for every host this client calls, whatever the
    /// layer's [`fail_on_retryable_status`](crate::OutboundBuilder::fail_on_retryable_status)
    /// and its per-host settings say (by default the client follows them).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use rampart_http::OutboundLayer;
    /// use rampart_http::reqwest::Client;
    ///
    /// let client = Client::new(&OutboundLayer::new())?.fail_on_retryable_status(true);
    /// // A 503 that outlived its retries is an error: `?` stops here.
    /// let prices = client.get("http://127.0.0.1:3000/prices").send().await?;
    /// # drop(prices); Ok(()) }
    /// ```
    pub fn fail_on_retryable_status(mut self, on: bool) -> Self {
        self.fail_on_status = Some(on);
        self
    }

    /// The reqwest client underneath, **without rampart**: a request sent through it has no
    /// deadline or attempt timeout (the client was built without timeouts of its own), is
    /// never retried, passes no breaker, budget or quota, and carries no deadline, criticality
    /// or retry mark to the next service. For a request that must not be governed (a health
    /// probe of the dependency's own, say). `rampart-lint` reports every use (rule R008).
    ///
    /// A request built from it can still go through the policy: pass it, built, to
    /// [`execute`](Self::execute).
    pub fn bypass_policy(&self) -> &::reqwest::Client {
        &self.http
    }

    /// A `method` request to `url`, sent under its host's policy by
    /// [`send`](RequestBuilder::send). A `url` reqwest cannot parse is reported by `send` (and
    /// [`build`](RequestBuilder::build)), as reqwest's own builder reports it.
    pub fn request<U: ::reqwest::IntoUrl>(
        &self,
        method: http::Method,
        url: U,
    ) -> RequestBuilder<A> {
        RequestBuilder::new(self.clone(), self.http.request(method, url))
    }

    /// A `GET` request to `url`, sent under its host's policy; see [`request`](Self::request).
    pub fn get<U: ::reqwest::IntoUrl>(&self, url: U) -> RequestBuilder<A> {
        self.request(http::Method::GET, url)
    }

    /// A `POST` request to `url`, sent under its host's policy with one attempt unless marked
    /// [`repeatable`](RequestBuilder::repeatable); see [`request`](Self::request).
    pub fn post<U: ::reqwest::IntoUrl>(&self, url: U) -> RequestBuilder<A> {
        self.request(http::Method::POST, url)
    }

    /// A `PUT` request to `url`, sent under its host's policy; see [`request`](Self::request).
    pub fn put<U: ::reqwest::IntoUrl>(&self, url: U) -> RequestBuilder<A> {
        self.request(http::Method::PUT, url)
    }

    /// A `DELETE` request to `url`, sent under its host's policy; see
    /// [`request`](Self::request).
    pub fn delete<U: ::reqwest::IntoUrl>(&self, url: U) -> RequestBuilder<A> {
        self.request(http::Method::DELETE, url)
    }

    /// A `HEAD` request to `url`, sent under its host's policy; see [`request`](Self::request).
    pub fn head<U: ::reqwest::IntoUrl>(&self, url: U) -> RequestBuilder<A> {
        self.request(http::Method::HEAD, url)
    }

    /// A `PATCH` request to `url`, sent under its host's policy with one attempt unless marked
    /// [`repeatable`](RequestBuilder::repeatable); see [`request`](Self::request).
    pub fn patch<U: ::reqwest::IntoUrl>(&self, url: U) -> RequestBuilder<A> {
        self.request(http::Method::PATCH, url)
    }

    /// Sends a request under its host's policy, retrying it only when its method is
    /// replayable.
    ///
    /// # Errors
    ///
    /// [`ClientError::Call`] with the policy's decision (a timeout, a refusal, cancellation)
    /// or the last attempt's transport error; [`ClientError::QuotaSpent`] when the host's
    /// quota is spent; and, with
    /// [`fail_on_retryable_status`](crate::OutboundBuilder::fail_on_retryable_status) on,
    /// [`ClientError::Status`] for a retryable status that ended the call.
    pub async fn execute(
        &self,
        request: ::reqwest::Request,
    ) -> Result<::reqwest::Response, ClientError<::reqwest::Error>> {
        self.run(request, Marks::default()).await
    }

    /// Sends a request that is safe to send more than once whatever its method (a `POST`
    /// with an idempotency key, say).
    ///
    /// # Errors
    ///
    /// As [`execute`](Self::execute).
    pub async fn execute_repeatable(
        &self,
        request: ::reqwest::Request,
    ) -> Result<::reqwest::Response, ClientError<::reqwest::Error>> {
        self.run(request, Marks::REPEATABLE).await
    }

    /// Like [`execute`](Self::execute), with the report of the call: the stop reason and
    /// the attempts, as rampart's `try_run` gives them.
    ///
    /// # Errors
    ///
    /// Only when no call ran to a report: the host's policy could not be made
    /// ([`ClientError::Call`] with a configuration error), the host's [quota](crate::quota) is
    /// spent ([`ClientError::QuotaSpent`], a refusal before any attempt), or the caller
    /// cancelled.
    pub async fn try_execute(
        &self,
        request: ::reqwest::Request,
    ) -> Result<CallResult<::reqwest::Response, ::reqwest::Error>, ClientError<::reqwest::Error>>
    {
        Ok(self.report(request, Marks::default()).await?.result)
    }

    /// Like [`execute_repeatable`](Self::execute_repeatable), with the report of the call; see
    /// [`try_execute`](Self::try_execute).
    ///
    /// # Errors
    ///
    /// As [`try_execute`](Self::try_execute).
    pub async fn try_execute_repeatable(
        &self,
        request: ::reqwest::Request,
    ) -> Result<CallResult<::reqwest::Response, ::reqwest::Error>, ClientError<::reqwest::Error>>
    {
        Ok(self.report(request, Marks::REPEATABLE).await?.result)
    }

    pub(super) async fn run(
        &self,
        request: ::reqwest::Request,
        marks: Marks,
    ) -> Result<::reqwest::Response, ClientError<::reqwest::Error>> {
        let Reported {
            result,
            fail_on_status,
        } = self.report(request, marks).await?;
        crate::report::finish(result, fail_on_status, false)
    }

    async fn report(
        &self,
        mut request: ::reqwest::Request,
        marks: Marks,
    ) -> Result<Reported, ClientError<::reqwest::Error>> {
        let engine = &self.engine;
        let url = request.url();
        let key = HostKey::new(
            url.host_str().unwrap_or_default(),
            url.port_or_known_default().unwrap_or(80),
        );
        let host = engine
            .host(&key)
            .map_err(|e| ClientError::Call(rampart::Error::Config(e)))?;
        let host = &*host;
        crate::quota::check(host.quota.as_ref(), &host.key, &host.edge.listeners)?;
        *request.timeout_mut() = None;
        let (stamp, caller) = Stamp::prepare(&host.edge.names, request.headers_mut());
        let plan = host.plan(request.method(), marks.repeatable);
        let in_memory = request.try_clone().is_some()
            && request
                .body()
                .and_then(::reqwest::Body::as_bytes)
                .map_or(0, <[u8]>::len)
                <= host.edge.replay_limit;
        let names = &host.edge.names;
        // Each attempt stamps its request before anything is awaited: with no admission
        // queue, the attempt's start's reading is the time left's (see `Read::AtStart`).
        let read = match A::ALWAYS_ADMITS {
            true => Read::AtStart,
            false => Read::Now,
        };
        let http = self.http.clone();
        let call = async {
            if plan == Plan::Replay && in_memory {
                // `try_run` hedges when the host's policy hedges.
                within(host.replay(marks.hedged), caller)
                    .try_run(async |attempt: &rampart::Attempt| {
                        let Some(mut request) = request.try_clone() else {
                            unreachable!("a request with a body in memory clones")
                        };
                        stamp.write(names, request.headers_mut(), attempt, read);
                        let span =
                            crate::observe::attempt_span(request.method(), &host.key, attempt);
                        observe_quota(host, span.run(http.execute(request)).await)
                    })
                    .await
            } else {
                if plan == Plan::Replay {
                    host.not_replayable();
                }
                // Taken by the one attempt; a callback borrows what it uses, so the request waits
                // behind a lock (uncontended) rather than in a mutated capture.
                let request = std::sync::Mutex::new(Some(request));
                within(&host.once, caller)
                    .try_run(async |attempt| {
                        let taken = request
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .take();
                        let Some(mut request) = taken else {
                            unreachable!("a one-attempt policy runs its callback once")
                        };
                        stamp.write(names, request.headers_mut(), attempt, read);
                        let span =
                            crate::observe::attempt_span(request.method(), &host.key, attempt);
                        observe_quota(host, span.run(http.execute(request)).await)
                    })
                    .await
            }
        };
        let result = call
            .await
            .map_err(|_: Cancelled| ClientError::Call(rampart::Error::Cancelled))?;
        Ok(Reported {
            result,
            fail_on_status: self.fail_on_status.unwrap_or(host.fail_on_status),
        })
    }
}

/// What the caller marked a request with.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Marks {
    /// Safe to send more than once whatever its method.
    pub(super) repeatable: bool,
    /// Hedged, on a layer that hedges marked requests.
    pub(super) hedged: bool,
}

impl Marks {
    const REPEATABLE: Marks = Marks {
        repeatable: true,
        hedged: false,
    };
}

/// A call that ran to a report, with what its response needs to carry it.
struct Reported {
    result: CallResult<::reqwest::Response, ::reqwest::Error>,
    fail_on_status: bool,
}

/// Reads a response's quota headers into its host's quota, when the layer reads them.
fn observe_quota<A>(
    host: &crate::outbound::Host<A>,
    response: Result<::reqwest::Response, ::reqwest::Error>,
) -> Result<::reqwest::Response, ::reqwest::Error> {
    if let (Some(quota), Ok(response)) = (&host.quota, &response) {
        quota.observe(response.headers());
    }
    response
}
