//! Endpoints by name, for routes that cannot hold one: an axum route's handler must be `Send`,
//! and a [`WsEndpoint`] is not (its callbacks may hold `Rc` state). The server names its
//! endpoints ([`HttpServer::ws_endpoint`](crate::http::HttpServer::ws_endpoint)), and each
//! worker registers them in its context when the server starts there; a route finds one by
//! its [`EndpointName`], which also carries the type of its connections' data, so a route
//! attaches data of the endpoint's type or does not compile.

use std::any::{type_name, TypeId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;

use super::endpoint::Endpoint;
use super::WsEndpoint;
use crate::runtime::context::WorkerCtx;

/// The name of a WebSocket endpoint whose connections carry data of type `T`: the server
/// registers the endpoint under it
/// ([`HttpServer::ws_endpoint`](crate::http::HttpServer::ws_endpoint)) and routes open
/// connections into it ([`WebSocketUpgrade::on`](super::WebSocketUpgrade::on)). Declare it
/// once, as a constant both use.
///
/// ```
/// use brisk::ws::EndpointName;
/// struct Member { user: String }
/// const CHAT: EndpointName<Member> = EndpointName::new("chat");
/// assert_eq!(CHAT.as_str(), "chat");
/// ```
pub struct EndpointName<T = ()> {
    name: &'static str,
    data: PhantomData<fn() -> T>,
}

impl<T> EndpointName<T> {
    /// The endpoint called `name` whose connections carry a `T`.
    pub const fn new(name: &'static str) -> Self {
        EndpointName {
            name,
            data: PhantomData,
        }
    }

    /// The name.
    pub const fn as_str(&self) -> &'static str {
        self.name
    }
}

impl<T> Clone for EndpointName<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for EndpointName<T> {}

impl<T> fmt::Debug for EndpointName<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EndpointName<{}>({:?})", type_name::<T>(), self.name)
    }
}

/// An endpoint with its name and the type of its connections' data, as a server keeps it
/// until its workers register it.
#[derive(Clone)]
pub(crate) struct NamedEndpoint {
    name: &'static str,
    endpoint: Endpoint,
    data: TypeId,
    data_type: &'static str,
}

impl NamedEndpoint {
    /// `endpoint`, under `name`.
    pub(crate) fn new<T: 'static>(name: EndpointName<T>, endpoint: WsEndpoint<T>) -> Self {
        NamedEndpoint {
            name: name.name,
            endpoint: endpoint.core().clone(),
            data: TypeId::of::<T>(),
            data_type: type_name::<T>(),
        }
    }

    /// Its name.
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }
}

/// A worker's named endpoints, one of its context's parts.
#[derive(Default)]
pub(crate) struct Named(RefCell<HashMap<&'static str, NamedEndpoint>>);

/// Why a route found no endpoint for its name.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotFound {
    /// No endpoint of that name on this server.
    #[error("no WebSocket endpoint named {0:?} on this server: register it with HttpServer::ws_endpoint")]
    Unknown(&'static str),
    /// One of that name whose connections carry another type (two names of one string).
    #[error("the WebSocket endpoint {name:?} carries {registered}, not {asked}: one EndpointName per endpoint")]
    OtherData {
        /// The name.
        name: &'static str,
        /// The type it was registered with.
        registered: &'static str,
        /// The type the route asked for.
        asked: &'static str,
    },
}

/// Makes `named` an endpoint of worker `w`.
pub(crate) fn register(w: &WorkerCtx, named: &NamedEndpoint) {
    let key = format!("route:{}", named.name);
    super::handover::register(w, key, &named.endpoint, None);
    let part = w.part::<Named>();
    part.0.borrow_mut().insert(named.name, named.clone());
}

/// The endpoint `name` of worker `w`, if its connections carry a `T`.
#[cfg_attr(not(feature = "axum"), allow(dead_code))]
pub(crate) fn get<T: 'static>(w: &WorkerCtx, name: EndpointName<T>) -> Result<Endpoint, NotFound> {
    let part = w.part::<Named>();
    let endpoints = part.0.borrow();
    let found = endpoints
        .get(name.name)
        .ok_or(NotFound::Unknown(name.name))?;
    if found.data != TypeId::of::<T>() {
        return Err(NotFound::OtherData {
            name: name.name,
            registered: found.data_type,
            asked: type_name::<T>(),
        });
    }
    Ok(found.endpoint.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::context::test_worker;

    struct Member;
    struct Other;
    const CHAT: EndpointName<Member> = EndpointName::new("chat");

    #[test]
    fn a_route_finds_its_endpoint_only_by_a_name_of_its_data_type() {
        let w = test_worker();
        let endpoint = WsEndpoint::new().data::<Member>();
        register(&w, &NamedEndpoint::new(CHAT, endpoint));
        assert!(get(&w, CHAT).is_ok());
        let same_string: EndpointName<Other> = EndpointName::new("chat");
        let why = get(&w, same_string)
            .err()
            .expect("another data type is refused");
        assert!(matches!(why, NotFound::OtherData { name: "chat", .. }));
        assert!(why.to_string().contains("named::tests::Member"), "{why}");
        assert!(why.to_string().contains("named::tests::Other"), "{why}");
        let unknown: EndpointName<Member> = EndpointName::new("lobby");
        let why = get(&w, unknown).err().expect("an unknown name is refused");
        assert!(matches!(why, NotFound::Unknown("lobby")), "{why}");
    }

    #[test]
    #[should_panic(expected = "two WebSocket endpoints named \"chat\"")]
    fn a_server_refuses_two_endpoints_of_one_name() {
        let _ = crate::http::HttpServer::new("http://127.0.0.1:1")
            .unwrap()
            .ws_endpoint(CHAT, WsEndpoint::new().data::<Member>())
            .ws_endpoint(EndpointName::new("chat"), WsEndpoint::new());
    }

    #[test]
    #[should_panic(expected = "must come before on_open")]
    fn an_endpoint_names_its_data_type_before_its_callbacks() {
        let _ = WsEndpoint::new()
            .on_message(|_, _| async {})
            .data::<Member>();
    }

    #[test]
    #[should_panic(expected = "must come before the connection callbacks")]
    fn a_server_names_its_data_type_before_its_callbacks() {
        let _ = crate::Server::new("text://127.0.0.1:1")
            .unwrap()
            .on_message(|_, _| async {})
            .data::<Member>();
    }
}
