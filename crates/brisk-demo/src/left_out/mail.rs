//! `POST /mail` in a build without the `mail` feature: 501, and `--smtp` stops the start.

use std::path::PathBuf;

use brisk::http::{Body, RequestBody};
use http::Response;

use crate::left_out;

/// The `/mail` route of a build without mail.
#[derive(Clone)]
pub(crate) struct Mail;

impl Mail {
    /// `Err` if `--smtp` was given: this build cannot send.
    pub(crate) fn new(smtp: Option<String>, _ca: Option<PathBuf>) -> anyhow::Result<Self> {
        left_out::flag("--smtp", smtp.is_some(), "mail")?;
        Ok(Mail)
    }

    /// Answers `POST /mail` with 501.
    pub(crate) async fn send(&self, _req: http::Request<RequestBody>) -> Response<Body> {
        left_out::route("/mail", "mail")
    }
}
