//! The payments service: `payments --database sqlite:payments.db --listen 127.0.0.1:4000`.

use clap::Parser;
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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    println!("payments on http://{}", listener.local_addr()?);
    with_pool!(&args.database, |pool| {
        axum::serve(listener, payments::router(pool).await?)
            .with_graceful_shutdown(guestlist_consumer::shutdown_signal())
            .await?;
    });
    Ok(())
}
