//! Endpoints by name, for routes that cannot hold one: an axum route's handler must be `Send`,
//! and a [`WsEndpoint`] is not (its callbacks may hold `Rc` state). The server names its
//! endpoints ([`HttpServer::ws_endpoint`](crate::http::HttpServer::ws_endpoint)), and each
//! worker registers them in its context when the server starts there; a route finds one by
//! name when a request comes.

use std::cell::RefCell;
use std::collections::HashMap;

use super::WsEndpoint;
use crate::runtime::context::WorkerCtx;

/// A worker's named endpoints, one of its context's parts.
#[derive(Default)]
pub(crate) struct Named(RefCell<HashMap<String, WsEndpoint>>);

/// Makes `endpoint` the one called `name` in worker `w`.
pub(crate) fn register(w: &WorkerCtx, name: &str, endpoint: WsEndpoint) {
    super::handover::register(w, format!("route:{name}"), &endpoint, None);
    w.part::<Named>()
        .0
        .borrow_mut()
        .insert(name.to_string(), endpoint);
}

/// The endpoint called `name` in worker `w`.
#[cfg_attr(not(feature = "axum"), allow(dead_code))]
pub(crate) fn get(w: &WorkerCtx, name: &str) -> Option<WsEndpoint> {
    w.part::<Named>().0.borrow().get(name).cloned()
}
