//! The page's charts: the figures over the last hour or day, a minute each.

use maud::{Markup, html};

use super::activity::{Counted, Lines};
use super::chart::{Legend, Span, chart};
use super::samples::{self, Samples};
use super::scraped::Drawn;

/// The charts over `span` up to `now` (a Unix minute): `counted`, those the tables' own
/// timestamps give (and what could not be read), those the programs' metrics give (`scraped`),
/// then those the console sampled while it ran.
pub(crate) fn section(
    samples: &Samples,
    span: Span,
    now: i64,
    counted: &Counted,
    scraped: &Drawn,
) -> Markup {
    let since = now - span.minutes();
    let series = |names: &[&'static str]| -> Lines {
        names
            .iter()
            .map(|name| ((*name).to_owned(), samples.since(name, since)))
            .filter(|(_, values)| !values.is_empty())
            .collect()
    };
    let (tables, trouble) = counted;
    let charts = [
        (
            "Outbox: messages pending",
            "chart-pending",
            vec![samples::PENDING],
        ),
        (
            "Outbox: the oldest pending's age (s)",
            "chart-oldest",
            vec![samples::OLDEST],
        ),
        (
            "Idempotency keys in flight",
            "chart-in-flight",
            vec![samples::IN_FLIGHT],
        ),
        (
            "Dead letters waiting",
            "chart-dead",
            vec![samples::INCOMING_DEAD, samples::OUTGOING_DEAD],
        ),
    ];
    let other = match span {
        Span::Hour => Span::Day,
        Span::Day => Span::Hour,
    };
    html! {
        h2 #over-time { "The last " (span.name()) }
        p.muted {
            "A minute each, from the tables' own timestamps (rows a purge deleted, and published \
             messages a relay keeps no row of, are not counted). "
            a href={ "/?span=" (other.name()) } { "the last " (other.name()) }
        }
        @for line in trouble {
            p.trouble { "cannot read " (line) }
        }
        div.cols #counted {
            @for (title, id, lines) in tables {
                div { (chart(Legend::Total, title, id, span, now, lines)) }
            }
        }
        (from_metrics(scraped, span, now))
        p.muted {
            "A minute each, sampled while this console runs"
            @if let Some(first) = samples.first() {
                " (since " (humantime::format_rfc3339_seconds(minute_time(first))) ")"
            }
            ": no table keeps a history of these figures."
        }
        div.cols #charts {
            @for (title, id, names) in charts {
                @let drawn = series(&names);
                @if !drawn.is_empty() {
                    div { (chart(Legend::Now, title, id, span, now, &drawn)) }
                }
            }
        }
    }
}

/// The charts the programs' metrics give, or how to have them.
fn from_metrics(scraped: &Drawn, span: Span, now: i64) -> Markup {
    html! {
        @if scraped.endpoints == 0 {
            p.muted #from-metrics {
                "Duplicates absorbed, deferrals, replays and 409s are counted only in the \
                 programs' metrics: start the console with --metrics-from \
                 http://HOST:PORT/metrics for each program (its --metrics-listen) to draw them."
            }
        } @else {
            p.muted #from-metrics {
                "A minute each, the increase of the counters read from " (scraped.endpoints)
                @if scraped.endpoints == 1 { " program's" } @else { " programs'" }
                " metrics while this console runs"
                @if let Some(first) = scraped.first {
                    " (since " (humantime::format_rfc3339_seconds(minute_time(first))) ")"
                }
                ": no table keeps these figures."
            }
            @for line in &scraped.trouble {
                p.trouble { "cannot read " (line) }
            }
            div.cols #metrics-charts {
                @for (title, id, lines) in &scraped.charts {
                    div { (chart(Legend::Total, title, id, span, now, lines)) }
                }
            }
        }
    }
}

/// The time at the start of the Unix minute `minute`.
fn minute_time(minute: i64) -> std::time::SystemTime {
    let secs = u64::try_from(minute).unwrap_or_default() * 60;
    std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)
}
