//! The warehouse system as separate processes, each restartable at the address it had: payments,
//! two warehouses (each the shop's API and a consumer), two relays.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::process::Command;
use tokio::sync::Mutex;
use warehouse_example::broker::Orders;

use crate::common::{
    PAYMENTS_READY, RELAY_READY, Service, WAREHOUSE_READY, free_address, payments_on, relay,
    warehouse_on,
};

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
}

impl Parts {
    /// Starts every part on `database`, publishing to and consuming from `orders`.
    pub async fn start(database: &str, orders: &Orders) -> Self {
        let listens: BTreeMap<Part, String> =
            Part::ALL.iter().map(|p| (*p, free_address())).collect();
        let recipe = Recipe {
            database: database.to_owned(),
            orders: orders.clone(),
            payments: format!("http://{}", listens[&Part::Payments]),
        };
        let parts = Self {
            recipe,
            listens,
            running: Mutex::new(BTreeMap::new()),
            faults: Part::ALL.iter().map(|p| (*p, Mutex::new(()))).collect(),
        };
        for part in Part::ALL {
            parts.restart(part).await;
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
        match part {
            Part::Payments => {
                let mut command = payments_on(database, listen);
                command.args(["--lease", "3s", "--charge-takes", "5ms"]);
                command
            }
            Part::Warehouse(_) => warehouse_on(database, orders, payments, listen),
            Part::Relay(_) => relay(database, orders, "2s"),
        }
    }

    /// Starts `part` (again), once it is not running.
    pub async fn restart(&self, part: Part) {
        let command = self.command(part);
        let service = if matches!(part, Part::Relay(_)) {
            Service::start_without_api(command, RELAY_READY).await
        } else {
            let ready = match part {
                Part::Payments => PAYMENTS_READY,
                _ => WAREHOUSE_READY,
            };
            Service::start(command, ready).await
        };
        self.running.lock().await.insert(part, service);
    }

    /// SIGKILLs `part`, and starts it again after `down`.
    pub async fn kill(&self, part: Part, down: Duration) {
        let _fault = self.faults[&part].lock().await;
        let killed = self.running.lock().await.remove(&part);
        if let Some(service) = killed {
            // A paused process dies of SIGKILL all the same.
            service.sigkill().await;
        }
        tokio::time::sleep(down).await;
        self.restart(part).await;
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

    /// Stops every part with SIGTERM (each resumed first): each must exit cleanly.
    pub async fn stop(&self) {
        let running = std::mem::take(&mut *self.running.lock().await);
        for (_, service) in running {
            if let Some(pid) = service.pid() {
                signal("-CONT", pid);
            }
            service.sigterm().await;
        }
    }
}

fn signal(which: &str, pid: u32) {
    let _ = std::process::Command::new("kill")
        .args([which, &pid.to_string()])
        .status();
}
