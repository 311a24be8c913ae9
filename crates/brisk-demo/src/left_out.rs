//! What a build without some of the demo's legs says when they are asked for
//! (`cargo run -p brisk-demo --no-default-features`, the README's quick start): a route
//! answers 501 and a flag stops the start, each naming the cargo feature that brings the leg
//! back. The stand-in modules are in `left_out/`, one per leg; `main.rs` picks them with
//! `cfg_attr(…, path)`.

use brisk::http::Body;
use http::{Response, StatusCode};

/// What a user reads when the leg of cargo feature `feature` is asked for by `what`.
pub(crate) fn why(what: &str, feature: &str) -> String {
    format!(
        "{what} needs the demo's `{feature}` feature, which this build leaves out: build it \
         with the default features (cargo run --release -p brisk-demo -- start)"
    )
}

/// The 501 a route of a left-out leg answers, its body `{"error": WHY}`.
pub(crate) fn route(path: &str, feature: &str) -> Response<Body> {
    crate::jobs::error(StatusCode::NOT_IMPLEMENTED, &why(path, feature))
}

/// `Err` naming `feature` when `flag` was given to a build without it.
pub(crate) fn flag(flag: &str, given: bool, feature: &str) -> anyhow::Result<()> {
    anyhow::ensure!(!given, "{}", why(flag, feature));
    Ok(())
}

/// `Err` naming the feature when `url` is a database this build leaves out
/// (`postgres://…` without `postgres`, `mysql://…` without `mysql`).
pub(crate) fn database(url: &str) -> anyhow::Result<()> {
    let postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let mysql = url.starts_with("mysql://") || url.starts_with("mariadb://");
    flag(
        "a PostgreSQL --database",
        postgres && !cfg!(feature = "postgres"),
        "postgres",
    )?;
    flag(
        "a MySQL --database",
        mysql && !cfg!(feature = "mysql"),
        "mysql",
    )
}
