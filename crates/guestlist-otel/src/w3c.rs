//! The W3C trace context of a `tracing` span, through `tracing-opentelemetry`.

use guestlist_core::trace_context::Propagation;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// guestlist's [`Propagation`] for spans that `tracing-opentelemetry`'s layer records: W3C
/// Trace Context in and out.
#[derive(Debug, Default, Clone, Copy)]
pub struct W3c;

struct Set<'a>(&'a mut dyn FnMut(&str, String));

impl Injector for Set<'_> {
    fn set(&mut self, key: &str, value: String) {
        (self.0)(key, value);
    }
}

/// The headers' values, in the order of [`KEYS`], read before the propagator asks.
struct Get(Vec<String>);

impl Extractor for Get {
    fn get(&self, key: &str) -> Option<&str> {
        let at = KEYS.iter().position(|k| *k == key)?;
        self.0.get(at).map(String::as_str).filter(|v| !v.is_empty())
    }

    fn keys(&self) -> Vec<&str> {
        KEYS.to_vec()
    }
}

/// The headers the W3C propagator reads.
const KEYS: [&str; 2] = [
    guestlist_core::trace_context::TRACEPARENT,
    guestlist_core::trace_context::TRACESTATE,
];

impl Propagation for W3c {
    fn inject(&self, span: &tracing::Span, set: &mut dyn FnMut(&str, String)) {
        let context = span.context();
        if !context.span().span_context().is_valid() {
            return;
        }
        TraceContextPropagator::new().inject_context(&context, &mut Set(set));
    }

    fn adopt(&self, span: &tracing::Span, get: &dyn Fn(&str) -> Option<String>) {
        let values = KEYS.iter().map(|k| get(k).unwrap_or_default()).collect();
        let parent = TraceContextPropagator::new().extract(&Get(values));
        if parent.span().span_context().is_valid() {
            // A span the layer does not record (filtered out) has nothing to adopt into.
            let _ = span.set_parent(parent);
        }
    }
}
