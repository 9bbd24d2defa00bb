//! The services' logs on stderr, and their spans over OTLP/HTTP when given a collector: each
//! event's trace runs from `POST /orders` through the outbox, the relay and the broker to the
//! warehouse's handler and the charge it carries to payments.

use guestlist::otel::Export;
use tracing_subscriber::prelude::*;

/// Logs at `RUST_LOG` (info by default) to stderr; spans of `service` to `otlp_endpoint`, if
/// given, until the returned export is dropped (which sends the last of them).
pub fn init(service: &str, otlp_endpoint: Option<&str>) -> anyhow::Result<Option<Export>> {
    let export = match otlp_endpoint.filter(|url| !url.trim().is_empty()) {
        Some(endpoint) => Some(Export::start(service, endpoint)?),
        None => None,
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::registry()
        .with(export.as_ref().map(|export| {
            export
                .layer()
                .with_filter(tracing_subscriber::filter::LevelFilter::INFO)
        }))
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(filter),
        )
        .init();
    Ok(export)
}
