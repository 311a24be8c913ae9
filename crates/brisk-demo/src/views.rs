//! The template routes: report R2's three jobs on both engines (`/tpl/vars`, `/tpl/table`,
//! `/tpl/page`; sailfish, or minijinja with `?engine=minijinja` or `--template-engine
//! minijinja`) and report R4's view, a fixed HTML string (`/view`).

use std::sync::Arc;

use brisk::http::Body;
use brisk::template::{html, Templates};
use http::Response;
use sailfish::TemplateSimple;

use crate::pages::R2Data;

/// R4's view: a page that is a string, no template.
const VIEW: &str = "<!DOCTYPE html><html><head><title>Brisk</title></head>\
<body><h1>Hello from a view</h1><p>This page is a string.</p></body></html>";

/// The template routes of one worker.
#[derive(Clone)]
pub(crate) struct Views {
    templates: Templates,
    data: Arc<R2Data>,
    /// Render with minijinja unless the request asks for sailfish.
    runtime_by_default: bool,
}

impl Views {
    /// Views rendering with `templates` (the minijinja side) and R2's data; minijinja by
    /// default when `runtime_by_default`, else sailfish.
    pub(crate) fn new(templates: Templates, runtime_by_default: bool) -> Self {
        Views {
            templates,
            data: Arc::new(R2Data::new()),
            runtime_by_default,
        }
    }

    /// The page for `path`, or `None` if it is not a template route.
    pub(crate) fn route(&self, path: &str, query: Option<&str>) -> Option<Response<Body>> {
        let asked = query.and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("engine=")));
        let minijinja = match asked {
            Some("minijinja") => true,
            Some("sailfish") => false,
            _ => self.runtime_by_default,
        };
        let d = &*self.data;
        let t = &self.templates;
        Some(match (path, minijinja) {
            ("/view", _) => html(Ok::<_, std::fmt::Error>(VIEW.to_string())),
            ("/tpl/vars", false) => html(d.vars().render_once()),
            ("/tpl/vars", true) => t.page("r2/vars.html", d.vars()),
            ("/tpl/table", false) => html(d.table().render_once()),
            ("/tpl/table", true) => t.page("r2/table.html", d.table()),
            ("/tpl/page", false) => html(d.page().render_once()),
            ("/tpl/page", true) => t.page("r2/page.html", d.page()),
            _ => return None,
        })
    }
}
