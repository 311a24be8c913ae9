//! Endpoints by name, for routes that cannot hold one: an axum route's handler must be `Send`,
//! and a [`WsEndpoint`] is not (its callbacks may hold `Rc` state). The server registers its
//! endpoints on the worker's thread ([`HttpServer::ws_endpoint`](crate::http::HttpServer::ws_endpoint));
//! a route finds one by name when a request comes.

use std::cell::RefCell;
use std::collections::HashMap;

use super::WsEndpoint;

thread_local! {
    static NAMED: RefCell<HashMap<String, WsEndpoint>> = RefCell::new(HashMap::new());
}

/// Makes `endpoint` the one called `name` on this thread (a worker's, where the app is built).
pub(crate) fn register(name: &str, endpoint: WsEndpoint) {
    super::handover::register(format!("route:{name}"), &endpoint, None);
    NAMED.with(|n| n.borrow_mut().insert(name.to_string(), endpoint));
}

/// The endpoint called `name` on this thread.
#[cfg_attr(not(feature = "axum"), allow(dead_code))]
pub(crate) fn get(name: &str) -> Option<WsEndpoint> {
    NAMED.with(|n| n.borrow().get(name).cloned())
}
