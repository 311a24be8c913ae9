//! Mail (with `--smtp URL`): `POST /mail` with `{"to": ADDRESS, "subject": TEXT, "text":
//! TEXT}` sends a plain-text message through the SMTP server from the handler, awaiting the
//! server's answer without holding the worker. Without `--smtp` it answers 503 naming the
//! flag.
//!
//! Answers: 200 `{"code": 250, "message": …}` when the server accepted the message; 400 for a
//! bad body or address; 502 when the server refused it or TLS failed; 503 when it cannot be
//! reached; 504 when it does not answer in time.

use std::path::PathBuf;

use anyhow::Context;
use brisk::http::{Body, RequestBody};
use brisk::mail::{self, Mailer};
use http::{Response, StatusCode};
use http_body_util::BodyExt;

use crate::jobs::{error, json};

/// Who the demo's messages are from.
const FROM: &str = "Brisk demo <noreply@brisk-demo.invalid>";

/// The `/mail` route of one worker.
#[derive(Clone)]
pub(crate) struct Mail {
    mailer: Option<Mailer>,
}

impl Mail {
    /// The route, sending through the SMTP server at `smtp` (`--smtp`) if given, which is
    /// trusted through the certificate in the file `ca` (`--smtp-ca`) if given.
    pub(crate) fn new(smtp: Option<String>, ca: Option<PathBuf>) -> anyhow::Result<Self> {
        let Some(url) = smtp else {
            return Ok(Mail { mailer: None });
        };
        let mut options = mail::MailOptions::default();
        if let Some(ca) = ca {
            let pem = std::fs::read(&ca).with_context(|| format!("--smtp-ca {}", ca.display()))?;
            options.root_certificate = Some(pem);
        }
        let mailer = Mailer::new(&url, options)?;
        Ok(Mail {
            mailer: Some(mailer),
        })
    }

    /// Answers `POST /mail`.
    pub(crate) async fn send(&self, req: http::Request<RequestBody>) -> Response<Body> {
        let Some(mailer) = &self.mailer else {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "mail needs an SMTP server: start the demo with --smtp smtp://host:port",
            );
        };
        let Ok(body) = req.into_body().collect().await else {
            return error(StatusCode::BAD_REQUEST, "cannot read the request body");
        };
        #[derive(serde::Deserialize)]
        struct Request {
            to: String,
            subject: String,
            text: String,
        }
        let Ok(r) = serde_json::from_slice::<Request>(&body.to_bytes()) else {
            return error(
                StatusCode::BAD_REQUEST,
                r#"send JSON {"to": ADDRESS, "subject": TEXT, "text": TEXT}"#,
            );
        };
        let sent = match mail::text(FROM, &r.to, &r.subject, &r.text) {
            Ok(message) => mailer.send(message).await,
            Err(e) => Err(e),
        };
        match sent {
            Ok(d) => json(
                StatusCode::OK,
                serde_json::json!({ "code": d.code, "message": d.message }).to_string(),
            ),
            Err(e) => {
                tracing::warn!("/mail: {e}");
                let status = StatusCode::from_u16(e.http_status())
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                error(status, &e.client_message())
            }
        }
    }
}
