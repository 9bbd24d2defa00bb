//! The shop's clients: each a customer that places orders one after another, each order under a
//! key of its own,
//! and retries as real clients do (on a timeout, a refused connection, 409 with `Retry-After`,
//! and 5xx: with backoff and the same key and body), recording every attempt.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

/// One request sent, and what came of it.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    pub key: String,
    pub body: String,
    pub api: String,
    /// Seconds into the run.
    pub sent_at: f64,
    pub took_ms: u64,
    /// The status, or none when no answer came (a timeout, a refused connection).
    pub status: Option<u16>,
    /// The answer's body, or why there was none.
    pub answer: String,
}

/// Every attempt of every client.
pub type History = Arc<Mutex<Vec<Attempt>>>;

/// How long a client waits for one answer: longer than a pause of a process or a restart.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// How many clients place orders, and how long each pauses between two, in ms.
pub struct Traffic {
    pub clients: usize,
    pub pause: std::ops::Range<u64>,
}

/// Runs `traffic`'s clients against `apis` until `until` (the orders under way then are retried
/// to their answer, until `give_up`), drawing amounts and backoff from `seed`.
pub async fn run(
    apis: Vec<String>,
    traffic: Traffic,
    seed: u64,
    started: Instant,
    until: Instant,
    give_up: Instant,
    history: History,
) {
    let http = reqwest::Client::builder()
        .timeout(ANSWER_WAIT)
        .build()
        .expect("an HTTP client");
    let mut tasks = Vec::new();
    for client in 0..traffic.clients {
        let (http, apis, history) = (http.clone(), apis.clone(), Arc::clone(&history));
        let pause = traffic.pause.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(seed ^ ((client as u64 + 1) << 32));
            let mut n = 0;
            while Instant::now() < until {
                n += 1;
                let key = format!("soak-{seed}-{client}-{n}");
                // Each client is a customer: its orders must reach the warehouse in the order
                // they were placed.
                let body = format!(
                    "{{\"amount\":{},\"customer\":\"c{client}\"}}",
                    rng.i64(100..100_000)
                );
                let order = Order {
                    http: &http,
                    apis: &apis,
                    key: &key,
                    body: &body,
                    started,
                    give_up,
                };
                order.place(&mut rng, &history).await;
                // A pause between orders, as a shop's traffic has: a steady load the machine
                // keeps up with, so that what settles after a fault is the fault's doing.
                tokio::time::sleep(Duration::from_millis(rng.u64(pause.clone()))).await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("a client");
    }
}

/// One order to place.
struct Order<'a> {
    http: &'a reqwest::Client,
    apis: &'a [String],
    key: &'a str,
    body: &'a str,
    started: Instant,
    give_up: Instant,
}

impl Order<'_> {
    /// Sends the order until an answer settles it (2xx, or a 4xx other than 409), or until
    /// `give_up`.
    async fn place(&self, rng: &mut fastrand::Rng, history: &Mutex<Vec<Attempt>>) {
        let mut backoff = Duration::from_millis(100);
        while Instant::now() < self.give_up {
            let api = &self.apis[rng.usize(..self.apis.len())];
            let sent = Instant::now();
            let answer = self
                .http
                .post(format!("{api}/orders"))
                .header("idempotency-key", self.key)
                .header("authorization", "Bearer shop")
                .header("content-type", "application/json")
                .body(self.body.to_owned())
                .send()
                .await;
            let (status, text, retry_after) = match answer {
                Ok(answer) => {
                    let status = answer.status().as_u16();
                    let retry_after = answer
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                    match answer.text().await {
                        Ok(text) => (Some(status), text, retry_after),
                        Err(err) => (None, format!("the body broke off: {err}"), None),
                    }
                }
                Err(err) => (None, err.to_string(), None),
            };
            history.lock().unwrap().push(Attempt {
                key: self.key.to_owned(),
                body: self.body.to_owned(),
                api: api.clone(),
                sent_at: sent.duration_since(self.started).as_secs_f64(),
                took_ms: sent.elapsed().as_millis() as u64,
                status,
                answer: text,
            });
            match status {
                Some(s) if (200..300).contains(&s) => return,
                Some(s) if (400..500).contains(&s) && s != 409 && s != 429 => return,
                _ => {}
            }
            let wait = retry_after.map_or(backoff, Duration::from_secs);
            let jitter = Duration::from_millis(rng.u64(0..=wait.as_millis() as u64 / 2));
            tokio::time::sleep(wait.min(Duration::from_secs(2)) + jitter).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }
}
