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
) -> Result<(Box<dyn Socket>, BytesMut), String> {
    let Opened {
        mut socket,
        encrypted,
        end_point,
        downgraded,
    } = opened;
    let not_after_a_downgrade = |what: &str| {
        Err(format!(
            "the server asks for {what} on a connection without TLS, though TLS was asked for \
             (sslmode=prefer) and declined: whoever declined it may be in the middle, so the \
             password is not sent. Make the server take TLS, or give sslmode=disable to send \
             it without TLS on a network you trust"
        ))
    };
    let binding = config.get_channel_binding();
    let require_binding = binding == ChannelBinding::Require;
    let unbound = |why: &str| Err(format!("channel_binding=require, but {why}"));
    let mut bound = false;
    let user = config.get_user().ok_or("the URL names no user")?;
    let password = || {
        config
            .get_password()
            .ok_or("the server asks for a password")
    };
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
    frontend::startup_message(parameters, &mut out).map_err(|e| e.to_string())?;
    let mut input = BytesMut::with_capacity(8192);
    let mut scram: Option<sasl::ScramSha256> = None;
    // Nothing but authentication comes before AuthenticationOk: a server (or a man in the
    // middle) that says it is ready before has not shown that it knows the password.
    let mut authenticated = false;
    loop {
        if !out.is_empty() {
            socket
                .write_all_buf(&mut out)
                .await
                .map_err(|e| e.to_string())?;
        }
        let io = |e: std::io::Error| e.to_string();
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
            return Err("the server asks to authenticate again after AuthenticationOk".into());
        }
        if session && !authenticated {
            return Err(
                "the server went on without authenticating us (no AuthenticationOk)".into(),
            );
        }
        match message {
            Message::AuthenticationOk => {
                if scram.is_some() {
                    return Err("the server skipped SCRAM's final message".into());
                }
                if require_binding && !bound {
                    return unbound("the server let us in without SCRAM");
                }
                authenticated = true;
            }
            Message::ParameterStatus(_) | Message::NoticeResponse(_) => {}
            Message::AuthenticationCleartextPassword if require_binding => {
                return unbound("the server asks for a cleartext password");
            }
            Message::AuthenticationMd5Password(_) if require_binding => {
                return unbound("the server asks for an MD5 password");
            }
            Message::AuthenticationCleartextPassword if downgraded => {
                return not_after_a_downgrade("a cleartext password");
            }
            Message::AuthenticationMd5Password(_) if downgraded => {
                return not_after_a_downgrade("an MD5 password");
            }
            Message::AuthenticationCleartextPassword => {
                frontend::password_message(password()?, &mut out).map_err(io)?;
            }
            Message::AuthenticationMd5Password(body) => {
                let hash = authentication::md5_hash(user.as_bytes(), password()?, body.salt());
                frontend::password_message(hash.as_bytes(), &mut out).map_err(io)?;
            }
            Message::AuthenticationSasl(body) => {
                let offered: Vec<String> = body
                    .mechanisms()
                    .map(|m| Ok(m.to_string()))
                    .collect()
                    .map_err(io)?;
                let plus = offered.iter().any(|m| m == sasl::SCRAM_SHA_256_PLUS);
                // Over TLS: bind when the server offers it, else say "y" (could have, was not
                // offered), so that a server whose offer was stripped in transit notices. A
                // certificate Brisk cannot hash fails rather than go unbound: whoever ended
                // TLS chose it.
                let (mechanism, channel) = if binding == ChannelBinding::Disable || !encrypted {
                    (sasl::SCRAM_SHA_256, sasl::ChannelBinding::unsupported())
                } else if plus {
                    let hash = end_point.clone().ok_or(
                        "the server offers SCRAM-SHA-256-PLUS, but its certificate's signature \
                         names no hash Brisk can bind to (SHA-1, SHA-224, -256, -384, -512)",
                    )?;
                    (
                        sasl::SCRAM_SHA_256_PLUS,
                        sasl::ChannelBinding::tls_server_end_point(hash),
                    )
                } else {
                    (sasl::SCRAM_SHA_256, sasl::ChannelBinding::unrequested())
                };
                bound = mechanism == sasl::SCRAM_SHA_256_PLUS;
                if require_binding && !bound {
                    return unbound(if encrypted {
                        "the server does not offer SCRAM-SHA-256-PLUS"
                    } else {
                        "this connection is not TLS"
                    });
                }
                if !offered.iter().any(|m| m == mechanism) {
                    return Err(format!(
                        "the server offers SASL {offered:?}; Brisk speaks SCRAM-SHA-256"
                    ));
                }
                let s = sasl::ScramSha256::new(password()?, channel);
                frontend::sasl_initial_response(mechanism, s.message(), &mut out).map_err(io)?;
                scram = Some(s);
            }
            Message::AuthenticationSaslContinue(body) => {
                let s = scram.take().ok_or("SASL continue before SASL start")?;
                let s = derive_key(s, body.data()).await?;
                frontend::sasl_response(s.message(), &mut out).map_err(io)?;
                scram = Some(s);
            }
            Message::AuthenticationSaslFinal(body) => {
                let mut s = scram.take().ok_or("SASL final before SASL start")?;
                s.finish(body.data()).map_err(io)?;
            }
            Message::BackendKeyData(_) => {}
            Message::ErrorResponse(body) => return Err(error_text(&body)),
            Message::ReadyForQuery(_) => break,
            _ => return Err("the server asks for an authentication Brisk does not speak".into()),
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
            return Err(format!(
                "transaction_read_only is {read_only} here (target_session_attrs)"
            ));
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
) -> Result<sasl::ScramSha256, String> {
    let rounds =
        scram_iterations(data).ok_or("the server's SCRAM message names no iteration count (i=)")?;
    if rounds > MAX_SCRAM_ITERATIONS {
        return Err(format!(
            "the server asks for {rounds} SCRAM iterations, over Brisk's limit of \
             {MAX_SCRAM_ITERATIONS}"
        ));
    }
    let data = data.to_vec();
    tokio::task::spawn_blocking(move || scram.update(&data).map(|()| scram))
        .await
        .map_err(|e| format!("SCRAM key derivation: {e}"))?
        .map_err(|e| e.to_string())
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
) -> Result<String, String> {
    let mut out = BytesMut::new();
    frontend::query(&format!("SHOW {name}"), &mut out).map_err(|e| e.to_string())?;
    socket
        .write_all_buf(&mut out)
        .await
        .map_err(|e| e.to_string())?;
    let mut value = String::new();
    loop {
        match read_message(socket, input, MAX_STARTUP_MESSAGE).await? {
            Message::DataRow(row) => {
                if let Ok(Some(Some(range))) = row.ranges().next() {
                    value = String::from_utf8_lossy(&row.buffer()[range]).into_owned();
                }
            }
            Message::ErrorResponse(body) => return Err(error_text(&body)),
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
        assert!(e.contains("over Brisk's limit"), "{e}");
    }
}
