//! Report R2's three template jobs (three variables, a 1,000-row table, a typical page) on
//! three engines: sailfish (compiled with the app; the demo's choice), askama (compiled with
//! the app), and minijinja (compiled at run time by `brisk::template::Templates`, with its
//! cache, and without it: every render compiles again, which is also what a first call
//! costs).
//!
//! ```text
//! cargo bench -p brisk-demo --bench templates
//! ```
//!
//! All engines render the same page for the same data (checked before measuring, after
//! decoding character references: `&lt;` and `&#60;` are the same character).

use askama::Template;
use brisk::template::{TemplateOptions, Templates};
use criterion::{criterion_group, criterion_main, Criterion};
use sailfish::TemplateSimple;
use std::hint::black_box;

#[path = "../src/pages.rs"]
#[allow(dead_code, unreachable_pub)]
mod pages;

use pages::{Article, Link, R2Data, Row, Tag};

#[derive(Template)]
#[template(path = "jinja/r2/vars.html")]
struct AskamaVars<'a> {
    title: &'a str,
    name: &'a str,
    count: u32,
}

#[derive(Template)]
#[template(path = "jinja/r2/table.html")]
struct AskamaTable<'a> {
    title: &'a str,
    rows: &'a [Row],
}

#[derive(Template)]
#[template(path = "jinja/r2/page.html")]
struct AskamaPage<'a> {
    site: &'a str,
    heading: &'a str,
    user: &'a str,
    nav: &'a [Link],
    articles: &'a [Article],
    tags: &'a [Tag],
    year: u32,
}

fn askama_vars(d: &R2Data) -> String {
    let v = d.vars();
    AskamaVars {
        title: v.title,
        name: v.name,
        count: v.count,
    }
    .render()
    .unwrap()
}

fn askama_table(d: &R2Data) -> String {
    let t = d.table();
    AskamaTable {
        title: t.title,
        rows: t.rows,
    }
    .render()
    .unwrap()
}

fn askama_page(d: &R2Data) -> String {
    let p = d.page();
    AskamaPage {
        site: p.site,
        heading: p.heading,
        user: p.user,
        nav: p.nav,
        articles: p.articles,
        tags: p.tags,
        year: p.year,
    }
    .render()
    .unwrap()
}

/// One engine doing one job.
type Render = fn(&R2Data) -> String;

fn engines(c: &mut Criterion) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/templates/jinja/r2");
    let cached = Templates::new(dir, TemplateOptions::default()).unwrap();
    let uncached = TemplateOptions {
        cache: false,
        ..TemplateOptions::default()
    };
    let uncached = Templates::new(dir, uncached).unwrap();
    let data = R2Data::new();

    let jobs: [(&str, Render, Render); 3] = [
        ("vars", askama_vars, |d| d.vars().render_once().unwrap()),
        ("table", askama_table, |d| d.table().render_once().unwrap()),
        ("page", askama_page, |d| d.page().render_once().unwrap()),
    ];
    for (job, askama, sailfish) in jobs {
        let file = format!("{job}.html");
        let jinja = |t: &Templates| match job {
            "vars" => t.render(&file, data.vars()),
            "table" => t.render(&file, data.table()),
            _ => t.render(&file, data.page()),
        };
        let expected = unescaped(&askama(&data));
        assert_eq!(
            unescaped(&sailfish(&data)),
            expected,
            "sailfish renders {job} differently"
        );
        let minijinja = unescaped(&jinja(&cached).unwrap());
        assert_eq!(minijinja, expected, "minijinja renders {job} differently");
        let mut group = c.benchmark_group(job);
        group.bench_function("askama", |b| b.iter(|| askama(black_box(&data))));
        group.bench_function("sailfish", |b| b.iter(|| sailfish(black_box(&data))));
        group.bench_function("minijinja", |b| b.iter(|| jinja(black_box(&cached))));
        group.bench_function("minijinja-uncached", |b| {
            b.iter(|| jinja(black_box(&uncached)))
        });
        group.finish();
    }
}

/// `html` with every character reference decoded and the trailing newline trimmed: the
/// engines escape the same characters but spell some differently (`&lt;`, `&#60;`).
fn unescaped(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html.trim_end();
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let end = rest.find(';').expect("a character reference ends with ;");
        let name = &rest[1..end];
        let c = match name {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "copy" => '\u{a9}',
            _ => {
                let code = match name.strip_prefix("#x").or(name.strip_prefix("#X")) {
                    Some(hex) => u32::from_str_radix(hex, 16),
                    None => name.trim_start_matches('#').parse(),
                };
                char::from_u32(code.expect("a numeric reference")).unwrap()
            }
        };
        out.push(c);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

criterion_group!(benches, engines);
criterion_main!(benches);
