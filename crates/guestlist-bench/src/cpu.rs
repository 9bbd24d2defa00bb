//! The whole machine's busy CPU time (every process: the bench, the database, the broker), from
//! Linux's `/proc/stat`, for figures whose floor is the CPU rather than a wait.

/// Clock ticks per second in `/proc/stat` (`USER_HZ`, 100 on every mainstream Linux build).
const TICKS_PER_SEC: f64 = 100.0;

/// The busy CPU time at one moment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuClock {
    busy_ticks: u64,
}

impl CpuClock {
    /// Now; `None` where `/proc/stat` cannot be read.
    pub(crate) fn now() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let fields: Vec<u64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .filter_map(|field| field.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal …: all but idle and iowait are busy.
        let busy = fields
            .iter()
            .enumerate()
            .filter(|(column, _)| *column != 3 && *column != 4)
            .map(|(_, ticks)| ticks)
            .sum();
        Some(Self { busy_ticks: busy })
    }

    /// Seconds of CPU the machine spent busy since `self`, on all cores together.
    pub(crate) fn busy_since(&self) -> Option<f64> {
        let now = Self::now()?;
        Some(now.busy_ticks.saturating_sub(self.busy_ticks) as f64 / TICKS_PER_SEC)
    }
}
