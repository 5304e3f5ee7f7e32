//! The response future of [`Inbound`]: admission, the handler's future in the request's
//! ambient scope, the enforced deadline, and the admission permit released with the
//! response's outcome.

use super::*;

/// An admission permit, released with the response's outcome (or as cancelled when the
/// response future is dropped first).
pub(super) struct Held<A: Admit> {
    config: Arc<Config<A>>,
    permit: Option<A::Permit>,
    since: Instant,
}

impl<A: Admit> Held<A> {
    pub(super) fn new(config: &Arc<Config<A>>, permit: A::Permit, since: Instant) -> Self {
        Held {
            config: Arc::clone(config),
            permit: Some(permit),
            since,
        }
    }

    fn release(&mut self, outcome: AttemptOutcome) {
        if let Some(permit) = self.permit.take() {
            let took = self
                .config
                .clock
                .now()
                .saturating_duration_since(self.since);
            let feedback = Feedback::new(outcome, took);
            self.config.admit.release(permit, feedback);
        }
    }
}

impl<A: Admit> Drop for Held<A> {
    fn drop(&mut self) {
        self.release(AttemptOutcome::Cancelled);
    }
}

pin_project! {
    /// The response future of [`Inbound`].
    pub struct ResponseFuture<S, B, A>
    where
        S: Service<Request<B>>,
        A: Admit,
    {
        #[pin]
        pub(super) state: State<S, B, A>,
        #[pin]
        pub(super) timer: Option<Sleep>,
        pub(super) ambient: Ambient,
        pub(super) enforce: Option<Enforce>,
        pub(super) held: Option<Held<A>>,
        pub(super) config: Option<Arc<Config<A>>>,
        pub(super) since: Instant,
    }
}

pin_project! {
    #[project = StateProj]
    pub(super) enum State<S, B, A>
    where
        S: Service<Request<B>>,
        A: Admit,
    {
        Admitting { acquire: Acquire<A>, pending: Option<(S, Request<B>)> },
        Running { #[pin] future: S::Future },
        Answered { problem: Option<(Problem, Wire)> },
    }
}

impl<S, B, A> ResponseFuture<S, B, A>
where
    S: Service<Request<B>>,
    A: Admit,
{
    pub(super) fn answered(problem: Problem, wire: Wire, since: Instant) -> Self {
        ResponseFuture {
            state: State::Answered {
                problem: Some((problem, wire)),
            },
            timer: None,
            ambient: Ambient::new(),
            enforce: None,
            held: None,
            config: None,
            since,
        }
    }
}

impl<S, B, A, ResB> Future for ResponseFuture<S, B, A>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    A: Admit,
{
    type Output = Result<Response<ResponseBody<ResB>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Admitting { acquire, pending } => {
                    let admitted = match acquire.as_mut().poll(cx) {
                        Poll::Ready(admitted) => admitted,
                        Poll::Pending => {
                            let timer = this.timer.as_mut().as_pin_mut();
                            ready!(timer.map_or(Poll::Pending, |t| t.poll(cx)));
                            Err(Refusal {
                                retry_after: None,
                                by: "admission queue (the deadline passed while waiting)",
                            })
                        }
                    };
                    let Some(config) = this.config.as_ref() else {
                        unreachable!("an admitting future holds its configuration")
                    };
                    let admitted = match admitted {
                        Err(refusal) if config.dry_run => {
                            would_shed(config, this.ambient.criticality(), refusal);
                            Ok(None)
                        }
                        admitted => admitted.map(Some),
                    };
                    match admitted {
                        Ok(permit) => {
                            *this.held = permit.map(|p| Held::new(config, p, *this.since));
                            let Some((mut service, request)) = pending.take() else {
                                unreachable!("the request is sent once")
                            };
                            config.listeners.admitted();
                            let future = this.ambient.sync_scope(|| service.call(request));
                            this.state.set(State::Running { future });
                            if this.enforce.is_none() {
                                this.timer.set(None);
                            }
                        }
                        Err(refusal) => {
                            let problem = shed(config, this.ambient.criticality(), refusal);
                            let wire = pending
                                .as_ref()
                                .map_or(Wire::Http, |(_, request)| Wire::of(request.headers()));
                            this.state.set(State::Answered {
                                problem: Some((problem, wire)),
                            });
                        }
                    }
                }
                StateProj::Running { future } => {
                    let ambient = *this.ambient;
                    if let Poll::Ready(output) = ambient.sync_scope(|| future.poll(cx)) {
                        if let Some(held) = this.held.as_mut() {
                            held.release(outcome(&output));
                        }
                        return Poll::Ready(output.map(|r| r.map(ResponseBody::new)));
                    }
                    let (Some(budget), Some(timer)) = (
                        this.enforce.as_ref().map(|e| e.budget),
                        this.timer.as_mut().as_pin_mut(),
                    ) else {
                        return Poll::Pending;
                    };
                    ready!(timer.poll(cx));
                    if let Some(held) = this.held.as_mut() {
                        held.release(AttemptOutcome::TimedOut);
                    }
                    if let Some(config) = this.config.as_ref() {
                        config.listeners.emit(EdgeEvent::Enforced { budget });
                    }
                    let problem = Problem::new(
                        StatusCode::GATEWAY_TIMEOUT,
                        problem::DEADLINE_EXCEEDED,
                        "Deadline exceeded",
                        format!(
                            "the handler did not answer within the {} ms the caller was still waiting",
                            budget.as_millis()
                        ),
                    );
                    let wire = this.enforce.take().map_or(Wire::Http, |e| e.wire);
                    this.state.set(State::Answered {
                        problem: Some((problem, wire)),
                    });
                }
                StateProj::Answered { problem } => {
                    let Some((problem, wire)) = problem.take() else {
                        panic!("inbound response future polled after completion")
                    };
                    let response = wire.answer(problem);
                    return Poll::Ready(Ok(response.map(ResponseBody::answer)));
                }
            }
        }
    }
}

/// How a handler's response went, for an admission component that adapts.
fn outcome<B, E>(output: &Result<Response<B>, E>) -> AttemptOutcome {
    let Ok(response) = output else {
        return AttemptOutcome::Transient;
    };
    match HttpClassifier::verdict(response.status(), response.headers()) {
        Verdict::Ok => AttemptOutcome::Ok,
        Verdict::Throttled { .. } => AttemptOutcome::Throttled,
        Verdict::Permanent => AttemptOutcome::Permanent,
        Verdict::Refused { .. } => AttemptOutcome::Refused,
        _ => AttemptOutcome::Transient,
    }
}
