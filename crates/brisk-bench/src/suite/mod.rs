//! The performance lab (`brisk-bench suite`): starts each configured
//! target, drives the in-process generators through the scenarios that
//! mirror the published reports, samples the target from /proc, and writes
//! `report.json`, `report.md` and a self-contained `report.html`.

pub mod config;
pub mod environment;
mod http_turns;
mod lab_password;
mod login;
pub mod measure;
pub mod model;
mod path_scenarios;
pub mod process;
pub mod procfs;
pub mod progress;
pub mod published;
pub mod render_html;
pub mod render_md;
pub mod runner;
pub mod stats;
pub mod svg;
pub mod table;
mod ws_scenarios;

use std::path::Path;

use crate::error::BenchError;

pub use config::SuiteConfig;
pub use model::SuiteReport;
pub use render_html::render_html;
pub use render_md::render_markdown;
pub use runner::{run_suite, SuiteOptions, SuiteOutcome};

/// Writes `report.json`, `report.md` and `report.html` into `dir`.
pub fn write_reports(report: &SuiteReport, dir: &Path) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| BenchError::io(format!("cannot create {}", dir.display()), e))?;
    let json = serde_json::to_string_pretty(report)
        .map_err(|e| BenchError::Config(format!("cannot serialize the report: {e}")))?;
    for (name, text) in [
        ("report.json", json + "\n"),
        ("report.md", render_markdown(report)),
        ("report.html", render_html(report)),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .map_err(|e| BenchError::io(format!("cannot write {}", path.display()), e))?;
    }
    Ok(())
}

/// Reads a `report.json` written by an earlier run.
pub fn read_report(path: &Path) -> Result<SuiteReport, BenchError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| BenchError::io(format!("cannot read {}", path.display()), e))?;
    serde_json::from_str(&text)
        .map_err(|e| BenchError::Config(format!("{}: not a suite report: {e}", path.display())))
}
