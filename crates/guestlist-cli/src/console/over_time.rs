//! The page's charts: the figures over the last hour or day, a minute each.

use maud::{Markup, html};

use super::chart::{Span, chart};
use super::samples::{self, Samples, this_minute};

/// The charts over `span`, from what the console sampled while it ran.
pub(crate) fn section(samples: &Samples, span: Span) -> Markup {
    let now = this_minute();
    let since = now - span.minutes();
    let series = |names: &[&'static str]| -> Vec<(&'static str, samples::Series)> {
        names
            .iter()
            .map(|name| (*name, samples.since(name, since)))
            .filter(|(_, values)| !values.is_empty())
            .collect()
    };
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
            "A minute each, sampled while this console runs"
            @if let Some(first) = samples.first() {
                " (since " (humantime::format_rfc3339_seconds(minute_time(first))) ")"
            }
            ": no table keeps a history of these figures. "
            a href={ "/?span=" (other.name()) } { "the last " (other.name()) }
        }
        div.cols #charts {
            @for (title, id, names) in charts {
                @let drawn = series(&names);
                @if !drawn.is_empty() {
                    div { (chart(title, id, span, now, &drawn)) }
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
