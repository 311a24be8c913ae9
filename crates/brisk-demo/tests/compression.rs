//! Compression in the demo over HTTP: dynamic pages in gzip or brotli as the client accepts,
//! with `Vary`, decompressing to the page itself; small bodies and clients that accept
//! nothing get plain bytes; precompressed siblings of static files.

use std::io::Read;

use brisk_testkit::*;

mod common;
use common::{demo_with, get, request};

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn unbrotli(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    brotli::Decompressor::new(bytes, 4096)
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[test]
fn pages_are_compressed_as_the_client_accepts_and_decompress_to_themselves() {
    let d = demo_with(1, &[]);
    let plain = get(d.http, "/tpl/table");
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(plain.header("vary"), Some("accept-encoding"));

    let gz = request(
        d.http,
        "GET",
        "/tpl/table",
        &[("Accept-Encoding", "gzip")],
        "",
    );
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    assert_eq!(gz.header("vary"), Some("accept-encoding"));
    assert!(
        gz.body.len() * 5 < plain.body.len(),
        "{} of {}",
        gz.body.len(),
        plain.body.len()
    );
    assert_eq!(gunzip(&gz.body), plain.body);

    let accept = [("Accept-Encoding", "gzip, deflate, br")];
    let br = request(d.http, "GET", "/tpl/page?engine=minijinja", &accept, "");
    assert_eq!(br.header("content-encoding"), Some("br"));
    assert_eq!(
        unbrotli(&br.body),
        get(d.http, "/tpl/page?engine=minijinja").body
    );

    // Hello World is too small to gain anything.
    let small = request(d.http, "GET", "/", &[("Accept-Encoding", "gzip")], "");
    assert_eq!(small.header("content-encoding"), None);
    assert_eq!(small.text(), "Hello World");

    let off = demo_with(1, &["--no-compression"]);
    let r = request(
        off.http,
        "GET",
        "/tpl/table",
        &[("Accept-Encoding", "gzip")],
        "",
    );
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, plain.body);
}

#[test]
fn precompressed_static_siblings_are_served_when_present_and_accepted() {
    let root = temp_dir("static");
    let js = "function hello() { return 'hello'; }\n".repeat(50);
    std::fs::write(root.path().join("app.js"), &js).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, js.as_bytes()).unwrap();
    std::fs::write(root.path().join("app.js.gz"), gz.finish().unwrap()).unwrap();
    let d = demo_with(1, &["--static-root", &root.path().display().to_string()]);

    let r = request(
        d.http,
        "GET",
        "/static/app.js",
        &[("Accept-Encoding", "br, gzip")],
        "",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert!(r.header("content-type").unwrap().contains("javascript"));
    assert_eq!(r.header("vary"), Some("accept-encoding"));
    assert_eq!(gunzip(&r.body), js.as_bytes());

    let r = get(d.http, "/static/app.js");
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.text(), js);
}
