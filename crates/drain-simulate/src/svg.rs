//! A hand-written SVG chart (no plotting dependency): wasted turns and p99 item
//! latency over time, one line per policy, both on log scales so that the oracle's
//! zeros and legacy's thousands fit on one axis.

use std::fmt::Write as _;

use super::tally::Series;

const W: f64 = 980.0;
const PANEL_H: f64 = 250.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 250.0;
const TOP: f64 = 80.0;
const GAP: f64 = 80.0;
const COLORS: [&str; 8] = ["#d62728", "#1f77b4", "#2ca02c", "#555555", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"];

/// One line of the chart.
#[derive(Debug, Clone)]
pub(crate) struct Line<'a> {
    /// Legend text.
    pub(crate) name: &'a str,
    /// Its samples.
    pub(crate) series: &'a Series,
    /// Dashed (for a model rather than drain-core code).
    pub(crate) dashed: bool,
}

/// `log10(1 + v)`: zero stays at the axis.
fn lg(v: f64) -> f64 {
    (1.0 + v.max(0.0)).log10()
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// One panel: axes, log-scale grid, a line per policy.
fn panel(
    out: &mut String,
    top: f64,
    title: &str,
    y_label: &str,
    lines: &[(usize, Vec<Option<f64>>, bool)],
    minutes: f64,
) {
    let plot_w = W - LEFT - RIGHT;
    let max = lines.iter().flat_map(|(_, v, _)| v.iter().flatten().copied()).fold(1.0f64, f64::max);
    let decades = lg(max).ceil().max(1.0);
    let x = |i: usize, n: usize| LEFT + plot_w * (i as f64 + 0.5) / n.max(1) as f64;
    let y = |v: f64| top + PANEL_H - PANEL_H * lg(v) / decades;
    let _ =
        writeln!(out, r#"<text x="{LEFT}" y="{}" font-size="15" font-weight="bold">{}</text>"#, top - 12.0, esc(title));
    // Grid and y ticks at 0, 1, 10, 100, ...
    let mut tick = 0.0f64;
    loop {
        let ty = y(tick);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="#dddddd"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            ty + 4.0,
            tick
        );
        tick = if tick == 0.0 { 1.0 } else { tick * 10.0 };
        if lg(tick) > decades + 1e-9 {
            break;
        }
    }
    // X ticks: minutes.
    let step = [1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0].into_iter().find(|s| minutes / s <= 12.0).unwrap_or(120.0);
    let mut m = 0.0;
    while m <= minutes + 1e-9 {
        let tx = LEFT + plot_w * m / minutes.max(1e-9);
        let _ = writeln!(
            out,
            r##"<line x1="{tx:.1}" y1="{:.1}" x2="{tx:.1}" y2="{:.1}" stroke="#333333"/><text x="{tx:.1}" y="{:.1}" font-size="11" text-anchor="middle">{m}</text>"##,
            top + PANEL_H,
            top + PANEL_H + 5.0,
            top + PANEL_H + 18.0
        );
        m += step;
    }
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{PANEL_H}" fill="none" stroke="#333333"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">minutes since start</text>"#,
        LEFT + plot_w / 2.0,
        top + PANEL_H + 36.0
    );
    let _ = writeln!(
        out,
        r#"<text transform="translate({:.1},{:.1}) rotate(-90)" font-size="12" text-anchor="middle">{}</text>"#,
        LEFT - 50.0,
        top + PANEL_H / 2.0,
        esc(y_label)
    );
    for (color, values, dashed) in lines {
        let n = values.len();
        let mut path = String::new();
        let mut pen_up = true;
        for (i, v) in values.iter().enumerate() {
            match v {
                Some(v) => {
                    let _ = write!(path, "{}{:.1},{:.1} ", if pen_up { "M" } else { "L" }, x(i, n), y(*v));
                    pen_up = false;
                }
                None => pen_up = true,
            }
        }
        let dash = if *dashed { r#" stroke-dasharray="6,4""# } else { "" };
        // Earlier lines are drawn wider, so a line hidden under an equal one still shows.
        let _ = writeln!(
            out,
            r#"<path d="{}" fill="none" stroke="{}" stroke-width="{:.1}"{dash}/>"#,
            path.trim_end(),
            COLORS[color % COLORS.len()],
            (4.0 - 0.7 * *color as f64).max(1.5)
        );
    }
}

/// The whole chart.
pub(crate) fn chart(title: &str, lines: &[Line<'_>], window_s: u64) -> String {
    let height = TOP + 2.0 * PANEL_H + GAP + 80.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(out, r#"<text x="{LEFT}" y="26" font-size="17" font-weight="bold">{}</text>"#, esc(title));
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="46" font-size="12" fill="#444444">Both panels on log scales; equal lines overlap (earlier policies are drawn wider); the dashed oracle is a model.</text>"##
    );
    let minutes = window_s as f64 / 60.0;
    let per = lines.first().map_or(0, |l| l.series.bucket_ms);
    let wasted: Vec<_> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| (i, l.series.wasted.iter().map(|&v| Some(v as f64)).collect(), l.dashed))
        .collect();
    panel(
        &mut out,
        TOP + 10.0,
        &format!("Wasted turns (claim-busy + empty) per {} s", per / 1000),
        "turns (log scale)",
        &wasted,
        minutes,
    );
    let p99: Vec<_> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| (i, l.series.p99().into_iter().map(|v| v.map(f64::from)).collect(), l.dashed))
        .collect();
    panel(
        &mut out,
        TOP + 10.0 + PANEL_H + GAP,
        &format!("p99 item latency of the items arriving in each {} s", per / 1000),
        "milliseconds (log scale)",
        &p99,
        minutes,
    );
    // Legend.
    let lx = W - RIGHT + 20.0;
    let _ = writeln!(out, r#"<text x="{lx}" y="{}" font-size="13" font-weight="bold">policy</text>"#, TOP + 20.0);
    for (i, l) in lines.iter().enumerate() {
        let ly = TOP + 42.0 + 24.0 * i as f64;
        let dash = if l.dashed { r#" stroke-dasharray="6,4""# } else { "" };
        let _ = writeln!(
            out,
            r#"<line x1="{lx}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="3"{dash}/><text x="{:.1}" y="{:.1}" font-size="12">{}</text>"#,
            ly,
            lx + 28.0,
            ly,
            COLORS[i % COLORS.len()],
            lx + 36.0,
            ly + 4.0,
            esc(l.name)
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_has_axes_labels_a_legend_and_a_line_per_policy() {
        let mut a = Series::new(600_000);
        a.waste(1000);
        a.latency(1000, 250);
        let b = Series::new(600_000);
        let lines = [
            Line { name: "legacy", series: &a, dashed: false },
            Line { name: "oracle <model>", series: &b, dashed: true },
        ];
        let svg = chart("t & t", &lines, 600);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<path").count(), 4, "two panels x two policies");
        for text in [
            "minutes since start",
            "turns (log scale)",
            "milliseconds (log scale)",
            "oracle &lt;model&gt;",
            "t &amp; t",
        ] {
            assert!(svg.contains(text), "{text}");
        }
        assert!(svg.contains("stroke-dasharray"), "the model is dashed");
    }
}
