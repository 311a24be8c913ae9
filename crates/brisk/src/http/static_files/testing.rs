//! Helpers for the file server's unit tests: a scratch root with secrets beside it, and
//! requests and responses in a line each.

use std::path::PathBuf;

pub(super) use super::StaticFiles;
pub(super) use crate::http::testing::run;
pub(super) use crate::http::Body;
pub(super) use http::{Method, Request, Response, StatusCode};
pub(super) use http_body_util::BodyExt;

pub(super) const SECRET: &[u8] = b"TOP-SECRET-OUTSIDE-THE-ROOT";

/// A unique temporary directory, removed on drop, with `root/` inside and
/// secret files next to it (outside the root).
pub(super) struct TempDir {
    pub(super) base: PathBuf,
    _dir: tempfile::TempDir,
}

impl TempDir {
    pub(super) fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("brisk-static-")
            .tempdir()
            .unwrap();
        let base = dir.path().to_path_buf();
        std::fs::create_dir_all(base.join("root")).unwrap();
        std::fs::write(base.join("x"), SECRET).unwrap();
        std::fs::write(base.join("secret.txt"), SECRET).unwrap();
        TempDir { base, _dir: dir }
    }

    pub(super) fn root(&self) -> PathBuf {
        self.base.join("root")
    }

    pub(super) fn write(&self, rel: &str, contents: &[u8]) -> PathBuf {
        let path = self.root().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, contents).unwrap();
        path
    }

    pub(super) fn files(&self) -> StaticFiles {
        StaticFiles::new(self.root()).unwrap()
    }
}

pub(super) fn request(method: Method, headers: &[(&str, &str)]) -> Request<()> {
    let mut builder = Request::builder().method(method).uri("/static/x");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(()).unwrap()
}

pub(super) fn get(headers: &[(&str, &str)]) -> Request<()> {
    request(Method::GET, headers)
}

pub(super) async fn body(resp: Response<Body>) -> Vec<u8> {
    resp.into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec()
}

pub(super) fn header<'a>(resp: &'a Response<Body>, name: &str) -> &'a str {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().unwrap())
        .unwrap_or("")
}

pub(super) async fn fetch(files: &StaticFiles, path: &str) -> (StatusCode, Vec<u8>) {
    let resp = files.serve(&get(&[]), path).await;
    let status = resp.status();
    (status, body(resp).await)
}

/// Every header of a response, for comparing two of them.
pub(super) fn all_headers(resp: &Response<Body>) -> Vec<(String, String)> {
    let mut headers: Vec<_> = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
        .collect();
    headers.sort();
    headers
}
