//! What a policy runs: an async closure taking the [`Attempt`], whose future may borrow the
//! attempt and the caller's environment, and is `Send` when what it borrows is `Sync`.
//!
//! [`Callback`] is implemented for every such closure; nobody implements it by hand. It exists
//! because the plain bound `F: AsyncFnMut(&Attempt) -> Result<T, E>` makes the call's future
//! not `Send` as soon as the closure borrows from its environment (rustc's higher-ranked
//! auto-trait limitation, rust-lang/rust#110338): the call a service writes first could then
//! not be awaited in an axum handler or a spawned task. Bounding the closure through its
//! `FnMut` output ([`AttemptFuture`]) names the future's type, so the compiler can see that it
//! is `Send`.
//!
//! ```
//! # use std::sync::Arc;
//! # struct Backend;
//! # impl Backend {
//! #     async fn fetch(&self, _: &str, _: rampart::CancellationToken) -> Result<u32, std::io::Error> { Ok(7) }
//! # }
//! struct PriceClient {
//!     policy: rampart::Policy,
//!     backend: Backend,
//! }
//!
//! impl PriceClient {
//!     async fn get_price(&self, sku: &str) -> Result<u32, rampart::Error<std::io::Error>> {
//!         self.policy
//!             .run(async |attempt| self.backend.fetch(sku, attempt.token()).await)
//!             .await
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let client = Arc::new(PriceClient { policy: rampart::Policy::builder().build().unwrap(), backend: Backend });
//! // The borrowing call is `Send`: it runs in a spawned task (and in an axum handler).
//! let price = tokio::spawn(async move { client.get_price("sku-42").await }).await.unwrap();
//! assert_eq!(price.unwrap(), 7);
//! # }
//! ```
//!
//! # What is refused, and why
//!
//! A closure whose future borrows from *the closure itself* cannot be a callback: an
//! `async move` closure that owns a value and uses it by reference, or one that mutates a
//! captured variable. Its futures lend from the closure, so it has no `FnMut` form, and the
//! compiler says:
//!
//! ```text
//! error: async closure does not implement `FnMut` because it captures state from its environment
//! ```
//!
//! Both forms are refused (these examples must not compile; that error is the only one either
//! gives):
//!
//! ```compile_fail
//! # async fn demo() {
//! let policy = rampart::Policy::builder().build().expect("valid policy");
//! let mut attempts = 0;
//! // Mutates a captured variable.
//! let _ = policy
//!     .run(async |_attempt| {
//!         attempts += 1;
//!         Ok::<_, std::io::Error>(attempts)
//!     })
//!     .await;
//! # }
//! ```
//!
//! ```compile_fail
//! # async fn demo(name: String) {
//! let policy = rampart::Policy::builder().build().expect("valid policy");
//! // Owns `name` and uses it by reference.
//! let _ = policy
//!     .run(async move |_attempt| Ok::<_, std::io::Error>(name.len()))
//!     .await;
//! # }
//! ```
//!
//! Borrow instead (`let client = &*arc;` before the call, then `async |attempt| client.get(..)`),
//! count with an atomic or a `Cell` declared outside, or, to own what the future uses, return
//! an `async move` block from a plain closure:
//!
//! ```
//! # async fn demo(client: std::sync::Arc<String>) -> Result<usize, rampart::Error<std::io::Error>> {
//! let policy = rampart::Policy::builder().build().expect("valid policy");
//! policy
//!     .run(move |attempt: &rampart::Attempt| {
//!         let client = client.clone();
//!         let number = attempt.number();
//!         async move { Ok::<_, std::io::Error>(client.len() + number as usize) }
//!     })
//!     .await
//! # }
//! ```
//!
//! Because a callback's futures do not borrow from it, the hedged executor can run several
//! legs of one callback at once.

use std::future::Future;

use crate::attempt::Attempt;

/// A callback's future for an attempt borrowed for `'a`: the `FnMut` form of a callback, with
/// the future's type named so that the compiler can prove it `Send`.
///
/// Implemented for every `FnMut(&'a Attempt) -> impl Future`; see [`Callback`].
pub trait AttemptFuture<'a>: FnMut(&'a Attempt) -> <Self as AttemptFuture<'a>>::Fut {
    /// The future the callback returns for one attempt.
    type Fut: Future;
}

impl<'a, F, Fut> AttemptFuture<'a> for F
where
    F: FnMut(&'a Attempt) -> Fut,
    Fut: Future,
{
    type Fut = Fut;
}

/// What [`Policy::run`](crate::Policy::run) runs: an async closure taking `&Attempt` and
/// returning `Result<T, E>`, whose futures do not borrow from the closure itself.
///
/// Implemented for every such closure; see the [module docs](self) for what is refused and why.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a rampart callback returning `Result<{T}, {E}>`",
    label = "a callback is an async closure taking `&Attempt` whose futures do not borrow from the closure itself",
    note = "borrow what the callback uses from outside it (`let client = &*arc;`) instead of moving it in, and count with an atomic or a `Cell` instead of mutating a capture; see `rampart::executor::callback`"
)]
pub trait Callback<T, E>:
    AsyncFnMut(&Attempt) -> Result<T, E> + for<'a> AttemptFuture<'a, Fut: Future<Output = Result<T, E>>>
{
}

impl<T, E, F> Callback<T, E> for F where
    F: AsyncFnMut(&Attempt) -> Result<T, E>
        + for<'a> AttemptFuture<'a, Fut: Future<Output = Result<T, E>>>
{
}
