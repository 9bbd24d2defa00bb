//! The warehouse of the steps stories: charge (payments, over HTTP, its key carried), reserve
//! (the database), email (a sink that keeps no keys), then the order's row with the claim. A
//! message may name a point where its first run stops: it records the point, then hangs (for
//! the story to SIGKILL it) or pauses (for the story to SIGSTOP it).

use std::time::Duration;

use guestlist_carry::CarryKey;
use guestlist_consumer::{Message, StepHandler};
use guestlist_sqlx::Steps;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use sqlx::{PgConnection, PgPool, Postgres};

/// The points a run can be stopped at, in the order a run passes them.
pub const POINTS: [&str; 7] = [
    "charge:before",
    "charge:called",
    "charge:journaled",
    "reserve:inside",
    "reserve:journaled",
    "email:called",
    "finish:inside",
];

/// What a run does at its message's stop point, the first time it reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtPoint {
    /// Hangs there for good: the story SIGKILLs the process.
    Hang,
    /// Pauses there a while, then goes on: the story SIGSTOPs the process meanwhile.
    Pause(Duration),
}

/// The steps stories' tables, named after the story's tag.
#[derive(Debug, Clone)]
pub struct Tables {
    /// One row per reservation the reserve step made.
    pub reservations: String,
    /// One row per order the final work wrote.
    pub orders: String,
    /// One row per stop point reached (`event`, `point`).
    pub points: String,
}

impl Tables {
    /// The tables of the story tagged `tag`.
    pub fn of(tag: &str) -> Self {
        Self {
            reservations: format!("reservations_{tag}"),
            orders: format!("orders_{tag}"),
            points: format!("points_{tag}"),
        }
    }
}

/// Stops at `point` (as `at_point` says) if `wanted` names it and no run of `event` reached it
/// before; records the point in `tables.points` either way it stops.
pub(super) async fn stop_at(
    pool: &PgPool,
    tables: &Tables,
    at_point: AtPoint,
    event: &str,
    wanted: &serde_json::Value,
    point: &str,
) {
    if *wanted != point {
        return;
    }
    let insert = format!(
        "INSERT INTO {} (event, point) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        tables.points
    );
    let first = sqlx::query(sqlx::AssertSqlSafe(insert))
        .bind(event)
        .bind(point)
        .execute(pool)
        .await
        .unwrap()
        .rows_affected()
        == 1;
    if !first {
        return;
    }
    match at_point {
        AtPoint::Hang => std::future::pending().await,
        AtPoint::Pause(pause) => {
            tokio::time::sleep(pause).await;
            let resumed = format!(
                "INSERT INTO {} (event, point) VALUES ($1, $2)",
                tables.points
            );
            sqlx::query(sqlx::AssertSqlSafe(resumed))
                .bind(event)
                .bind(format!("{point}:resumed"))
                .execute(pool)
                .await
                .unwrap();
        }
    }
}

/// The warehouse's step handler.
pub struct Warehouse {
    pub(super) client: ClientWithMiddleware,
    pub(super) payments: String,
    pub(super) email: String,
    pub(super) tables: Tables,
    pub(super) pool: PgPool,
    pub(super) at_point: AtPoint,
}

impl Warehouse {
    /// The warehouse calling `payments` and `email`, writing `tables` on `pool`.
    pub fn new(
        payments: String,
        email: String,
        tables: Tables,
        pool: PgPool,
        at_point: AtPoint,
    ) -> Self {
        let client = ClientBuilder::new(reqwest::Client::new())
            .with(CarryKey::new())
            .build();
        Self {
            client,
            payments,
            email,
            tables,
            pool,
            at_point,
        }
    }

    /// Stops at `point` if `message` names it and no run of it reached it before.
    async fn point(&self, message: &Message, point: &str) {
        let body: serde_json::Value = serde_json::from_slice(&message.payload).unwrap_or_default();
        let (pool, tables) = (&self.pool, &self.tables);
        let event = message.id.as_str();
        stop_at(pool, tables, self.at_point, event, &body["stop_at"], point).await;
    }

    /// Waits as long as `message` asks (`slow_ms`) before its charge.
    async fn slow(&self, message: &Message) {
        let body: serde_json::Value = serde_json::from_slice(&message.payload).unwrap_or_default();
        if let Some(ms) = body["slow_ms"].as_u64() {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
    }

    async fn post(&self, url: String, event: &str) -> anyhow::Result<serde_json::Value> {
        let answer = self
            .client
            .post(&url)
            // Payments scopes keys by client.
            .bearer_auth("warehouse")
            .json(&serde_json::json!({ "event": event }))
            .send()
            .await?;
        let status = answer.status();
        let body = answer.text().await?;
        anyhow::ensure!(status.is_success(), "{url} answered {status}: {body}");
        Ok(serde_json::from_str(&body).unwrap_or_default())
    }
}

impl StepHandler<Postgres> for Warehouse {
    type Error = anyhow::Error;
    type Done = String;

    async fn steps(
        &self,
        steps: &mut Steps<Postgres>,
        message: &Message,
    ) -> anyhow::Result<String> {
        let event = message.id.as_str();
        let charge: String = steps
            .external("charge", || async {
                self.point(message, "charge:before").await;
                self.slow(message).await;
                let answer = self
                    .post(format!("{}/v1/charges", self.payments), event)
                    .await?;
                self.point(message, "charge:called").await;
                Ok::<_, anyhow::Error>(answer["charge"].as_str().unwrap_or_default().to_owned())
            })
            .await?;
        self.point(message, "charge:journaled").await;
        steps
            .database("reserve", async |tx| {
                let insert = format!(
                    "INSERT INTO {} (event) VALUES ($1)",
                    self.tables.reservations
                );
                sqlx::query(sqlx::AssertSqlSafe(insert))
                    .bind(event)
                    .execute(&mut *tx)
                    .await?;
                self.point(message, "reserve:inside").await;
                Ok::<_, anyhow::Error>(())
            })
            .await?;
        self.point(message, "reserve:journaled").await;
        steps
            .external("email", || async {
                let body: serde_json::Value =
                    serde_json::from_slice(&message.payload).unwrap_or_default();
                anyhow::ensure!(body["bounces"] != true, "the address bounces");
                self.post(format!("{}/send", self.email), event).await?;
                self.point(message, "email:called").await;
                Ok::<_, anyhow::Error>(())
            })
            .await?;
        Ok(charge)
    }

    async fn finish(
        &self,
        tx: &mut PgConnection,
        message: &Message,
        charge: String,
    ) -> anyhow::Result<()> {
        let insert = format!(
            "INSERT INTO {} (event, charge) VALUES ($1, $2)",
            self.tables.orders
        );
        sqlx::query(sqlx::AssertSqlSafe(insert))
            .bind(message.id.as_str())
            .bind(charge)
            .execute(&mut *tx)
            .await?;
        self.point(message, "finish:inside").await;
        Ok(())
    }
}
