//! The counts per minute the tables' own timestamps give, for the page's charts: messages each
//! handler claimed and dead-lettered, messages written to the outbox and published, keys taken.

use std::collections::BTreeMap;
use std::time::Duration;

use guestlist::{Backend, Inbox, Outbox, PerMinute};

use super::Tables;
use super::chart::Span;
use super::samples::Series;

/// The most handlers drawn one by one; the rest add up in one line.
const HANDLERS_DRAWN: usize = 4;

/// One chart's lines: a name and its values.
pub(crate) type Lines = Vec<(String, Series)>;

/// The charts the tables give, (title, id, lines), and what could not be read.
pub(crate) type Counted = (Vec<(&'static str, &'static str, Lines)>, Vec<String>);

/// How long the counts read are drawn again before the tables are read again: every browser
/// refreshes the figures every few seconds, and a day's counts group a day of rows.
const KEPT_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// The counts read last, with when and for which span.
#[derive(Default)]
pub(crate) struct Recent {
    kept: std::sync::Mutex<Option<(std::time::Instant, Span, std::sync::Arc<Counted>)>>,
}

impl Recent {
    /// The counts read for `span` less than [`KEPT_FOR`] ago, if any.
    pub(crate) fn get(&self, span: Span) -> Option<std::sync::Arc<Counted>> {
        let kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (at, kept_span, counted) = kept.as_ref()?;
        (*kept_span == span && at.elapsed() < KEPT_FOR).then(|| std::sync::Arc::clone(counted))
    }

    /// Keeps `counted`, read now for `span`.
    pub(crate) fn put(&self, span: Span, counted: std::sync::Arc<Counted>) {
        let mut kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *kept = Some((std::time::Instant::now(), span, counted));
    }
}

/// The charts the tables give over `span` up to `now` (a Unix minute): (title, id, lines), and
/// what could not be read.
pub(crate) async fn read<DB: Backend>(
    pool: &guestlist::sqlx::Pool<DB>,
    tables: &Tables,
    span: Span,
    now: i64,
) -> Counted {
    let over = Duration::from_secs(u64::try_from(span.minutes()).unwrap_or(60) * 60);
    let inbox = Inbox::<DB>::in_table(tables.inbox.clone());
    let outbox = Outbox::<DB>::in_table(tables.outbox.clone());
    let mut charts = Vec::new();
    let mut trouble = Vec::new();
    let mut chart = |title, id, read: Result<Vec<PerMinute>, String>, top: bool| match read {
        Ok(counts) if !counts.is_empty() => {
            let counted = counts.iter().map(|c| (c.name.as_str(), c.minute, c.count));
            charts.push((title, id, lines(counted, span, now, top)));
        }
        Ok(_) => {}
        Err(err) => trouble.push(format!("{title}: {err}")),
    };
    let text = |err: guestlist::Error| err.to_string();
    chart(
        "Messages handled per minute, by handler",
        "chart-handled",
        inbox.handled_per_minute(pool, over).await.map_err(text),
        true,
    );
    chart(
        "Messages dead-lettered per minute, by handler",
        "chart-dead-lettered",
        inbox
            .dead_lettered_per_minute(pool, over)
            .await
            .map_err(text),
        true,
    );
    chart(
        "Outbox: written and published per minute",
        "chart-outbox-activity",
        outbox.activity_per_minute(pool, over).await.map_err(text),
        false,
    );
    let taken = match crate::keys::sql_keys(pool.clone(), tables.keys.as_str()) {
        Ok(keys) => keys.taken_per_minute(over).await.map_err(text),
        Err(err) => Err(err.to_string()),
    };
    chart(
        "Idempotency keys taken per minute",
        "chart-keys-taken",
        taken,
        false,
    );
    (charts, trouble)
}

/// `counts` as lines, a value for every minute of `span` (0 where nothing happened); with
/// `top`, the busiest names one by one and the rest added up.
pub(crate) fn lines<'a>(
    counts: impl Iterator<Item = (&'a str, i64, u64)>,
    span: Span,
    now: i64,
    top: bool,
) -> Lines {
    let mut by_name: BTreeMap<&str, BTreeMap<i64, u64>> = BTreeMap::new();
    for (name, minute, count) in counts {
        *by_name.entry(name).or_default().entry(minute).or_default() += count;
    }
    let mut names: Vec<(&str, u64)> = by_name
        .iter()
        .map(|(name, minutes)| (*name, minutes.values().sum()))
        .collect();
    names.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut drawn: Vec<(String, BTreeMap<i64, u64>)> = Vec::new();
    for (n, (name, _)) in names.iter().enumerate() {
        let minutes = &by_name[name];
        if top && n >= HANDLERS_DRAWN {
            if drawn.len() == HANDLERS_DRAWN {
                drawn.push(("the others".to_owned(), BTreeMap::new()));
            }
            let others = &mut drawn[HANDLERS_DRAWN].1;
            for (minute, count) in minutes {
                *others.entry(*minute).or_default() += count;
            }
        } else {
            drawn.push(((*name).to_owned(), minutes.clone()));
        }
    }
    drawn
        .into_iter()
        .map(|(name, minutes)| {
            let series = (now - span.minutes()..=now)
                .map(|minute| (minute, minutes.get(&minute).copied().unwrap_or(0) as f64))
                .collect();
            (name, series)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_minute_has_a_value_and_the_quiet_handlers_add_up() {
        let counts = [
            ("a", 98, 5),
            ("b", 99, 4),
            ("c", 100, 3),
            ("d", 100, 2),
            ("e", 100, 1),
            ("f", 99, 1),
            ("a", 10, 50), // before the hour: still counted in the ranking, not drawn
        ];
        let drawn = lines(counts.into_iter(), Span::Hour, 100, true);
        let names: Vec<&str> = drawn.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d", "the others"]);
        let others = &drawn[4].1;
        assert_eq!(
            others.len(),
            61,
            "a value for every minute of the hour, now included"
        );
        assert_eq!(others.iter().find(|(m, _)| *m == 99), Some(&(99, 1.0)));
        assert_eq!(others.iter().find(|(m, _)| *m == 100), Some(&(100, 1.0)));
        assert_eq!(others.iter().find(|(m, _)| *m == 50), Some(&(50, 0.0)));
        let all = lines(counts.into_iter(), Span::Hour, 100, false);
        assert_eq!(all.len(), 6, "without top, every name");
    }
}
