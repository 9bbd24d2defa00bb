//! OpenTelemetry for programs built on guestlist: the libraries' `tracing` spans exported over
//! OTLP/HTTP, and the W3C trace context (`traceparent`, `tracestate`) carried from an HTTP
//! request into the outbox, from the relay onto the broker, from the broker into the consumer's
//! span, and from there downstream with the carried key, so that one event makes one trace.
//!
//! The libraries choose no exporter; a program does, once, at start:
//!
//! ```no_run
//! use tracing_subscriber::prelude::*;
//!
//! # fn main() -> Result<(), guestlist_otel::Error> {
//! // --otlp-endpoint, or OTEL_EXPORTER_OTLP_ENDPOINT: http://collector:4318
//! let export = guestlist_otel::Export::start("warehouse", "http://127.0.0.1:4318")?;
//! tracing_subscriber::registry()
//!     .with(tracing_subscriber::fmt::layer())
//!     .with(export.layer())
//!     .init();
//! // ... run the service; dropping `export` sends the spans still held.
//! # Ok(()) }
//! ```
//!
//! A program that sets up OpenTelemetry its own way (with `tracing-opentelemetry`'s layer)
//! installs only the propagation: `guestlist_core::trace_context::install(guestlist_otel::W3c)`.

mod export;
mod w3c;

pub use export::{Error, Export};
pub use w3c::W3c;
