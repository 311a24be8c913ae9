//! A call run in a span of its own: the future that the span module's `call` and `root`
//! return.

use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Poll};

use opentelemetry::trace::{Status, TraceContextExt};
use opentelemetry::Context;
use pin_project_lite::pin_project;

pin_project! {
    /// `fut`, with the context of its span current while it is polled and the span ended
    /// with its result; without a span, `fut` alone.
    ///
    /// Written out rather than as an `async fn`: one of those holds `fut` twice (the argument
    /// and the awaited value, each as large as the call's whole future) and moves it from
    /// one to the other at its first poll, on every database query and Redis command.
    pub(crate) struct Traced<F> {
        #[pin]
        fut: F,
        span: Option<Context>,
    }
}

impl<F> Traced<F> {
    /// `fut` in the span current in `span`, or untraced.
    pub(super) fn new(fut: F, span: Option<Context>) -> Self {
        Traced { fut, span }
    }
}

impl<F, T, E> Future for Traced<F>
where
    F: Future<Output = Result<T, E>>,
    E: Display,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, task: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(span) = this.span.as_ref() else {
            return this.fut.poll(task);
        };
        let result = {
            let _current = span.clone().attach();
            ready!(this.fut.poll(task))
        };
        let span = this.span.take().expect("looked at above");
        Poll::Ready(finish(&span, result))
    }
}

/// Ends the span current in `cx` with the call's `result`.
fn finish<T, E: Display>(cx: &Context, result: Result<T, E>) -> Result<T, E> {
    let span = cx.span();
    if let Err(e) = &result {
        span.set_status(Status::error(e.to_string()));
    }
    span.end();
    result
}
