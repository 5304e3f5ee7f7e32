//! Dry run for admission: a limiter that decides and reports, and lets every attempt through.

use crate::admit::{Admit, AdmitContext, Feedback, Load, Refusal};

/// Runs admission component `A` in observe-only mode: each attempt `A` admits holds `A`'s
/// permit as usual; each attempt `A` would have refused runs anyway, and the policy reports
/// it ([`Event::WouldReject`](crate::Event::WouldReject) with `A`'s
/// [`Refusal::by`], and with the `metrics` feature `rampart.dry_run.rejections`). Use it to
/// size a limiter on live traffic before enforcing it.
///
/// An attempt let through holds no permit of `A`, so `A`'s counts (in flight, queue) are
/// those it would have had: the refused attempts are not in them. A queueing limiter still
/// makes an attempt wait in its queue; the attempt runs (unrefused) only when the queue
/// would have refused it.
///
/// ```
/// use rampart::Policy;
/// use rampart::limit::{ConcurrencyLimit, DryRun};
///
/// let policy = Policy::builder()
///     .admit(DryRun::new(ConcurrencyLimit::new(64)))
///     .listener(|event: &rampart::Event<'_>| {
///         if let rampart::Event::WouldReject { by, .. } = event {
///             eprintln!("{by} would have refused this attempt");
///         }
///     })
///     .build()
///     .expect("valid policy");
/// # drop(policy);
/// ```
#[derive(Debug, Clone, Default)]
pub struct DryRun<A>(A);

impl<A> DryRun<A> {
    /// `inner`, observing only.
    pub fn new(inner: A) -> Self {
        DryRun(inner)
    }

    /// The component observed.
    pub fn inner(&self) -> &A {
        &self.0
    }
}

/// The permit of a [`DryRun`] component: the inner permit, or the refusal it stands for.
#[derive(Debug)]
pub enum DryRunPermit<P> {
    /// The inner component admitted the attempt.
    Held(P),
    /// The inner component would have refused it.
    Refused(Refusal),
}

impl<A: Admit> Admit for DryRun<A> {
    type Permit = DryRunPermit<A::Permit>;

    async fn acquire(&self, cx: &AdmitContext<'_>) -> Result<Self::Permit, Refusal> {
        Ok(match self.0.acquire(cx).await {
            Ok(permit) => DryRunPermit::Held(permit),
            Err(refusal) => DryRunPermit::Refused(refusal),
        })
    }

    fn release(&self, permit: Self::Permit, feedback: Feedback) {
        if let DryRunPermit::Held(permit) = permit {
            self.0.release(permit, feedback);
        }
    }

    fn load(&self) -> Load {
        self.0.load()
    }

    fn dry_refusal(permit: &Self::Permit) -> Option<Refusal> {
        match permit {
            DryRunPermit::Held(_) => None,
            DryRunPermit::Refused(refusal) => Some(*refusal),
        }
    }
}
