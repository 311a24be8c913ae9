//! Running the handler for one request taken on Brisk's HTTP/1.1 path and handing its
//! response to the writer, keeping the connection marked busy as long as the response may
//! still read the request.
//!
//! Most handlers answer without waiting, with a body in memory: [`start`] calls the handler,
//! polls its future once in the connection's task and stages such an answer at once. Only
//! an answer that must wait (a handler still running, a streamed body, a file) becomes a
//! future, [`Waiting::answer`]'s, which the caller boxes: per request, no future is built
//! (and copied into its box) for an answer that never waits.

use std::io;
use std::panic::AssertUnwindSafe;
use std::task::{Context, Poll};
use std::time::Instant;

use futures_util::FutureExt;
use http::{Method, Request, Response, Version};

use super::buffers::Output;
use super::write::{stage_in_memory, stages_in_memory, write_response};
use super::Keep;
use crate::http::io::HttpIo;
use crate::http::respond::{admit, finish, until_sent, Admitted, Handling, Outcome, Ticket};
use crate::http::response_head::HeadContext;
use crate::http::state::{HttpConn, HttpShared};
use crate::http::{Body, RequestBody};

/// How far [`start`] got with a request.
pub(super) enum Started {
    /// Answered and staged.
    Staged(Keep),
    /// The rest must wait: the caller awaits [`Waiting::answer`].
    Waiting(Waiting),
}

/// A request whose answer must wait, with what answering it needs.
pub(super) struct Waiting {
    stage: Stage,
    head: Head,
}

/// What the response's head needs from the request.
struct Head {
    method: Method,
    http10: bool,
    close: bool,
}

impl Head {
    /// The head of `req`'s answer; `close` if the request asked to close.
    fn of(req: &Request<RequestBody>, close: bool) -> Head {
        Head {
            method: req.method().clone(),
            http10: req.version() == Version::HTTP_10,
            close,
        }
    }

    fn cx(&self) -> HeadContext<'_> {
        HeadContext {
            method: &self.method,
            close_requested: self.close,
            http10: self.http10,
            body_len: None,
        }
    }
}

/// What an answer waits for.
enum Stage {
    /// Its handler, still running.
    Handler(Handling, Ticket),
    /// The writer.
    Write(Write),
}

/// An answer the writer must send, waiting for the socket.
enum Write {
    /// A file range, sent with `sendfile(2)`.
    File(Response<Body>),
    /// A body that streams (or a head the writer must refuse), already held by
    /// [`until_sent`].
    Body(Response<Body>),
}

/// Calls the handler for one request and polls its future once: an answer with its body in
/// memory is staged now. `began` is when the request's bytes were read.
pub(super) fn start(
    shared: &HttpShared,
    conn: &HttpConn,
    out: &mut Output,
    req: Request<RequestBody>,
    close: bool,
    began: Option<Instant>,
) -> Started {
    let head = Head::of(&req, close);
    let (admitted, ticket) = admit(shared, conn, req, began);
    let resp = match admitted {
        Admitted::Refused(code, why) => ticket.refused(shared, conn, code, why),
        Admitted::Panicked(panic) => finish(shared, conn, ticket, Err(panic)),
        Admitted::Handling(mut handling) => match poll_once(conn, &mut handling) {
            Some(outcome) => finish(shared, conn, ticket, outcome),
            None => {
                let stage = Stage::Handler(handling, ticket);
                return Started::Waiting(Waiting { stage, head });
            }
        },
    };
    match stage_or_wait(conn, out, resp, &head.cx()) {
        Staging::Staged(keep) => Started::Staged(keep),
        Staging::Write(write) => Started::Waiting(Waiting {
            stage: Stage::Write(write),
            head,
        }),
    }
}

/// Polls a handler's future once, in the connection's task, with the task's waker (which
/// the connection keeps once the task has waited once), catching a panic as the boxed
/// path's `catch_unwind` does. `None` when there is no waker yet or the future is not ready.
fn poll_once(conn: &HttpConn, handling: &mut Handling) -> Option<Outcome> {
    // Taken for the poll: the task is running, so nothing needs to wake it meanwhile.
    let waker = conn.waker.take()?;
    let mut cx = Context::from_waker(&waker);
    let polled = std::panic::catch_unwind(AssertUnwindSafe(|| handling.as_mut().poll(&mut cx)));
    conn.waker.set(Some(waker));
    match polled {
        Ok(Poll::Ready(result)) => Some(Ok(result)),
        Ok(Poll::Pending) => None,
        Err(panic) => Some(Err(panic)),
    }
}

/// What [`stage_or_wait`] did with an answer.
enum Staging {
    /// Staged: its body was in memory.
    Staged(Keep),
    /// Given back for the writer.
    Write(Write),
}

/// Stages a handler's answer if its body is in memory; otherwise gives it back for the
/// writer.
fn stage_or_wait(
    conn: &HttpConn,
    out: &mut Output,
    resp: Response<Body>,
    cx: &HeadContext<'_>,
) -> Staging {
    // A file range stays one (for `sendfile`): it reads no request body, so the connection
    // is simply idle again once it is sent.
    if resp.body().is_file() {
        return Staging::Write(Write::File(resp));
    }
    let resp = until_sent(resp, &conn.activity);
    if stages_in_memory(out, &resp) {
        return Staging::Staged(stage_in_memory(out, resp, cx));
    }
    Staging::Write(Write::Body(resp))
}

impl Waiting {
    /// Waits for the handler (if it still runs), then stages or sends its answer.
    pub(super) async fn answer(
        self,
        shared: &HttpShared,
        conn: &HttpConn,
        io: &HttpIo,
        out: &mut Output,
    ) -> io::Result<Keep> {
        let Waiting { stage, head } = self;
        let cx = head.cx();
        let write = match stage {
            Stage::Handler(handling, ticket) => {
                let outcome = AssertUnwindSafe(handling).catch_unwind().await;
                let resp = finish(shared, conn, ticket, outcome);
                match stage_or_wait(conn, out, resp, &cx) {
                    Staging::Staged(keep) => return Ok(keep),
                    Staging::Write(write) => write,
                }
            }
            Stage::Write(write) => write,
        };
        // Boxed: most answers are in memory and never need the writer's state.
        match write {
            Write::File(resp) => {
                let sent = Box::pin(write_response(io, out, resp, cx, shared)).await;
                conn.activity.response_done();
                sent
            }
            Write::Body(resp) => Box::pin(write_response(io, out, resp, cx, shared)).await,
        }
    }
}
