//! Reading what guestlist counted: a process-wide recorder for the `metrics` facade, and the
//! counters it saw.

/// A counter's name, labels and value.
pub type Counter = (String, Vec<(String, String)>, u64);

/// The process-wide metrics recorder the tests read from.
pub fn recorder() -> &'static metrics_util::debugging::Snapshotter {
    static SNAPSHOTTER: std::sync::OnceLock<metrics_util::debugging::Snapshotter> =
        std::sync::OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in the test process");
        snapshotter
    })
}

/// Every counter recorded in this process so far. A snapshot drains the recorder, so totals are
/// kept here, and tests running in one process never take each other's counts.
pub fn counters() -> Vec<Counter> {
    use metrics_util::debugging::DebugValue;
    static TOTALS: std::sync::Mutex<Vec<Counter>> = std::sync::Mutex::new(Vec::new());
    let mut totals = TOTALS.lock().unwrap();
    for (key, _, _, value) in recorder().snapshot().into_vec() {
        let DebugValue::Counter(n) = value else {
            continue;
        };
        let key = key.key();
        let name = key.name().to_owned();
        let labels: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        match totals
            .iter_mut()
            .find(|(n2, l2, _)| *n2 == name && *l2 == labels)
        {
            Some(total) => total.2 += n,
            None => totals.push((name, labels, n)),
        }
    }
    totals.clone()
}

/// The sum of the counters `name` that carry all of `labels`.
pub fn sum(counters: &[Counter], name: &str, labels: &[(&str, &str)]) -> u64 {
    counters
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, _, value)| value)
        .sum()
}
