//! The demo's template routes over HTTP: report R2's three jobs on both engines render the
//! same page, escaped; R4's view; the template cache off and development reload; a template
//! that does not compile stops the start with its file and line.

use std::process::Command;

use brisk_testkit::*;

mod common;
use common::{demo_with, get, DEMO};

/// The text of `html` with character references decoded (the engines spell `<` as `&lt;`
/// or `&#60;`).
fn decoded(html: &str) -> String {
    html.replace("&lt;", "<")
        .replace("&#60;", "<")
        .replace("&gt;", ">")
        .replace("&#62;", ">")
        .replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&#x2f;", "/")
        .replace("&amp;", "&")
        .replace("&#38;", "&")
}

#[test]
fn the_three_jobs_render_the_same_page_on_both_engines() {
    let d = demo_with(1, &[]);
    for job in ["vars", "table", "page"] {
        let compiled = get(d.http, &format!("/tpl/{job}"));
        let runtime = get(d.http, &format!("/tpl/{job}?engine=minijinja"));
        for r in [&compiled, &runtime] {
            assert_eq!(r.status, 200, "{job}: {}", r.text());
            assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
            assert!(!r.text().contains("<admin>"), "{job}: not escaped");
            assert!(!r.text().contains("<sockets>"), "{job}: not escaped");
        }
        assert_eq!(
            decoded(compiled.text().trim_end()),
            decoded(runtime.text().trim_end()),
            "{job}"
        );
    }
    let table = get(d.http, "/tpl/table").text();
    assert_eq!(table.matches("<tr><td>").count(), 1000, "1,000 rows");
    assert!(decoded(&table).contains("<td>1000</td><td>row <1000> & co</td><td>0</td>"));
    let page = decoded(&get(d.http, "/tpl/page?engine=minijinja").text());
    assert_eq!(page.matches("<article>").count(), 10);
    assert_eq!(page.matches("href=\"/tags/").count(), 30);
    assert_eq!(page.matches("<li><a href=\"/section/").count(), 12);
    assert!(
        page.contains("<footer>&copy; 2026 Brisk News</footer>"),
        "{page}"
    );
    let view = get(d.http, "/view");
    assert_eq!(view.status, 200);
    assert!(view.text().contains("<h1>Hello from a view</h1>"));
}

#[test]
fn without_the_cache_each_render_reads_the_file_and_development_reloads_it() {
    let dir = temp_dir("tpl");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/templates/jinja");
    let copy = |name: &str| {
        let to = dir.path().join(name);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(format!("{src}/{name}"), to).unwrap();
    };
    for name in ["r2/vars.html", "r2/table.html", "r2/page.html"] {
        copy(name);
    }
    let vars = dir.path().join("r2/vars.html");
    let path = dir.path().display().to_string();
    let cached = demo_with(1, &["--templates", &path]);
    let uncached = demo_with(1, &["--templates", &path, "--no-template-cache"]);
    let dev = demo_with(1, &["--templates", &path, "--template-dev"]);
    for d in [&cached, &uncached, &dev] {
        assert!(get(d.http, "/tpl/vars?engine=minijinja")
            .text()
            .contains("new messages"));
    }
    std::fs::write(&vars, "changed {{ count }}").unwrap();
    // The file's time may not have moved on a coarse clock: move it on by hand.
    let f = std::fs::File::options().write(true).open(&vars).unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
        .unwrap();
    let body = |d: &common::Demo| get(d.http, "/tpl/vars?engine=minijinja");
    assert!(
        body(&cached).text().contains("new messages"),
        "the cache keeps it"
    );
    assert_eq!(body(&uncached).text(), "changed 42");
    assert_eq!(body(&dev).text(), "changed 42");

    // A broken edit: production says only 500; development says where.
    std::fs::write(&vars, "line one\n{% for %}").unwrap();
    let f = std::fs::File::options().write(true).open(&vars).unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(10))
        .unwrap();
    let plain = body(&uncached);
    assert_eq!(plain.status, 500);
    assert_eq!(plain.text(), "internal server error\n");
    let detailed = body(&dev);
    assert_eq!(detailed.status, 500);
    assert!(
        detailed.text().contains("r2/vars.html:2"),
        "{}",
        detailed.text()
    );
    // The worker is fine: other pages still render.
    assert_eq!(get(uncached.http, "/tpl/page?engine=minijinja").status, 200);
    assert_eq!(get(dev.http, "/view").status, 200);
}

#[test]
fn a_template_that_does_not_compile_stops_the_start_with_its_file_and_line() {
    let dir = temp_dir("tpl");
    std::fs::create_dir_all(dir.path().join("admin")).unwrap();
    std::fs::write(dir.path().join("ok.html"), "fine").unwrap();
    std::fs::write(
        dir.path().join("admin/login.html"),
        "<form>\n{% if user %}\n<p>{{ user }</p>\n{% endif %}\n",
    )
    .unwrap();
    let run = temp_dir("run");
    let (args, _) = common::demo_args(1);
    let out = Command::new(DEMO)
        .args(&args)
        .args(["--templates", &dir.path().display().to_string()])
        .args(["--run-dir", &run.path().display().to_string(), "start"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("admin/login.html:3"), "{stderr}");
    assert!(stderr.contains("syntax error"), "{stderr}");
    assert!(
        !run.path().join("brisk-demo.pid").exists(),
        "nothing started"
    );
}
