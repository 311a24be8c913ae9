//! Templates: [`Templates`] renders Jinja templates from a directory at run time
//! (minijinja), and [`html`] answers with what a compile-time engine (askama) rendered.
//!
//! [`Templates::new`] compiles every template under its directory before the app starts: a
//! syntax error stops the start with the file and line. Each worker process builds its own
//! `Templates` (the app's set-up runs in every worker), so compiled templates are cached per
//! worker, with nothing shared and no lock. [`TemplateOptions`] turn the cache off (every
//! render compiles again), reload templates whose files changed (development), and choose
//! whether a failed render shows its error to the client or only to the log.
//!
//! Output is HTML-escaped, except for templates whose name ends in `.txt` (not escaped) or
//! `.json` (JSON-escaped). Mark a value that is HTML already with `|safe`.
//!
//! ```no_run
//! use brisk::http::HttpServer;
//! use brisk::template::{TemplateOptions, Templates};
//!
//! let templates = Templates::new("templates", TemplateOptions::default()).unwrap();
//! let server = HttpServer::new("http://127.0.0.1:8080").unwrap().handler(move |_req| {
//!     let templates = templates.clone();
//!     async move { templates.page("hello.html", serde_json::json!({"name": "Ada"})) }
//! });
//! ```

mod error;
mod options;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::{header, HeaderValue, Response, StatusCode};
use minijinja::{AutoEscape, Environment};

pub use error::TemplateError;
pub use options::TemplateOptions;

use crate::http::Body;

/// The templates of one directory; cheap to clone. See the [module docs](self).
#[derive(Clone)]
pub struct Templates {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    options: TemplateOptions,
    /// The worker's environment: compiled templates, kept when `options.cache`.
    env: Environment<'static>,
    names: Vec<String>,
}

impl std::fmt::Debug for Templates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Templates")
            .field("dir", &self.inner.dir)
            .field("options", &self.inner.options)
            .field("names", &self.inner.names)
            .finish_non_exhaustive()
    }
}

impl Templates {
    /// The templates under `dir` (names are paths relative to it, with `/`; files and
    /// folders whose name starts with a dot are left out), each compiled now. Fails with the
    /// first template that does not compile, naming its file and line.
    pub fn new(dir: impl AsRef<Path>, options: TemplateOptions) -> Result<Self, TemplateError> {
        let dir = dir.as_ref().to_path_buf();
        let mut names = Vec::new();
        collect_names(&dir, "", &mut names).map_err(|e| {
            TemplateError::other(format!("cannot read templates in {}: {e}", dir.display()))
        })?;
        names.sort();
        let env = environment(&dir, &options);
        for name in &names {
            env.get_template(name)?;
        }
        Ok(Templates {
            inner: Arc::new(Inner {
                dir,
                options,
                env,
                names,
            }),
        })
    }

    /// The names of the templates found at start.
    pub fn names(&self) -> &[String] {
        &self.inner.names
    }

    /// The options.
    pub fn options(&self) -> &TemplateOptions {
        &self.inner.options
    }

    /// Renders template `name` with `context` (any `Serialize`: a struct, a map,
    /// `serde_json::json!`).
    pub fn render<C: serde::Serialize>(
        &self,
        name: &str,
        context: C,
    ) -> Result<String, TemplateError> {
        let inner = &*self.inner;
        if inner.options.cache {
            Ok(inner
                .env
                .get_template(name)?
                .render(minijinja::value::Serde(&context))?)
        } else {
            let env = environment(&inner.dir, &inner.options);
            let rendered = env
                .get_template(name)?
                .render(minijinja::value::Serde(&context))?;
            Ok(rendered)
        }
    }

    /// Renders template `name` into a `200 OK` HTML response; if that fails, a 500 whose body
    /// is the error when [`TemplateOptions::show_errors`] is on and a plain "internal server
    /// error" otherwise, the error logged either way.
    pub fn page<C: serde::Serialize>(&self, name: &str, context: C) -> Response<Body> {
        match self.render(name, context) {
            Ok(html) => html_response(html),
            Err(e) => error_page(&e, self.inner.options.show_errors),
        }
    }
}

/// The page a compile-time template rendered (askama's `template.render()`), as a `200 OK`
/// HTML response; a failed render is logged and answered with a plain 500.
///
/// ```
/// let resp = brisk::template::html(Ok::<_, std::fmt::Error>("<p>hi</p>".to_string()));
/// assert_eq!(resp.status(), 200);
/// assert_eq!(resp.headers()["content-type"], "text/html; charset=utf-8");
/// ```
pub fn html<E: std::fmt::Display>(rendered: Result<String, E>) -> Response<Body> {
    match rendered {
        Ok(html) => html_response(html),
        Err(e) => error_page(&TemplateError::other(e.to_string()), false),
    }
}

fn html_response(html: String) -> Response<Body> {
    let mut resp = Response::new(Body::from(html));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    resp
}

fn error_page(e: &TemplateError, show: bool) -> Response<Body> {
    tracing::error!(error = %e, "template failed");
    let text = if show {
        format!("template error: {e}\n")
    } else {
        "internal server error\n".to_string()
    };
    let mut resp = Response::new(Body::from(text));
    *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// An environment that loads templates from `dir`.
fn environment(dir: &Path, options: &TemplateOptions) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_loader(minijinja::path_loader(dir));
    env.set_auto_reload(options.reload);
    env.set_auto_escape_callback(|name| {
        if name.ends_with(".txt") {
            AutoEscape::None
        } else if name.ends_with(".json") {
            AutoEscape::Json
        } else {
            AutoEscape::Html
        }
    });
    env
}

/// Adds the names of the template files under `dir` (relative to the template root, as
/// `prefix`) to `names`.
fn collect_names(dir: &Path, prefix: &str, names: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let file_name = entry.file_name();
        let Some(file_name) = file_name.to_str() else {
            continue;
        };
        if file_name.starts_with('.') {
            continue;
        }
        let name = format!("{prefix}{file_name}");
        if entry.file_type()?.is_dir() {
            collect_names(&entry.path(), &format!("{name}/"), names)?;
        } else {
            names.push(name);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use serde_json::json;

    fn dir(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    fn body(resp: Response<Body>) -> String {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let bytes = rt.block_on(resp.into_body().collect()).unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn a_syntax_error_at_start_names_the_file_and_line() {
        let d = dir(&[
            ("ok.html", "fine"),
            ("admin/broken.html", "line one\nline two\n{% for x in %}\n"),
        ]);
        let err = Templates::new(d.path(), TemplateOptions::default()).unwrap_err();
        assert_eq!(err.name.as_deref(), Some("admin/broken.html"), "{err}");
        assert_eq!(err.line, Some(3), "{err}");
        assert!(
            err.to_string()
                .starts_with("admin/broken.html:3: syntax error"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_directory_is_an_error_that_names_it() {
        let err = Templates::new("/nonexistent/templates", TemplateOptions::default()).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/templates"), "{err}");
    }

    #[test]
    fn html_is_escaped_by_default_and_text_templates_are_not() {
        let d = dir(&[
            ("page.html", "<p>{{ v }}</p>{{ v|safe }}"),
            ("mail.txt", "{{ v }}"),
            ("base.html", "[{% block body %}{% endblock %}]"),
            (
                "child.html",
                "{% extends 'base.html' %}{% block body %}{% include 'page.html' %}{% endblock %}",
            ),
            (".hidden.html", "{% broken"),
        ]);
        let t = Templates::new(d.path(), TemplateOptions::default()).unwrap();
        assert_eq!(
            t.names(),
            ["base.html", "child.html", "mail.txt", "page.html"]
        );
        let v = json!({"v": "<b>&"});
        assert_eq!(
            t.render("page.html", &v).unwrap(),
            "<p>&lt;b&gt;&amp;</p><b>&"
        );
        assert_eq!(t.render("mail.txt", &v).unwrap(), "<b>&");
        assert_eq!(
            t.render("child.html", &v).unwrap(),
            "[<p>&lt;b&gt;&amp;</p><b>&]"
        );
        let resp = t.page("page.html", &v);
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["content-type"], "text/html; charset=utf-8");
    }

    #[test]
    fn a_missing_template_is_a_plain_500_in_production_and_detailed_in_development() {
        let d = dir(&[("a.html", "a")]);
        let prod = Templates::new(d.path(), TemplateOptions::default()).unwrap();
        let err = prod.render("nope.html", ()).unwrap_err();
        assert!(err.not_found, "{err:?}");
        let resp = prod.page("nope.html", ());
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body(resp), "internal server error\n");
        let dev = Templates::new(d.path(), TemplateOptions::development()).unwrap();
        let text = body(dev.page("nope.html", ()));
        assert!(
            text.contains("nope.html") && text.contains("not found"),
            "{text}"
        );
    }

    #[test]
    fn a_render_error_names_the_line() {
        let d = dir(&[("calc.html", "ok\n{{ 1 / n }}")]);
        let t = Templates::new(d.path(), TemplateOptions::default()).unwrap();
        let err = t.render("calc.html", json!({"n": 0})).unwrap_err();
        assert_eq!(
            (err.name.as_deref(), err.line),
            (Some("calc.html"), Some(2)),
            "{err}"
        );
    }

    /// Rewrites `path` so that its modification time surely differs.
    fn rewrite(path: &Path, text: &str) {
        let before = std::fs::metadata(path).unwrap().modified().unwrap();
        std::fs::write(path, text).unwrap();
        let f = std::fs::File::options().write(true).open(path).unwrap();
        f.set_modified(before + std::time::Duration::from_secs(2))
            .unwrap();
    }

    #[test]
    fn cached_templates_stay_reloaded_ones_follow_the_file_and_uncached_ones_compile_each_time() {
        let d = dir(&[("v.html", "one")]);
        let path = d.path().join("v.html");
        let cached = Templates::new(d.path(), TemplateOptions::default()).unwrap();
        let reloading = Templates::new(d.path(), TemplateOptions::development()).unwrap();
        let uncached = TemplateOptions {
            cache: false,
            ..TemplateOptions::default()
        };
        let uncached = Templates::new(d.path(), uncached).unwrap();
        rewrite(&path, "two");
        assert_eq!(cached.render("v.html", ()).unwrap(), "one");
        assert_eq!(reloading.render("v.html", ()).unwrap(), "two");
        assert_eq!(uncached.render("v.html", ()).unwrap(), "two");
        // A broken edit in development is an error page, and fixing it brings the page back.
        rewrite(&path, "{% if %}");
        let err = reloading.render("v.html", ()).unwrap_err();
        assert_eq!(err.line, Some(1), "{err}");
        rewrite(&path, "three");
        assert_eq!(reloading.render("v.html", ()).unwrap(), "three");
    }

    #[test]
    fn a_compile_time_engines_result_becomes_a_page_or_a_500() {
        let resp = html(Err::<String, _>("no such field"));
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body(resp), "internal server error\n");
        assert_eq!(
            body(html(Ok::<_, String>("<h1>x</h1>".into()))),
            "<h1>x</h1>"
        );
    }
}
