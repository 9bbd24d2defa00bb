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
        // user nice system idle iowait irq softirq steal guest guest_nice: busy is user, nice,
        // system, irq and softirq. Not steal, the time a virtual machine's host ran something
        // else (on a shared host it comes and goes, and would be charged to the figure that
        // happened to run), nor guest, counted in user already.
        let busy = [0, 1, 2, 5, 6]
            .iter()
            .filter_map(|&column| fields.get(column))
            .sum();
        Some(Self { busy_ticks: busy })
    }

    /// Seconds of CPU the machine spent busy since `self`, on all cores together.
    pub(crate) fn busy_since(&self) -> Option<f64> {
        let now = Self::now()?;
        Some(now.busy_ticks.saturating_sub(self.busy_ticks) as f64 / TICKS_PER_SEC)
    }
}
