//! A chart drawn on the server as SVG: a figure's values per minute over the last hour or day,
//! one line per series, each with its own dash pattern and marker named in the legend, so that
//! it reads without colour.

use std::fmt::Write as _;

use maud::{Markup, html};

use super::samples::Series;

/// The drawing's size, in its own units.
const WIDTH: f64 = 480.0;
const HEIGHT: f64 = 120.0;
/// Room for the labels, left and below, and for the last marker, right.
const LEFT: f64 = 44.0;
const BOTTOM: f64 = 16.0;
const RIGHT: f64 = 8.0;

/// The dash patterns (and their names in the legend), one per series in turn.
const PATTERNS: [(&str, &str); 4] = [
    ("", "solid line, dot"),
    ("6 3", "dashed line, square"),
    ("2 3", "dotted line, dot"),
    ("9 3 2 3", "dash-dot line, square"),
];

/// How far back a chart looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Span {
    Hour,
    Day,
}

impl Span {
    /// Minutes covered.
    pub(crate) fn minutes(self) -> i64 {
        match self {
            Span::Hour => 60,
            Span::Day => 24 * 60,
        }
    }

    /// Its name in the page's address and text.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Span::Hour => "hour",
            Span::Day => "day",
        }
    }
}

/// What a chart's legend says of each line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Legend {
    /// Its latest value (a figure sampled).
    Now,
    /// Its values added up over the span (counts per minute).
    Total,
}

/// A chart of `series` (a name and its values) over `span`, up to `now` (a Unix minute).
pub(crate) fn chart(
    legend: Legend,
    title: &str,
    id: &str,
    span: Span,
    now: i64,
    series: &[(String, Series)],
) -> Markup {
    let start = now - span.minutes();
    let top = series
        .iter()
        .flat_map(|(_, values)| values.iter().filter(|(m, _)| *m >= start))
        .map(|(_, v)| *v)
        .fold(0.0_f64, f64::max);
    let scale = if top > 0.0 { top } else { 1.0 };
    let x = |minute: i64| {
        LEFT + (minute - start) as f64 / span.minutes() as f64 * (WIDTH - LEFT - RIGHT)
    };
    let y = |value: f64| (HEIGHT - BOTTOM) - value / scale * (HEIGHT - BOTTOM - 4.0);
    html! {
        figure.chart id=(id) {
            figcaption { (title) }
            svg viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } width=(WIDTH) height=(HEIGHT)
                role="img" aria-label=(title) {
                line x1=(LEFT) y1=(HEIGHT - BOTTOM) x2=(WIDTH - RIGHT) y2=(HEIGHT - BOTTOM) stroke="#888" {}
                line x1=(LEFT) y1="4" x2=(LEFT) y2=(HEIGHT - BOTTOM) stroke="#888" {}
                text x=(LEFT - 4.0) y="12" text-anchor="end" font-size="10" { (number(top)) }
                text x=(LEFT - 4.0) y=(HEIGHT - BOTTOM) text-anchor="end" font-size="10" { "0" }
                text x=(LEFT) y=(HEIGHT - 3.0) font-size="10" { "-1 " (span.name()) }
                text x=(WIDTH - RIGHT) y=(HEIGHT - 3.0) text-anchor="end" font-size="10" { "now" }
                @for (n, (name, values)) in series.iter().enumerate() {
                    @let (dash, _) = PATTERNS[n % PATTERNS.len()];
                    @let points = values.iter().filter(|(m, _)| *m >= start)
                        .fold(String::new(), |mut all, (m, v)| {
                            let _ = write!(all, "{:.1},{:.1} ", x(*m), y(*v));
                            all
                        });
                    polyline class="series" data-series=(name) points=(points) fill="none"
                        stroke="#222" stroke-width="1.5" stroke-dasharray=(dash) {}
                    // The latest value marked, a circle or a square by series: a single
                    // minute shows, and the lines part without colour.
                    @if let Some((m, v)) = values.back().filter(|(m, _)| *m >= start) {
                        @if n % 2 == 0 {
                            circle cx=(format!("{:.1}", x(*m))) cy=(format!("{:.1}", y(*v)))
                                r="3" fill="#222" {}
                        } @else {
                            rect x=(format!("{:.1}", x(*m) - 3.0)) y=(format!("{:.1}", y(*v) - 3.0))
                                width="6" height="6" fill="none" stroke="#222" {}
                        }
                    }
                }
            }
            p.legend.muted {
                @for (n, (name, values)) in series.iter().enumerate() {
                    @let (_, pattern) = PATTERNS[n % PATTERNS.len()];
                    span { (pattern) ": " (name) " (" (reading(legend, span, start, values)) ")" }
                    " "
                }
            }
        }
    }
}

/// What the legend says of `values`.
fn reading(legend: Legend, span: Span, start: i64, values: &Series) -> String {
    match legend {
        Legend::Now => format!(
            "now {}",
            values.back().map_or("-".to_owned(), |(_, v)| number(*v))
        ),
        Legend::Total => {
            let total: f64 = values
                .iter()
                .filter(|(m, _)| *m >= start)
                .map(|(_, v)| v)
                .sum();
            format!("{} in the last {}", number(total), span.name())
        }
    }
}

/// A value as the chart writes it: whole numbers without decimals.
fn number(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_is_drawn_across_its_span_and_named_in_the_legend() {
        let pending: Series = [(39, 99.0), (40, 0.0), (70, 5.0), (100, 10.0)]
            .into_iter()
            .collect();
        let oldest: Series = [(100, 2.5)].into_iter().collect();
        let drawn = chart(
            Legend::Now,
            "Outbox",
            "chart-outbox",
            Span::Hour,
            100,
            &[
                ("pending".to_owned(), pending),
                ("oldest".to_owned(), oldest),
            ],
        )
        .into_string();
        // 40 is an hour ago: the left edge, at the bottom; 70 half way, at half height; 100 the
        // right edge, at the top.
        assert!(
            drawn.contains(r#"points="44.0,104.0 258.0,54.0 472.0,4.0 ""#),
            "{drawn}"
        );
        assert!(drawn.contains("stroke-dasharray=\"6 3\""), "{drawn}");
        assert!(
            drawn.contains("solid line, dot: pending (now 10)"),
            "{drawn}"
        );
        assert!(
            drawn.contains("dashed line, square: oldest (now 2.5)"),
            "{drawn}"
        );
        assert!(drawn.contains(r#"<circle cx="472.0" cy="4.0""#), "{drawn}");
        assert!(drawn.contains(r#"<rect x="469.0" y="76.0""#), "{drawn}");
        assert!(
            drawn.contains(">10</text>"),
            "the top is the span's, not the minute before it: {drawn}"
        );
    }
}
