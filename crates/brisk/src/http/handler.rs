//! The type-erased request handler every HTTP connection of a server calls.

use std::rc::Rc;

use futures_util::future::LocalBoxFuture;
use http::{Request, Response};

use super::{Body, RequestBody};
use crate::runtime::handler::BoxError;

/// A server's handler, type-erased: an async function from request to response.
pub(crate) type DynHandler =
    Rc<dyn Fn(Request<RequestBody>) -> LocalBoxFuture<'static, Result<Response<Body>, BoxError>>>;
