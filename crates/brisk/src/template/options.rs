//! [`TemplateOptions`]: caching, reloading and how errors are shown.

/// How [`Templates`](super::Templates) load, keep and report templates.
///
/// ```
/// use brisk::template::TemplateOptions;
///
/// let production = TemplateOptions::default();
/// let development = TemplateOptions::development();
/// let uncached = TemplateOptions { cache: false, ..TemplateOptions::default() };
/// ```
#[derive(Debug, Clone)]
pub struct TemplateOptions {
    /// Keep each compiled template for the worker's life (the default). Off, every render
    /// reads and compiles its template again, as a PHP app without an opcode or template
    /// cache does (report R4's "template cache off").
    pub cache: bool,
    /// Before each render, check whether the template's file (or one it extends or
    /// includes) changed on disk and recompile it if so: for development.
    pub reload: bool,
    /// Show the template error to the client in the 500 page (development); otherwise the
    /// client gets a plain 500 and only the log has the detail.
    pub show_errors: bool,
}

impl Default for TemplateOptions {
    /// Production: cached, not reloaded, errors only in the log.
    fn default() -> Self {
        TemplateOptions {
            cache: true,
            reload: false,
            show_errors: false,
        }
    }
}

impl TemplateOptions {
    /// Development: cached, reloaded when files change, errors shown to the client.
    pub fn development() -> Self {
        TemplateOptions {
            cache: true,
            reload: true,
            show_errors: true,
        }
    }
}
