//! Figures no table keeps a history of (what waits in the outbox and how long, the keys in
//! flight, the dead letters waiting), sampled while the console runs: each figure's last value
//! in each minute, for the last day. A console started a minute ago has a minute of history,
//! and the page says so.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use super::snapshot::Snapshot;

/// The minutes kept: a day.
pub(crate) const MINUTES_KEPT: usize = 24 * 60;

/// One figure's values, a minute each: (Unix minute, value), the oldest first.
pub(crate) type Series = VecDeque<(i64, f64)>;

/// The figures sampled so far, by name.
#[derive(Default)]
pub(crate) struct Samples {
    series: Mutex<BTreeMap<&'static str, Series>>,
}

/// The names of the figures sampled, in the order the page draws them.
pub(crate) const PENDING: &str = "outbox pending";
pub(crate) const OLDEST: &str = "oldest pending (s)";
pub(crate) const IN_FLIGHT: &str = "keys in flight";
pub(crate) const INCOMING_DEAD: &str = "incoming dead letters";
pub(crate) const OUTGOING_DEAD: &str = "outgoing dead letters";

/// The Unix minute now.
pub(crate) fn this_minute() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_secs() / 60).unwrap_or(i64::MAX)
}

impl Samples {
    /// Keeps what `snapshot` read, as this minute's values.
    pub(crate) fn record(&self, snapshot: &Snapshot) {
        let minute = this_minute();
        let mut figures: Vec<(&'static str, f64)> = Vec::new();
        if let Some(outbox) = &snapshot.outbox {
            figures.push((PENDING, outbox.stats.pending as f64));
            let oldest = outbox.stats.oldest_pending.unwrap_or_default();
            figures.push((OLDEST, oldest.as_secs_f64()));
            if let Some(dead) = outbox.dead {
                figures.push((OUTGOING_DEAD, dead as f64));
            }
        }
        if let Some(keys) = &snapshot.keys {
            figures.push((IN_FLIGHT, keys.in_flight as f64));
        }
        if let Some(incoming) = &snapshot.incoming {
            figures.push((INCOMING_DEAD, incoming.waiting as f64));
        }
        for (name, value) in figures {
            self.put(name, minute, value);
        }
    }

    /// Sets `name`'s value at `minute`.
    pub(crate) fn put(&self, name: &'static str, minute: i64, value: f64) {
        let mut all = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let series = all.entry(name).or_default();
        match series.back_mut() {
            Some((last, kept)) if *last == minute => *kept = value,
            _ => series.push_back((minute, value)),
        }
        while series.len() > MINUTES_KEPT {
            series.pop_front();
        }
    }

    /// `name`'s values from `since` (a Unix minute) on.
    pub(crate) fn since(&self, name: &str, since: i64) -> Series {
        let all = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        all.get(name)
            .map(|series| {
                series
                    .iter()
                    .filter(|(m, _)| *m >= since)
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first minute sampled, if any.
    pub(crate) fn first(&self) -> Option<i64> {
        let all = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        all.values()
            .filter_map(|s| s.front().map(|(m, _)| *m))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minute_keeps_its_last_value_and_a_day_is_kept() {
        let samples = Samples::default();
        samples.put(PENDING, 10, 1.0);
        samples.put(PENDING, 10, 3.0);
        samples.put(PENDING, 11, 2.0);
        assert_eq!(samples.since(PENDING, 0), [(10, 3.0), (11, 2.0)]);
        assert_eq!(samples.since(PENDING, 11), [(11, 2.0)]);
        for minute in 12..(12 + MINUTES_KEPT as i64) {
            samples.put(PENDING, minute, 0.0);
        }
        let kept = samples.since(PENDING, 0);
        assert_eq!(kept.len(), MINUTES_KEPT);
        assert_eq!(kept.front().map(|(m, _)| *m), Some(12));
        assert_eq!(samples.first(), Some(12));
        assert!(samples.since("nothing", 0).is_empty());
    }
}
