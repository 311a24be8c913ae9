//! Report R2's three template jobs and their data: three variables (`vars`), a table of
//! 1,000 rows × 3 columns (`table`), and a typical page with a header, a left navigation,
//! article summaries with links, a tag cloud and a footer (`page`). Each job's data is one
//! struct that sailfish renders at compile time (`templates/sailfish/*.stpl`) and minijinja
//! renders at run time (`templates/jinja/r2/*.html`; the struct is `Serialize`). Both engines
//! write the same page (`benches/templates.rs` checks, and compares them with askama).

use sailfish::TemplateSimple;
use serde::Serialize;

/// Job 1: three variables.
#[derive(Debug, Serialize, TemplateSimple)]
#[template(path = "sailfish/vars.stpl")]
pub(crate) struct Vars {
    pub title: &'static str,
    pub name: &'static str,
    pub count: u32,
}

/// One row of job 2's table.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    pub id: u32,
    pub name: String,
    pub value: u32,
}

/// Job 2: a table of 1,000 rows.
#[derive(Debug, Serialize, TemplateSimple)]
#[template(path = "sailfish/table.stpl")]
pub(crate) struct Table<'a> {
    pub title: &'static str,
    pub rows: &'a [Row],
}

/// A navigation link.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Link {
    pub href: String,
    pub label: String,
}

/// An article summary.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Article {
    pub id: u32,
    pub title: String,
    pub author: String,
    pub date: String,
    pub summary: String,
}

/// A tag of the cloud, with its weight (1-5).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Tag {
    pub name: String,
    pub weight: u32,
}

/// Job 3: a typical page.
#[derive(Debug, Serialize, TemplateSimple)]
#[template(path = "sailfish/page.stpl")]
pub(crate) struct Page<'a> {
    pub site: &'static str,
    pub heading: &'static str,
    pub user: &'static str,
    pub nav: &'a [Link],
    pub articles: &'a [Article],
    pub tags: &'a [Tag],
    pub year: u32,
}

/// The data of the three jobs, made once per worker.
#[derive(Debug, Clone)]
pub(crate) struct R2Data {
    pub rows: Vec<Row>,
    pub nav: Vec<Link>,
    pub articles: Vec<Article>,
    pub tags: Vec<Tag>,
}

impl R2Data {
    /// 1,000 rows, 12 links, 10 articles and 30 tags, the same every time. Some values
    /// carry characters that must be escaped, so escaping is part of the work.
    pub(crate) fn new() -> Self {
        R2Data {
            rows: (1..=1000)
                .map(|id| Row {
                    id,
                    name: format!("row <{id}> & co"),
                    value: id * 7 % 1000,
                })
                .collect(),
            nav: (1..=12)
                .map(|i| Link {
                    href: format!("/section/{i}"),
                    label: format!("Section {i}"),
                })
                .collect(),
            articles: (1..=10)
                .map(|id| Article {
                    id,
                    title: format!("Article {id}: \"servers\" & <sockets>"),
                    author: format!("Author {}", id % 4 + 1),
                    date: format!("2026-11-{:02}", id + 1),
                    summary: "A long-running server keeps its state in memory between \
                              requests, so the work of starting up is paid once."
                        .into(),
                })
                .collect(),
            tags: (1..=30)
                .map(|i| Tag {
                    name: format!("tag{i}"),
                    weight: i % 5 + 1,
                })
                .collect(),
        }
    }

    /// Job 1's data.
    pub(crate) fn vars(&self) -> Vars {
        Vars {
            title: "Brisk",
            name: "Ada <admin>",
            count: 42,
        }
    }

    /// Job 2's data.
    pub(crate) fn table(&self) -> Table<'_> {
        Table {
            title: "1,000 rows",
            rows: &self.rows,
        }
    }

    /// Job 3's data.
    pub(crate) fn page(&self) -> Page<'_> {
        Page {
            site: "Brisk News",
            heading: "Latest articles",
            user: "ada",
            nav: &self.nav,
            articles: &self.articles,
            tags: &self.tags,
            year: 2026,
        }
    }
}
