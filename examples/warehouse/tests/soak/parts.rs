//! The warehouse system as separate processes, each restartable at the address it had: payments,
//! two warehouses (each the shop's API and a consumer), two relays.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::process::Command;
use tokio::sync::Mutex;
use warehouse_example::broker::{Kind, Orders};

use crate::common::{
    PAYMENTS_READY, RELAY_READY, Service, WAREHOUSE_READY, free_address, payments_on, relay,
    warehouse_on,
};

/// How long a part may take to start again before the run gives up on it.
const GIVE_UP: Duration = Duration::from_secs(120);

/// One of the processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    Payments,
    Warehouse(u8),
    Relay(u8),
}

impl Part {
    /// Every part of the system.
    pub const ALL: [Part; 5] = [
        Part::Payments,
        Part::Warehouse(0),
        Part::Warehouse(1),
        Part::Relay(0),
        Part::Relay(1),
    ];

    /// The part a SIGKILL or a restart drawn for `self` falls on: the second warehouse and the
    /// second relay are spared (their twins take it), so that their resource curves span the
    /// whole run; each still gets paused, and its links cut, stalled and slowed.
    pub fn killable(self) -> Part {
        match self {
            Part::Warehouse(_) => Part::Warehouse(0),
            Part::Relay(_) => Part::Relay(0),
            Part::Payments => Part::Payments,
        }
    }

    pub fn name(self) -> String {
        match self {
            Part::Payments => "payments".to_owned(),
            Part::Warehouse(n) => format!("warehouse-{n}"),
            Part::Relay(n) => format!("relay-{n}"),
        }
    }
}

/// How to start a part, and where it listens (kept across restarts).
struct Recipe {
    database: String,
    orders: Orders,
    payments: String,
}

/// The running system: each part's process, if it runs.
pub struct Parts {
    recipe: Recipe,
    listens: BTreeMap<Part, String>,
    running: Mutex<BTreeMap<Part, Service>>,
    /// Held by the fault a part is under: one at a time per part (two kills at once would
    /// start it twice on one address), while faults of different parts overlap.
    faults: BTreeMap<Part, Mutex<()>>,
    /// Each time a part exited on its own, or did not become ready: (seconds into the run,
    /// what happened). A supervisor starts it again, as systemd or Kubernetes would.
    exits: std::sync::Mutex<Vec<(f64, String)>>,
    started: Instant,
}

impl Parts {
    /// Where each part listens, kept across restarts.
    pub fn addresses() -> BTreeMap<Part, String> {
        Part::ALL.iter().map(|p| (*p, free_address())).collect()
    }

    /// Starts every part at `listens` on `database`, publishing to and consuming from `orders`,
    /// the warehouses charging through `payments`.
    pub async fn start(
        listens: BTreeMap<Part, String>,
        database: &str,
        orders: &Orders,
        payments: &str,
    ) -> Self {
        let recipe = Recipe {
            database: database.to_owned(),
            orders: orders.clone(),
            payments: payments.to_owned(),
        };
        let parts = Self {
            recipe,
            listens,
            running: Mutex::new(BTreeMap::new()),
            faults: Part::ALL.iter().map(|p| (*p, Mutex::new(()))).collect(),
            exits: std::sync::Mutex::new(Vec::new()),
            started: Instant::now(),
        };
        for part in Part::ALL {
            parts.restart(part, None).await;
        }
        parts
    }

    /// The shop's APIs: each warehouse's.
    pub fn apis(&self) -> Vec<String> {
        [Part::Warehouse(0), Part::Warehouse(1)]
            .iter()
            .map(|p| format!("http://{}", self.listens[p]))
            .collect()
    }

    fn command(&self, part: Part) -> Command {
        let listen = &self.listens[&part];
        let Recipe {
            database,
            orders,
            payments,
        } = &self.recipe;
        // Each part's sessions named for it in pg_stat_activity.
        let database = &format!(
            "{database}{}application_name={}",
            if database.contains('?') { '&' } else { '?' },
            part.name()
        );
        match part {
            Part::Payments => {
                let mut command = payments_on(database, listen);
                command.args(["--lease", "3s", "--charge-takes", "5ms"]);
                command
            }
            Part::Warehouse(_) => {
                let mut command = warehouse_on(database, orders, payments, listen);
                // A message whose warehouse is killed under it comes back each time: the
                // nemesis kills often enough to reach the default 5 for an unlucky one, which
                // is no poison.
                command.args(["--max-deliveries", "20"]);
                // Four customers at once, each customer's events in order; one at a time on
                // Kafka until an hour with lanes runs clean there (the tests chapter has the
                // runs). GUESTLIST_SOAK_LANES replays a run with another concurrency.
                let lanes = std::env::var("GUESTLIST_SOAK_LANES").unwrap_or_else(|_| {
                    if orders.kind() == Kind::Kafka {
                        "1"
                    } else {
                        "4"
                    }
                    .to_owned()
                });
                command.args(["--concurrency", lanes.as_str()]);
                command
            }
            Part::Relay(_) => relay(database, orders, "2s"),
        }
    }

    /// Starts `part` (again), once it is not running, until it says it is ready; with
    /// `skew`, its wall clock that far off (libfaketime's `"+5m"`, `"-3m"`).
    async fn restart(&self, part: Part, skew: Option<&str>) {
        let ready = match part {
            Part::Payments => PAYMENTS_READY,
            Part::Warehouse(_) => WAREHOUSE_READY,
            Part::Relay(_) => RELAY_READY,
        };
        let deadline = Instant::now() + GIVE_UP;
        loop {
            let mut command = self.command(part);
            if let Some(offset) = skew {
                command.envs(guestlist_testkit::skewed_clock::env(offset));
            }
            match Service::try_start_without_api(command, ready).await {
                Ok(service) => {
                    self.running.lock().await.insert(part, service);
                    return;
                }
                Err(why) => self.exited(part, &format!("did not start: {why}")),
            }
            assert!(
                Instant::now() < deadline,
                "{} did not start for {GIVE_UP:?}",
                part.name()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn exited(&self, part: Part, what: &str) {
        let at = self.started.elapsed().as_secs_f64();
        eprintln!("supervisor: {at:>7.2}s {} {what}", part.name());
        let mut exits = self.exits.lock().unwrap();
        exits.push((at, format!("{} {what}", part.name())));
    }

    /// Starts again every part that exited on its own (none under a fault), every half second,
    /// until `stop` is set.
    pub async fn supervise(&self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            for part in Part::ALL {
                let Ok(_fault) = self.faults[&part].try_lock() else {
                    continue;
                };
                let gone = {
                    let mut running = self.running.lock().await;
                    let exited = running.get_mut(&part).is_some_and(Service::exited);
                    if exited { running.remove(&part) } else { None }
                };
                if gone.is_some() {
                    self.exited(part, "exited on its own");
                    self.restart(part, None).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// What the supervisor saw: each part that exited on its own or did not start.
    pub fn exits(&self) -> Vec<(f64, String)> {
        self.exits.lock().unwrap().clone()
    }

    /// SIGKILLs `part`, and starts it again after `down`, with its clock `skew` off if given.
    pub async fn kill(&self, part: Part, down: Duration, skew: Option<&str>) {
        let _fault = self.faults[&part].lock().await;
        let killed = self.running.lock().await.remove(&part);
        if let Some(service) = killed {
            // A paused process dies of SIGKILL all the same.
            service.sigkill().await;
        }
        tokio::time::sleep(down).await;
        self.restart(part, skew).await;
    }

    /// SIGSTOPs `part` for `paused`, then SIGCONTs it.
    pub async fn pause(&self, part: Part, paused: Duration) {
        let _fault = self.faults[&part].lock().await;
        let Some(pid) = self.pid(part).await else {
            return;
        };
        signal("-STOP", pid);
        tokio::time::sleep(paused).await;
        signal("-CONT", pid);
    }

    /// `part`'s process id, if it runs.
    pub async fn pid(&self, part: Part) -> Option<u32> {
        self.running.lock().await.get(&part).and_then(Service::pid)
    }

    /// Every part's process id, for sampling what it holds.
    pub async fn pids(&self) -> Vec<(Part, u32)> {
        let running = self.running.lock().await;
        running
            .iter()
            .filter_map(|(part, s)| Some((*part, s.pid()?)))
            .collect()
    }

    /// Stops every part with SIGTERM (each resumed first), all at once; each that did not exit
    /// cleanly within a minute, said so.
    pub async fn stop(&self) -> Vec<String> {
        let running = std::mem::take(&mut *self.running.lock().await);
        let mut stopping = tokio::task::JoinSet::new();
        for (part, service) in running {
            stopping.spawn(async move {
                if let Some(pid) = service.pid() {
                    signal("-CONT", pid);
                }
                service
                    .try_sigterm()
                    .await
                    .err()
                    .map(|why| format!("{}: {why}", part.name()))
            });
        }
        stopping.join_all().await.into_iter().flatten().collect()
    }
}

fn signal(which: &str, pid: u32) {
    let _ = std::process::Command::new("kill")
        .args([which, &pid.to_string()])
        .status();
}
