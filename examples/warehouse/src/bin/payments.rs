//! The payments service: `payments --database sqlite:payments.db --listen 127.0.0.1:4000`.
//!
//! It prints `payments on http://…` once ready (tables there, listener bound); `GET /readyz`
//! answers 200 from then on, 503 before.

use std::time::Duration;

use clap::Parser;
use warehouse_example::ready::Readiness;
use warehouse_example::{payments, with_pool};

/// The card network stand-in, behind guestlist's Idempotency-Key layer.
#[derive(Parser)]
struct Args {
    /// postgres://… or sqlite:path
    #[arg(long, default_value = "sqlite:payments.db")]
    database: String,
    /// Where the API listens.
    #[arg(long, default_value = "127.0.0.1:4000")]
    listen: String,
    /// How long a charge's key stays locked after its attempt died, before a retry takes over.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    lease: Duration,
    /// How long each charge takes before it commits (a slow card network; for crash drills).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    charge_takes: Duration,
    /// Export spans over OTLP/HTTP to the collector at this URL (http://host:4318).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _export = warehouse_example::telemetry::init("payments", args.otlp_endpoint.as_deref())?;
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    let addr = listener.local_addr()?;
    let readiness = Readiness::waiting_for("its tables");
    with_pool!(&args.database, |pool| {
        // Serve at once, so that /readyz can say "not yet"; the API answers 503 until ready.
        let options = payments::Options {
            lease: args.lease,
            charge_takes: args.charge_takes,
        };
        let app = readiness.gate(payments::router(pool.clone(), options)?);
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(guestlist::consumer::shutdown_signal())
                .await
        });
        payments::migrate(&pool).await?;
        readiness.ready();
        println!("payments on http://{addr}");
        server.await??;
    });
    Ok(())
}
