//! `/orm/db` and `/qb/db` in a build without the `orm` feature (sqlx): 501.

use brisk::http::Body;
use http::Response;

use crate::left_out;

/// The ORM endpoints of a build without sqlx.
#[derive(Clone)]
pub(crate) struct Orm;

impl Orm {
    /// The stand-in, whatever the database.
    pub(crate) fn new(_url: &str) -> Self {
        Orm
    }

    /// Answers `/orm/db` with 501.
    pub(crate) async fn db(&self) -> Response<Body> {
        left_out::route("/orm/db", "orm")
    }

    /// Answers `/qb/db` with 501.
    pub(crate) async fn builder_db(&self) -> Response<Body> {
        left_out::route("/qb/db", "orm")
    }
}
