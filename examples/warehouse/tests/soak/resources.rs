//! What each long-running process holds over the run: its resident memory and its open file
//! descriptors, read from `/proc` every few seconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::parts::Parts;

/// One reading of one process.
#[derive(Debug, Clone, Serialize)]
pub struct Reading {
    /// Seconds into the run.
    pub at: f64,
    pub part: String,
    pub pid: u32,
    pub rss_kib: u64,
    pub fds: usize,
}

/// Reads every part every `every` until `stop` is set.
pub async fn sample(
    parts: Arc<Parts>,
    started: Instant,
    stop: Arc<AtomicBool>,
    every: Duration,
) -> Vec<Reading> {
    let mut readings = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        for (part, pid) in parts.pids().await {
            let Some(rss_kib) = rss_kib(pid) else {
                continue;
            };
            let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count);
            readings.push(Reading {
                at: started.elapsed().as_secs_f64(),
                part: part.name(),
                pid,
                rss_kib,
                fds,
            });
        }
        tokio::time::sleep(every).await;
    }
    readings
}

/// `VmRSS` of process `pid`, in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Each process's first and last reading (of the same process id), as `part pid: rss, fds`
/// lines: how much it grew.
pub fn curves(readings: &[Reading]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut pids: Vec<(&str, u32)> = readings.iter().map(|r| (r.part.as_str(), r.pid)).collect();
    pids.dedup();
    pids.sort();
    pids.dedup();
    for (part, pid) in pids {
        let of: Vec<&Reading> = readings.iter().filter(|r| r.pid == pid).collect();
        let (first, last) = (of[0], of[of.len() - 1]);
        lines.push(format!(
            "{part} (pid {pid}, {:.0}-{:.0}s): RSS {} -> {} KiB, fds {} -> {}",
            first.at, last.at, first.rss_kib, last.rss_kib, first.fds, last.fds
        ));
    }
    lines
}

/// How long a process runs before its figures count: its pools fill and its buffers grow.
pub const WARM_UP: f64 = 30.0;
/// The most a process's resident memory may grow after its warm-up, in KiB. Measured: the
/// warehouses grew 3 MiB in their first 85 s and the relays 1 MiB; a leak of a request's worth
/// per request outgrows this within minutes.
pub const RSS_GROWTH_KIB: u64 = 16 * 1024;
/// The most a process's open file descriptors may grow after its warm-up: a pool's connections
/// and a broker's, opened again after a cut, come and go; a descriptor kept per request does
/// not.
pub const FD_GROWTH: usize = 16;

/// Each process whose memory or descriptors grew past the bounds after its warm-up, said so.
pub fn growth(readings: &[Reading]) -> Vec<String> {
    let mut pids: Vec<u32> = readings.iter().map(|r| r.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    let mut found = Vec::new();
    for pid in pids {
        let of: Vec<&Reading> = readings.iter().filter(|r| r.pid == pid).collect();
        let born = of[0].at;
        let warm: Vec<&&Reading> = of.iter().filter(|r| r.at - born >= WARM_UP).collect();
        let (Some(first), Some(last)) = (warm.first(), warm.last()) else {
            continue;
        };
        let rss = last.rss_kib.saturating_sub(first.rss_kib);
        let fds = last.fds.saturating_sub(first.fds);
        if rss > RSS_GROWTH_KIB || fds > FD_GROWTH {
            found.push(format!(
                "{} (pid {pid}) grew from {:.0} s to {:.0} s: RSS {} -> {} KiB, fds {} -> {}",
                last.part, first.at, last.at, first.rss_kib, last.rss_kib, first.fds, last.fds
            ));
        }
    }
    found
}
