//! The nemesis: faults at random moments, drawn from a seed so that a run can be replayed,
//! overlapping (each runs in a task of its own while the next is drawn).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::parts::{Part, Parts};

/// One fault injected.
#[derive(Debug, Clone, Serialize)]
pub struct Fault {
    /// Seconds into the run.
    pub at: f64,
    /// SIGKILL (and start again after `for_ms`), or SIGSTOP (SIGCONT after `for_ms`).
    pub kind: &'static str,
    pub part: String,
    pub for_ms: u64,
}

/// Injects faults into `parts` until `until`, drawn from `seed`; returns what it did.
pub async fn run(parts: Arc<Parts>, seed: u64, started: Instant, until: Instant) -> Vec<Fault> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut done = Vec::new();
    let mut tasks = Vec::new();
    loop {
        let wait = Duration::from_millis(rng.u64(500..4_000));
        if Instant::now() + wait >= until {
            break;
        }
        tokio::time::sleep(wait).await;
        let part = Part::ALL[rng.usize(..Part::ALL.len())];
        let (kind, length) = if rng.bool() {
            ("SIGKILL", Duration::from_millis(rng.u64(0..2_000)))
        } else {
            ("SIGSTOP", Duration::from_millis(rng.u64(200..6_000)))
        };
        let fault = Fault {
            at: started.elapsed().as_secs_f64(),
            kind,
            part: part.name(),
            for_ms: length.as_millis() as u64,
        };
        eprintln!("nemesis: {fault:?}");
        done.push(fault);
        let parts = Arc::clone(&parts);
        tasks.push(tokio::spawn(async move {
            match kind {
                "SIGKILL" => parts.kill(part, length).await,
                _ => parts.pause(part, length).await,
            }
        }));
    }
    for task in tasks {
        task.await.expect("a fault's task");
    }
    done
}
