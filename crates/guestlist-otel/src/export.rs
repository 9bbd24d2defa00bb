//! The OTLP/HTTP export of a program's spans.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

use crate::W3c;

/// Why the export could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoint is no `http://` or `https://` URL.
    #[error(
        "the OTLP endpoint {0:?} is no http:// or https:// URL: give the collector's OTLP/HTTP \
         address, such as http://127.0.0.1:4318"
    )]
    Endpoint(String),
    /// The exporter could not be built.
    #[error("cannot export spans over OTLP/HTTP: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// A program's spans on their way to an OTLP/HTTP collector, batched in the background; dropping
/// it sends what is still held (the spans of a program that ends are not lost).
#[derive(Debug)]
pub struct Export {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Export {
    /// Exports the spans of the service `service` (OpenTelemetry's `service.name`) to the
    /// collector at `endpoint` (its base, such as `http://127.0.0.1:4318`, to which
    /// `/v1/traces` is added; a URL that names a path is used as it is), and installs the W3C
    /// propagation ([`W3c`]) the libraries carry the trace with. The batching follows
    /// OpenTelemetry's `OTEL_BSP_*` variables.
    pub fn start(service: &str, endpoint: &str) -> Result<Self, Error> {
        let endpoint = traces_url(endpoint)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint)
            .build()?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                Resource::builder()
                    .with_service_name(service.to_owned())
                    .build(),
            )
            .build();
        let tracer = provider.tracer("guestlist");
        guestlist_core::trace_context::install(W3c);
        Ok(Self { provider, tracer })
    }

    /// The `tracing` layer that records spans for the export, to add to the program's
    /// subscriber beside its logs.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer().with_tracer(self.tracer.clone())
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        if let Err(err) = self.provider.shutdown() {
            eprintln!("guestlist: spans not all exported at exit: {err}");
        }
    }
}

/// The URL spans are posted to: the base with `/v1/traces`, or the URL itself when it names a
/// path.
fn traces_url(endpoint: &str) -> Result<String, Error> {
    let endpoint = endpoint.trim();
    let Some((_, rest)) = endpoint
        .split_once("://")
        .filter(|(scheme, _)| matches!(*scheme, "http" | "https"))
    else {
        return Err(Error::Endpoint(endpoint.to_owned()));
    };
    let has_path = rest
        .split_once('/')
        .is_some_and(|(_, path)| !path.is_empty());
    if has_path {
        Ok(endpoint.to_owned())
    } else {
        Ok(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_gets_the_traces_path_and_a_full_url_stays() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/").unwrap(),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://c/otlp/v1/traces").unwrap(),
            "https://c/otlp/v1/traces"
        );
        assert!(matches!(traces_url("c:4318"), Err(Error::Endpoint(_))));
    }
}
