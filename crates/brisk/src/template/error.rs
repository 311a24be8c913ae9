//! [`TemplateError`]: what went wrong in which template, at which line.

/// A template that cannot be compiled or rendered: its file, line and what was wrong.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}{}: {message}", .name.as_deref().unwrap_or("template"), .line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct TemplateError {
    /// The template's name (its path under the template directory), when known.
    pub name: Option<String>,
    /// The line the error is on, when known.
    pub line: Option<usize>,
    /// What was wrong.
    pub message: String,
    /// Whether the template does not exist.
    pub not_found: bool,
}

impl TemplateError {
    /// An error that is no template's fault (an unreadable directory, …).
    pub(super) fn other(message: String) -> Self {
        TemplateError {
            name: None,
            line: None,
            message,
            not_found: false,
        }
    }
}

impl From<minijinja::Error> for TemplateError {
    fn from(e: minijinja::Error) -> Self {
        let mut message = e.kind().to_string();
        if let Some(detail) = e.detail() {
            message.push_str(": ");
            message.push_str(detail);
        }
        TemplateError {
            name: e.name().map(str::to_string),
            line: e.line(),
            message,
            not_found: e.kind() == minijinja::ErrorKind::TemplateNotFound,
        }
    }
}
