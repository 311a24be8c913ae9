//! Inline SVG charts (no external assets): line charts of a value against
//! a numeric x, one line per target.

use std::fmt::Write as _;

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// One line of a chart.
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Points (x, y), x ascending.
    pub points: Vec<(f64, f64)>,
}

/// Escapes text for XML.
pub fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn tick(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// A line chart; `log_x` spaces x logarithmically. Empty when no series
/// has a point.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> String {
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .collect();
    if all.is_empty() {
        return String::new();
    }
    let (w, h) = (640.0, 300.0);
    let (left, right, top, bottom) = (70.0, 150.0, 30.0, 45.0);
    let fx = |x: f64| if log_x { x.max(1e-9).ln() } else { x };
    let xmin = all.iter().map(|p| fx(p.0)).fold(f64::INFINITY, f64::min);
    let xmax = all
        .iter()
        .map(|p| fx(p.0))
        .fold(f64::NEG_INFINITY, f64::max);
    let ymax = all.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.1;
    let span = if xmax > xmin { xmax - xmin } else { 1.0 };
    let px = |x: f64| left + (fx(x) - xmin) / span * (w - left - right);
    let py = |y: f64| top + (1.0 - y / ymax) * (h - top - bottom);
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        out,
        r#"<text x="{}" y="18" font-size="13" font-weight="bold">{}</text>"#,
        left,
        xml(title)
    );
    // Axes and grid.
    let _ = write!(
        out,
        r##"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="#333"/><line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="#333"/>"##,
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    for i in 0..=4 {
        let y = ymax / 1.1 * f64::from(i) / 4.0;
        let _ = write!(
            out,
            r##"<line x1="{left}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#ddd"/><text x="{2}" y="{3:.1}" text-anchor="end">{4}</text>"##,
            py(y),
            w - right,
            left - 5.0,
            py(y) + 4.0,
            tick(y)
        );
    }
    let mut xs: Vec<f64> = all.iter().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    for x in xs {
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            px(x),
            h - bottom + 15.0,
            tick(x)
        );
    }
    let _ = write!(
        out,
        r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
        left + (w - left - right) / 2.0,
        h - 8.0,
        xml(x_label)
    );
    let _ = write!(
        out,
        r#"<text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">{}</text>"#,
        top + (h - top - bottom) / 2.0,
        top + (h - top - bottom) / 2.0,
        xml(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<String> = s
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        if !pts.is_empty() {
            let _ = write!(
                out,
                r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
                pts.join(" ")
            );
            for &(x, y) in &s.points {
                let _ = write!(
                    out,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                    px(x),
                    py(y)
                );
            }
        }
        let ly = top + 14.0 * i as f64;
        let _ = write!(
            out,
            r#"<rect x="{}" y="{:.1}" width="10" height="10" fill="{color}"/><text x="{}" y="{:.1}">{}</text>"#,
            w - right + 10.0,
            ly,
            w - right + 25.0,
            ly + 9.0,
            xml(&s.name)
        );
    }
    out.push_str("</svg>");
    out
}
