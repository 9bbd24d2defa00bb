//! The nemesis: faults at random moments, drawn from a seed so that a run can be replayed,
//! overlapping (each runs in a task of its own while the next is drawn; one at a time per part
//! and per link).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::links::{Link, Links};
use crate::parts::{Part, Parts};

/// One fault injected.
#[derive(Debug, Clone, Serialize)]
pub struct Fault {
    /// Seconds into the run.
    pub at: f64,
    /// What was done, and to what.
    pub what: String,
    /// How long it lasted.
    pub for_ms: u64,
}

/// The kinds of fault, each with its weight in the draw.
const KINDS: [(&str, u32); 7] = [
    ("SIGKILL", 24),
    ("SIGSTOP", 20),
    ("postgres stop -m immediate", 6),
    ("cut", 12),
    ("stall", 10),
    ("latency", 16),
    ("clock skew", 8),
];

fn draw_kind(rng: &mut fastrand::Rng) -> &'static str {
    let total: u32 = KINDS.iter().map(|(_, w)| w).sum();
    let mut at = rng.u32(..total);
    for (kind, weight) in KINDS {
        if at < weight {
            return kind;
        }
        at -= weight;
    }
    KINDS[0].0
}

fn ms(rng: &mut fastrand::Rng, from: u64, to: u64) -> Duration {
    Duration::from_millis(rng.u64(from..to))
}

/// Injects faults into `parts` and `links` until `until`, drawn from `seed`; returns what it
/// did. Without `skews`, a relay drawn for a clock skew is restarted with its clock left
/// alone: on Kafka, a wall clock faked by libfaketime makes librdkafka's timed waits miss
/// (`rd_kafka_new` never returns), which a real clock that is off would not.
pub async fn run(
    parts: Arc<Parts>,
    links: Arc<Links>,
    seed: u64,
    started: Instant,
    until: Instant,
    skews: bool,
) -> Vec<Fault> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut done = Vec::new();
    let mut tasks = Vec::new();
    loop {
        let wait = ms(&mut rng, 500, 4_000);
        if Instant::now() + wait >= until {
            break;
        }
        tokio::time::sleep(wait).await;
        let part = Part::ALL[rng.usize(..Part::ALL.len())];
        let link = Link::ALL[rng.usize(..Link::ALL.len())];
        let relay = Part::Relay(rng.u8(..2)).killable();
        let (parts, links) = (Arc::clone(&parts), Arc::clone(&links));
        let (what, length, task): (String, Duration, tokio::task::JoinHandle<()>) =
            match draw_kind(&mut rng) {
                "SIGKILL" => {
                    let part = part.killable();
                    let down = ms(&mut rng, 0, 2_000);
                    let task = tokio::spawn(async move { parts.kill(part, down, None).await });
                    (format!("SIGKILL {}", part.name()), down, task)
                }
                "SIGSTOP" => {
                    let paused = ms(&mut rng, 200, 6_000);
                    let task = tokio::spawn(async move { parts.pause(part, paused).await });
                    (format!("SIGSTOP {}", part.name()), paused, task)
                }
                "postgres stop -m immediate" => {
                    let down = ms(&mut rng, 500, 5_000);
                    let task = tokio::spawn(async move { links.restart_postgres(down).await });
                    ("PostgreSQL stopped -m immediate".to_owned(), down, task)
                }
                "cut" => {
                    let down = ms(&mut rng, 500, 8_000);
                    let task = tokio::spawn(async move { links.cut(link, down).await });
                    (format!("cut the {}", link.name()), down, task)
                }
                "stall" => {
                    let held = ms(&mut rng, 500, 6_000);
                    let task = tokio::spawn(async move { links.stall(link, held).await });
                    (format!("stalled the {}", link.name()), held, task)
                }
                "latency" => {
                    let delay = ms(&mut rng, 5, 200);
                    let lasting = ms(&mut rng, 2_000, 10_000);
                    let task = tokio::spawn(async move { links.slow(link, delay, lasting).await });
                    let what = format!("{} ms on the {}", delay.as_millis(), link.name());
                    (what, lasting, task)
                }
                _ => {
                    let minutes = rng.i32(1..=10) * if rng.bool() { 1 } else { -1 };
                    let offset = format!("{minutes:+}m");
                    let what = if skews {
                        format!("{} restarted with its clock {offset} off", relay.name())
                    } else {
                        format!("{} restarted (its clock left alone on Kafka)", relay.name())
                    };
                    let task = tokio::spawn(async move {
                        let offset = skews.then_some(offset.as_str());
                        parts.kill(relay, Duration::ZERO, offset).await;
                    });
                    (what, Duration::ZERO, task)
                }
            };
        let fault = Fault {
            at: started.elapsed().as_secs_f64(),
            what,
            for_ms: length.as_millis() as u64,
        };
        eprintln!(
            "nemesis: {:>7.2}s {} ({} ms)",
            fault.at, fault.what, fault.for_ms
        );
        done.push(fault);
        tasks.push(task);
    }
    for task in tasks {
        task.await.expect("a fault's task");
    }
    done
}
