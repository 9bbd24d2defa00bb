//! The peer a Rust user would pick instead: the same three-step handler as a DBOS workflow
//! (the `dbos` crate, DBOS Transact for Rust), the workflow id the message id, on the same
//! PostgreSQL. Its database step writes on the application's pool and its checkpoint on
//! DBOS's own, two transactions (the crate's issue #48): at least once, where guestlist's
//! database step is exactly once.

use dbos::{Config, DBOS, RunOptions, WorkflowRef};
use guestlist::sqlx::{self, AssertSqlSafe, PgPool};
use serde::{Deserialize, Serialize};

/// The workflow's error: DBOS records it, so it must be serializable.
#[derive(Debug, thiserror::Error, Serialize, Deserialize)]
#[error("{0}")]
pub(super) struct StepFailed(String);

/// The workflow's one argument: the message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Message {
    id: String,
}

/// DBOS, launched, with the three-step workflow registered.
pub(super) struct Dbos {
    dbos: DBOS,
    workflow: WorkflowRef<Message, String, StepFailed>,
}

impl Dbos {
    /// Drops DBOS's schema (`dbos_bench`), launches DBOS on `url` and registers the workflow,
    /// whose database step inserts into `picks` on `pool`.
    pub(super) async fn launch(
        url: &str,
        pool: PgPool,
        picks: &str,
        connections: u32,
    ) -> anyhow::Result<Self> {
        sqlx::raw_sql("DROP SCHEMA IF EXISTS dbos_bench CASCADE")
            .execute(&pool)
            .await?;
        let dbos = DBOS::new(Config {
            app_version: Some("guestlist-bench".to_owned()),
            max_connections: connections,
            schema: "dbos_bench".to_owned(),
            ..Config::new("guestlist-bench", url)
        });
        let insert = format!("INSERT INTO {picks} (event) VALUES ($1)");
        let workflow = dbos.register_workflow("warehouse", move |message: Message| {
            let (pool, insert) = (pool.clone(), insert.clone());
            async move { three_steps(pool, insert, message).await }
        })?;
        dbos.launch().await?;
        Ok(Self { dbos, workflow })
    }

    /// Runs (or, for an id run before, joins) the workflow of message `id`.
    pub(super) async fn run(&self, id: &str) -> anyhow::Result<()> {
        let message = Message { id: id.to_owned() };
        let options = RunOptions {
            workflow_id: Some(id),
            ..Default::default()
        };
        self.workflow
            .run_with(message, options)
            .await
            .map_err(|err| anyhow::anyhow!("DBOS workflow {id}: {err}"))?;
        Ok(())
    }

    /// Forgets every workflow run, so that each figure starts from empty tables.
    pub(super) async fn reset(pool: &PgPool) -> anyhow::Result<()> {
        sqlx::raw_sql(AssertSqlSafe("TRUNCATE dbos_bench.workflow_status CASCADE"))
            .execute(pool)
            .await?;
        Ok(())
    }

    pub(super) async fn shutdown(self) {
        self.dbos.shutdown().await;
    }
}

/// Two no-op external steps around a database step, each a DBOS step.
async fn three_steps(
    pool: PgPool,
    insert: String,
    message: Message,
) -> dbos::Result<String, StepFailed> {
    let (id, pool, insert) = (message.id.as_str(), &pool, &insert);
    let a = dbos::step("a", || async move {
        dbos::Result::<_, StepFailed>::Ok(format!("a:{id}"))
    })
    .await?;
    dbos::step("reserve", || async move {
        sqlx::query(AssertSqlSafe(insert.clone()))
            .bind(id)
            .execute(pool)
            .await
            .map_err(|err| StepFailed(err.to_string()))?;
        dbos::Result::<_, StepFailed>::Ok(())
    })
    .await?;
    let b = dbos::step("b", || async move {
        dbos::Result::<_, StepFailed>::Ok(format!("b:{id}"))
    })
    .await?;
    Ok(format!("{a}{b}"))
}
