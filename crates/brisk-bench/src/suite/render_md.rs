//! `report.md`: the header, then per scenario its method, our table and
//! the published figures beside it, labelled with their hardware.

use std::fmt::Write as _;

use crate::suite::model::SuiteReport;
use crate::suite::published::{for_scenario, Published};
use crate::suite::table::{scenario_table, Table};

/// How to read the CPU column, printed in both report headers.
pub const READING: &str = "target CPU % is of one CPU over the run; well under 100 % on a single pinned worker means the target was not saturated and the run was limited elsewhere (the one-core load generator, the loopback path or other load on the machine)";

fn escape(cell: &str) -> String {
    cell.replace('|', "\\|").replace('\n', " ")
}

/// Renders a table as Markdown.
pub fn markdown_table(t: &Table) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| {} |",
        t.header
            .iter()
            .map(|h| escape(h))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(out, "|{}", "---|".repeat(t.header.len()));
    for row in &t.rows {
        let _ = writeln!(
            out,
            "| {} |",
            row.iter()
                .map(|c| escape(c))
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    out
}

fn published_table(p: &Published) -> Table {
    Table {
        header: p.columns.iter().map(|s| s.to_string()).collect(),
        rows: p
            .rows
            .iter()
            .map(|r| r.iter().map(|s| s.to_string()).collect())
            .collect(),
    }
}

/// Renders the whole report as Markdown.
pub fn render_markdown(report: &SuiteReport) -> String {
    let h = &report.header;
    let mut out = String::new();
    let _ = writeln!(out, "# brisk-bench suite report\n");
    let _ = writeln!(out, "Reproduce with:\n\n```sh\n{}\n```\n", h.command);
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(out, "| started (UTC) | {} |", h.started);
    let _ = writeln!(
        out,
        "| CPU | {} ({} online) |",
        escape(&h.cpu_model),
        h.cpus
    );
    let _ = writeln!(out, "| kernel | {} |", h.kernel);
    let _ = writeln!(
        out,
        "| pinning | target on CPU {}, load generator on CPU {} |",
        h.target_cpus, h.load_cpus
    );
    let _ = writeln!(
        out,
        "| method | {} runs per point of {:.1} s after a {:.1} s warm-up; highest and lowest dropped when >= 3; median and min..max of the kept runs{} |",
        h.reps,
        h.duration_s,
        h.warmup_s,
        if h.quick { "; **--quick (shortened run)**" } else { "" }
    );
    let _ = writeln!(out, "| reading | {READING} |");
    for (tool, version) in &h.tools {
        let _ = writeln!(out, "| {tool} | {} |", escape(version));
    }
    if let Some(note) = &h.note {
        let _ = writeln!(out, "| note | {} |", escape(note));
    }
    let _ = writeln!(out, "\n## Targets\n");
    let _ = writeln!(
        out,
        "| target | version | configuration | command |\n|---|---|---|---|"
    );
    for t in &h.targets {
        let _ = writeln!(
            out,
            "| {} | {} | {} | `{}` |",
            t.name,
            escape(t.version.as_deref().unwrap_or("-")),
            escape(&t.description),
            escape(&t.command)
        );
    }
    for s in &report.scenarios {
        let _ = writeln!(out, "\n## {} ({})\n", s.title, s.mirrors);
        let _ = writeln!(out, "Method: {}.\n", s.method);
        out.push_str(&markdown_table(&scenario_table(s)));
        for p in for_scenario(&s.name) {
            let _ = writeln!(
                out,
                "\nPublished, {} — hardware: {} (not measured here):\n",
                p.source, p.hardware
            );
            out.push_str(&markdown_table(&published_table(&p)));
        }
    }
    out
}

/// The published table of `p` (used by the HTML rendering too).
pub fn published_as_table(p: &Published) -> Table {
    published_table(p)
}
