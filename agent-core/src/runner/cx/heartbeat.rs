//! The lease kept alive while a step's work runs ([`with_heartbeat`]).

use super::StepCx;

/// Run `work` while keeping the lease alive (a tool call or an LLM answer may take longer
/// than the lease). `None` when the lease could not be renewed: the work is dropped at once,
/// as a crash would drop it, and the step stops without committing.
///
/// A future of its own rather than an `async fn` around `tokio::select!`: that kept `work`
/// twice, as its argument and inside the select, and every run in flight holds this future
/// while its tool call waits (issue 22, W4).
pub(crate) fn with_heartbeat<'a, F: Future>(
    cx: &'a StepCx<'_>,
    work: F,
) -> Heartbeat<F, impl Future<Output = ()> + 'a> {
    let beat = async move {
        loop {
            tokio::time::sleep(cx.inner.config.lease_ttl / 4).await;
            if !cx.renew().await {
                return;
            }
        }
    };
    Heartbeat { work, beat }
}

pin_project_lite::pin_project! {
    /// A step's work raced against its lease's heartbeat ([`with_heartbeat`]).
    pub(crate) struct Heartbeat<W, B> {
        #[pin]
        work: W,
        #[pin]
        beat: B,
    }
}

impl<W: Future, B: Future<Output = ()>> Future for Heartbeat<W, B> {
    type Output = Option<W::Output>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.project();
        // The step first: one that finishes without waiting never arms the timer.
        if let std::task::Poll::Ready(out) = this.work.poll(cx) {
            return std::task::Poll::Ready(Some(out));
        }
        this.beat.poll(cx).map(|()| None)
    }
}
