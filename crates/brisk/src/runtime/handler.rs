//! What a user callback is to the runtime: a boxed local future whose error is logged and
//! counted, never propagated.

use std::any::Any;
use std::future::Future;

use futures_util::future::LocalBoxFuture;

/// What a handler's error turns into: logged and counted as `throw_exception`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a callback may return: `()` or `Result<(), E>`.
///
/// ```
/// use brisk::HandlerOutput;
/// assert!(().into_result().is_ok());
/// assert!(Err::<(), _>("no").into_result().is_err());
/// ```
pub trait HandlerOutput {
    /// The error, if any.
    fn into_result(self) -> Result<(), BoxError>;
}

impl HandlerOutput for () {
    fn into_result(self) -> Result<(), BoxError> {
        Ok(())
    }
}

impl<E: Into<BoxError>> HandlerOutput for Result<(), E> {
    fn into_result(self) -> Result<(), BoxError> {
        self.map_err(Into::into)
    }
}

/// A callback's future, boxed, with its output turned into a `Result`.
pub(crate) type HandlerFuture = LocalBoxFuture<'static, Result<(), BoxError>>;

/// Boxes a callback's future, turning its output into a `Result`.
pub(crate) fn boxed<Fut>(fut: Fut) -> HandlerFuture
where
    Fut: Future + 'static,
    Fut::Output: HandlerOutput,
{
    Box::pin(async move { fut.await.into_result() })
}

/// The text of a panic payload.
pub(crate) fn panic_message(panic: &Box<dyn Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}
