//! Reading what guestlist counted: a process-wide recorder for the `metrics` facade, and the
//! counters and gauges it saw.

/// A counter's name, labels and value.
pub type Counter = (String, Vec<(String, String)>, u64);

/// A gauge's name, labels and last value.
pub type Gauge = (String, Vec<(String, String)>, f64);

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

/// Counter totals and gauges' last values, kept across snapshots: a snapshot drains the
/// recorder, and tests running in one process never take each other's counts.
static TOTALS: std::sync::Mutex<Vec<Counter>> = std::sync::Mutex::new(Vec::new());
static GAUGES: std::sync::Mutex<Vec<Gauge>> = std::sync::Mutex::new(Vec::new());

/// Takes what the recorder saw since the last snapshot into [`TOTALS`] and [`GAUGES`].
fn take() {
    use metrics_util::debugging::DebugValue;
    let mut totals = TOTALS.lock().unwrap();
    let mut gauges = GAUGES.lock().unwrap();
    for (key, _, _, value) in recorder().snapshot().into_vec() {
        let key = key.key();
        let name = key.name().to_owned();
        let labels: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        match value {
            DebugValue::Counter(n) => match totals
                .iter_mut()
                .find(|(n2, l2, _)| *n2 == name && *l2 == labels)
            {
                Some(total) => total.2 += n,
                None => totals.push((name, labels, n)),
            },
            // A snapshot also sets every gauge back to 0, so a later snapshot shows 0 for a
            // gauge nobody set since: keep the last value that was set.
            DebugValue::Gauge(value) => match gauges
                .iter_mut()
                .find(|(n2, l2, _)| *n2 == name && *l2 == labels)
            {
                Some(gauge) if value.into_inner() != 0.0 => gauge.2 = value.into_inner(),
                Some(_) => {}
                None => gauges.push((name, labels, value.into_inner())),
            },
            DebugValue::Histogram(_) => {}
        }
    }
}

/// Every counter recorded in this process so far.
pub fn counters() -> Vec<Counter> {
    take();
    TOTALS.lock().unwrap().clone()
}

/// The last value of the gauge `name` that carries all of `labels`, if it was ever set (a gauge
/// set back to 0 after another value reads as that value: the recorder cannot tell them apart).
pub fn gauge(name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    take();
    GAUGES
        .lock()
        .unwrap()
        .iter()
        .find(|(n, l, _)| named(n, l, name, labels))
        .map(|(_, _, value)| *value)
}

/// The sum of the counters `name` that carry all of `labels`.
pub fn sum(counters: &[Counter], name: &str, labels: &[(&str, &str)]) -> u64 {
    counters
        .iter()
        .filter(|(n, l, _)| named(n, l, name, labels))
        .map(|(_, _, value)| value)
        .sum()
}

/// Whether a metric called `n` with labels `l` is `name` and carries all of `labels`.
fn named(n: &str, l: &[(String, String)], name: &str, labels: &[(&str, &str)]) -> bool {
    n == name
        && labels
            .iter()
            .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
}
