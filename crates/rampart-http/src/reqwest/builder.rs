//! The request builder of the rampart client: reqwest's builder, sent under the policy.

use std::fmt;

use http::{HeaderMap, HeaderName, HeaderValue, Version};
use rampart::admit::{Admit, Unlimited};

use super::{Client, Marks};
use crate::error::ClientError;

/// A request being built by a [`Client`]; [`send`](Self::send) runs it under its host's
/// policy. Made by [`Client::request`] and the methods named after HTTP methods
/// ([`Client::get`], ...).
///
/// It wraps reqwest's own builder: the common setters are here under reqwest's names, and
/// [`with_reqwest`](Self::with_reqwest) reaches the rest (`json`, `form`, `query`,
/// `multipart`, behind reqwest's features of those names). A timeout set on it is cleared
/// before the request is sent: the policy's deadline and attempt timeout are the only ones.
#[must_use = "a request builder does nothing until it is sent"]
pub struct RequestBuilder<A = Unlimited> {
    client: Client<A>,
    request: ::reqwest::RequestBuilder,
    repeatable: bool,
    hedged: bool,
}

impl<A> fmt::Debug for RequestBuilder<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestBuilder")
            .field("request", &self.request)
            .field("repeatable", &self.repeatable)
            .field("hedged", &self.hedged)
            .finish_non_exhaustive()
    }
}

impl<A> RequestBuilder<A> {
    pub(super) fn new(client: Client<A>, request: ::reqwest::RequestBuilder) -> Self {
        RequestBuilder {
            client,
            request,
            repeatable: false,
            hedged: false,
        }
    }

    /// Applies `f` to the reqwest builder underneath: for reqwest's setters this builder does
    /// not repeat (`json`, `form`, `query`, `multipart`, behind reqwest's features).
    ///
    /// ```no_run
    /// # fn demo(client: rampart_http::reqwest::Client) {
    /// let request = client
    ///     .post("http://127.0.0.1:3000/orders")
    ///     .with_reqwest(|r| r.header("x-idempotency-key", "order-7"));
    /// # drop(request); }
    /// ```
    pub fn with_reqwest(
        mut self,
        f: impl FnOnce(::reqwest::RequestBuilder) -> ::reqwest::RequestBuilder,
    ) -> Self {
        self.request = f(self.request);
        self
    }

    /// Adds a header, as reqwest's [`header`](::reqwest::RequestBuilder::header) does. The
    /// headers the policy writes on every attempt (deadline, criticality, retry mark) are
    /// replaced, except that a smaller deadline written here is kept.
    pub fn header<K, V>(self, key: K, value: V) -> Self
    where
        HeaderName: TryFrom<K>,
        <HeaderName as TryFrom<K>>::Error: Into<http::Error>,
        HeaderValue: TryFrom<V>,
        <HeaderValue as TryFrom<V>>::Error: Into<http::Error>,
    {
        self.with_reqwest(|r| r.header(key, value))
    }

    /// Adds `headers`, as reqwest's [`headers`](::reqwest::RequestBuilder::headers) does.
    pub fn headers(self, headers: HeaderMap) -> Self {
        self.with_reqwest(|r| r.headers(headers))
    }

    /// HTTP basic authentication, as reqwest's
    /// [`basic_auth`](::reqwest::RequestBuilder::basic_auth).
    pub fn basic_auth<U: fmt::Display, P: fmt::Display>(
        self,
        username: U,
        password: Option<P>,
    ) -> Self {
        self.with_reqwest(|r| r.basic_auth(username, password))
    }

    /// HTTP bearer authentication, as reqwest's
    /// [`bearer_auth`](::reqwest::RequestBuilder::bearer_auth).
    pub fn bearer_auth<T: fmt::Display>(self, token: T) -> Self {
        self.with_reqwest(|r| r.bearer_auth(token))
    }

    /// The request body. A body in memory within the layer's
    /// [`replay_limit`](crate::OutboundBuilder::replay_limit) can be sent again; a stream is
    /// sent once.
    pub fn body<T: Into<::reqwest::Body>>(self, body: T) -> Self {
        self.with_reqwest(|r| r.body(body))
    }

    /// The HTTP version, as reqwest's [`version`](::reqwest::RequestBuilder::version).
    pub fn version(self, version: Version) -> Self {
        self.with_reqwest(|r| r.version(version))
    }

    /// Marks the request safe to send more than once whatever its method (a `POST` with an
    /// idempotency key, say), so that it is retried like a `GET`.
    pub fn repeatable(mut self) -> Self {
        self.repeatable = true;
        self
    }

    /// Asks for the request to be hedged, on a layer that hedges the requests that ask
    /// ([`hedge_marked`](crate::OutboundBuilder::hedge_marked)): what the
    /// [`Hedged`](crate::Hedged) extension does for the outbound layer. Only a request that
    /// may be sent more than once (a replayable method, or marked
    /// [`repeatable`](Self::repeatable)) is hedged.
    ///
    /// ```no_run
    /// # async fn demo(client: rampart_http::reqwest::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let quote = client.get("http://127.0.0.1:3001/quote").hedged().send().await?;
    /// # drop(quote); Ok(()) }
    /// ```
    pub fn hedged(mut self) -> Self {
        self.hedged = true;
        self
    }

    /// The request, built, for [`Client::execute`] (and the methods beside it).
    ///
    /// # Errors
    ///
    /// reqwest's builder error: a URL that did not parse, a header name or value that is not
    /// valid.
    pub fn build(self) -> Result<::reqwest::Request, ::reqwest::Error> {
        self.request.build()
    }
}

impl<A: Admit + Clone> RequestBuilder<A> {
    /// Builds the request and sends it under its host's policy: retried only when its method
    /// is replayable or it was marked [`repeatable`](Self::repeatable).
    ///
    /// # Errors
    ///
    /// A [`ClientError`]: what the policy decided (a timeout, a refusal, the last attempt's
    /// transport error), a spent quota, or, as `Call(Inner(..))`, reqwest's builder error.
    pub async fn send(self) -> Result<::reqwest::Response, ClientError<::reqwest::Error>> {
        let marks = Marks {
            repeatable: self.repeatable,
            hedged: self.hedged,
        };
        let request = self
            .request
            .build()
            .map_err(|e| ClientError::Call(rampart::Error::Inner(e)))?;
        self.client.run(request, marks).await
    }
}
