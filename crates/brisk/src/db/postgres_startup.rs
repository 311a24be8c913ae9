//! Start-up of a PostgreSQL session on a new connection: the start-up message, then trust,
//! cleartext, MD5 or SCRAM-SHA-256 authentication (over TLS, SCRAM-SHA-256-PLUS when the
//! server offers it, as `channel_binding` says), then (for `target_session_attrs`) a check that
//! the server takes writes (or only reads).
//!
//! What the server sends here is bounded: a message over [`MAX_STARTUP_MESSAGE`] fails the
//! start, and SCRAM's key derivation (PBKDF2, as many rounds as the server asks) runs on a
//! blocking thread, never on the worker's event loop, for at most [`MAX_SCRAM_ITERATIONS`]
//! rounds.

use std::time::Duration;

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::{self, sasl};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use tokio::io::AsyncWriteExt;
use tokio_postgres::config::{ChannelBinding, TargetSessionAttrs};
use tokio_postgres::Config;

use super::postgres_connect_error::{AuthError, ConnectError};
use super::postgres_message::{error_text, read_message, MAX_STARTUP_MESSAGE};
use super::postgres_tls::{Opened, Socket};

/// The most PBKDF2 rounds SCRAM may ask for: PostgreSQL's default is 4,096; OWASP's advice
/// for PBKDF2-HMAC-SHA256 is 600,000. A server asking for more is refused rather than let
/// a connection attempt cost seconds of CPU.
pub(super) const MAX_SCRAM_ITERATIONS: u32 = 1_000_000;

/// Starts a session on `opened` as `config` says (`statement_timeout`, zero: none, is set on
/// it) and returns the socket ready for queries, with the bytes already read past the
/// start-up.
pub(super) async fn start_session(
    opened: Opened,
    config: &Config,
    statement_timeout: Duration,
) -> Result<(Box<dyn Socket>, BytesMut), ConnectError> {
    let Opened {
        mut socket,
        encrypted,
        end_point,
        downgraded,
    } = opened;

    let binding = config.get_channel_binding();
    let require_binding = binding == ChannelBinding::Require;

    let mut bound = false;
    let user = config.get_user().ok_or(AuthError::NoUser)?;
    let password = || config.get_password().ok_or(AuthError::NoPassword);
    let mut parameters = vec![("client_encoding", "UTF8"), ("user", user)];
    if let Some(name) = config.get_dbname() {
        parameters.push(("database", name));
    }
    if let Some(options) = config.get_options() {
        parameters.push(("options", options));
    }
    if let Some(name) = config.get_application_name() {
        parameters.push(("application_name", name));
    }
    // The server stops a statement that runs too long itself, so a timeout never cancels
    // another caller's query that happens to be running on the shared connection.
    let statement_timeout = statement_timeout.as_millis().to_string();
    if !statement_timeout.starts_with('0') {
        parameters.push(("statement_timeout", &statement_timeout));
    }
    let mut out = BytesMut::new();
    frontend::startup_message(parameters, &mut out)?;
    let mut input = BytesMut::with_capacity(8192);
    let mut scram: Option<sasl::ScramSha256> = None;
    // Nothing but authentication comes before AuthenticationOk: a server (or a man in the
    // middle) that says it is ready before has not shown that it knows the password.
    let mut authenticated = false;
    loop {
        if !out.is_empty() {
            socket.write_all_buf(&mut out).await?;
        }
        let message = read_message(&mut socket, &mut input, MAX_STARTUP_MESSAGE).await?;
        let authentication = matches!(
            message,
            Message::AuthenticationOk
                | Message::AuthenticationCleartextPassword
                | Message::AuthenticationMd5Password(_)
                | Message::AuthenticationSasl(_)
                | Message::AuthenticationSaslContinue(_)
                | Message::AuthenticationSaslFinal(_)
        );
        let session = matches!(
            message,
            Message::ParameterStatus(_) | Message::BackendKeyData(_) | Message::ReadyForQuery(_)
        );
        if authentication && authenticated {
            return Err(AuthError::Again.into());
        }
        if session && !authenticated {
            return Err(AuthError::Skipped.into());
        }
        match message {
            Message::AuthenticationOk => {
                if scram.is_some() {
                    return Err(AuthError::NoScramFinal.into());
                }
                if require_binding && !bound {
                    return Err(AuthError::Unbound("the server let us in without SCRAM").into());
                }
                authenticated = true;
            }
            Message::ParameterStatus(_) | Message::NoticeResponse(_) => {}
            Message::AuthenticationCleartextPassword if require_binding => {
                return Err(AuthError::Unbound("the server asks for a cleartext password").into());
            }
            Message::AuthenticationMd5Password(_) if require_binding => {
                return Err(AuthError::Unbound("the server asks for an MD5 password").into());
            }
            Message::AuthenticationCleartextPassword if downgraded => {
                return Err(AuthError::AfterDowngrade("a cleartext password").into());
            }
            Message::AuthenticationMd5Password(_) if downgraded => {
                return Err(AuthError::AfterDowngrade("an MD5 password").into());
            }
            Message::AuthenticationCleartextPassword => {
                frontend::password_message(password()?, &mut out)?;
            }
            Message::AuthenticationMd5Password(body) => {
                let hash = authentication::md5_hash(user.as_bytes(), password()?, body.salt());
                frontend::password_message(hash.as_bytes(), &mut out)?;
            }
            Message::AuthenticationSasl(body) => {
                let offered: Vec<String> =
                    body.mechanisms().map(|m| Ok(m.to_string())).collect()?;
                let plus = offered.iter().any(|m| m == sasl::SCRAM_SHA_256_PLUS);
                // Over TLS: bind when the server offers it, else say "y" (could have, was not
                // offered), so that a server whose offer was stripped in transit notices. A
                // certificate Brisk cannot hash fails rather than go unbound: whoever ended
                // TLS chose it.
                let (mechanism, channel) = if binding == ChannelBinding::Disable || !encrypted {
                    (sasl::SCRAM_SHA_256, sasl::ChannelBinding::unsupported())
                } else if plus {
                    let hash = end_point.clone().ok_or(AuthError::NoBindableHash)?;
                    (
                        sasl::SCRAM_SHA_256_PLUS,
                        sasl::ChannelBinding::tls_server_end_point(hash),
                    )
                } else {
                    (sasl::SCRAM_SHA_256, sasl::ChannelBinding::unrequested())
                };
                bound = mechanism == sasl::SCRAM_SHA_256_PLUS;
                if require_binding && !bound {
                    let why = if encrypted {
                        "the server does not offer SCRAM-SHA-256-PLUS"
                    } else {
                        "this connection is not TLS"
                    };
                    return Err(AuthError::Unbound(why).into());
                }
                if !offered.iter().any(|m| m == mechanism) {
                    return Err(AuthError::Mechanisms(offered).into());
                }
                let s = sasl::ScramSha256::new(password()?, channel);
                frontend::sasl_initial_response(mechanism, s.message(), &mut out)?;
                scram = Some(s);
            }
            Message::AuthenticationSaslContinue(body) => {
                let s = scram.take().ok_or(AuthError::OutOfOrder("continue"))?;
                let s = derive_key(s, body.data()).await?;
                frontend::sasl_response(s.message(), &mut out)?;
                scram = Some(s);
            }
            Message::AuthenticationSaslFinal(body) => {
                let mut s = scram.take().ok_or(AuthError::OutOfOrder("final"))?;
                s.finish(body.data()).map_err(AuthError::Scram)?;
            }
            Message::BackendKeyData(_) => {}
            Message::ErrorResponse(body) => return Err(ConnectError::Server(error_text(&body))),
            Message::ReadyForQuery(_) => break,
            _ => return Err(AuthError::Unsupported.into()),
        }
    }
    let wanted = match config.get_target_session_attrs() {
        TargetSessionAttrs::ReadWrite => Some("off"),
        TargetSessionAttrs::ReadOnly => Some("on"),
        _ => None,
    };
    if let Some(wanted) = wanted {
        let read_only = show(&mut socket, &mut input, "transaction_read_only").await?;
        if read_only != wanted {
            return Err(ConnectError::OtherKind(read_only));
        }
    }
    Ok((socket, input))
}

/// SCRAM's server-first message `data` given to `scram`: the key derivation it starts runs
/// on a blocking thread, after a check that the rounds asked for are within
/// [`MAX_SCRAM_ITERATIONS`].
async fn derive_key(
    mut scram: sasl::ScramSha256,
    data: &[u8],
) -> Result<sasl::ScramSha256, AuthError> {
    let rounds = scram_iterations(data).ok_or(AuthError::NoIterations)?;
    if rounds > MAX_SCRAM_ITERATIONS {
        return Err(AuthError::TooManyIterations {
            rounds,
            max: MAX_SCRAM_ITERATIONS,
        });
    }
    let data = data.to_vec();
    tokio::task::spawn_blocking(move || scram.update(&data).map(|()| scram))
        .await
        .map_err(AuthError::Derivation)?
        .map_err(AuthError::Scram)
}

/// The iteration count (`i=`) of SCRAM's server-first message.
fn scram_iterations(data: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(data).ok()?;
    text.split(',')
        .find_map(|attribute| attribute.strip_prefix("i="))?
        .parse()
        .ok()
}

/// The value of the server setting `name`, asked before the pipeline starts.
async fn show(
    socket: &mut Box<dyn Socket>,
    input: &mut BytesMut,
    name: &str,
) -> Result<String, ConnectError> {
    let mut out = BytesMut::new();
    frontend::query(&format!("SHOW {name}"), &mut out)?;
    socket.write_all_buf(&mut out).await?;
    let mut value = String::new();
    loop {
        match read_message(socket, input, MAX_STARTUP_MESSAGE).await? {
            Message::DataRow(row) => {
                if let Ok(Some(Some(range))) = row.ranges().next() {
                    value = String::from_utf8_lossy(&row.buffer()[range]).into_owned();
                }
            }
            Message::ErrorResponse(body) => return Err(ConnectError::Server(error_text(&body))),
            Message::ReadyForQuery(_) => return Ok(value),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_iteration_count_is_read_from_the_server_first_message() {
        assert_eq!(scram_iterations(b"r=abc,s=c2FsdA==,i=4096"), Some(4096));
        assert_eq!(scram_iterations(b"r=abc,s=c2FsdA=="), None);
        assert_eq!(scram_iterations(b"r=abc,s=x,i=99999999999"), None);
        assert_eq!(scram_iterations(&[0xff, b'i', b'=']), None);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn too_many_iterations_are_refused_before_any_work() {
        let scram = sasl::ScramSha256::new(b"pw", sasl::ChannelBinding::unsupported());
        let first = format!("r=x,s=c2FsdA==,i={}", MAX_SCRAM_ITERATIONS + 1);
        let e = derive_key(scram, first.as_bytes()).await.err().unwrap();
        assert!(e.to_string().contains("over Brisk's limit"), "{e}");
    }
}
