//! The trace context that travels with a message and a request ([W3C Trace Context]'s
//! `traceparent` and `tracestate`), so that one trace follows an event from the HTTP request that
//! caused it, through the outbox, the relay and the broker, to the consumer and the calls it makes
//! downstream with the key it carries.
//!
//! The libraries emit `tracing` spans and choose no exporter; what a span's context is, and how
//! a span becomes the child of a context that arrived in headers, is the business of the
//! program's tracing (OpenTelemetry's, through `tracing-opentelemetry`). A program installs that
//! knowledge once with [`install`] (the `guestlist-otel` crate does, with its exporter); until
//! then [`inject`] writes nothing and [`adopt`] does nothing, and the headers a message was
//! enqueued with still travel as they are: a service in another language that writes a
//! `traceparent` into the outbox's headers joins its trace all the same.
//!
//! [W3C Trace Context]: https://www.w3.org/TR/trace-context/

use std::sync::OnceLock;

/// The header of a span's trace and parent ids (`00-<trace id>-<span id>-<flags>`).
pub const TRACEPARENT: &str = "traceparent";
/// The header of the vendors' own trace state, beside [`TRACEPARENT`].
pub const TRACESTATE: &str = "tracestate";

/// How the program's tracing writes a span's context as headers, and makes a span the child of
/// a context read from headers.
pub trait Propagation: Send + Sync + 'static {
    /// Writes `span`'s context through `set`, as W3C Trace Context headers (`traceparent`, and
    /// `tracestate` when there is one); nothing when the span has none.
    fn inject(&self, span: &tracing::Span, set: &mut dyn FnMut(&str, String));

    /// Makes `span`, not yet entered, the child of the context the headers hold, each read
    /// through `get`; does nothing when they hold none (or one that does not parse).
    fn adopt(&self, span: &tracing::Span, get: &dyn Fn(&str) -> Option<String>);
}

static INSTALLED: OnceLock<Box<dyn Propagation>> = OnceLock::new();

/// Installs the program's [`Propagation`], once; `false` (and the first one kept) when one is
/// installed already.
pub fn install(propagation: impl Propagation) -> bool {
    INSTALLED.set(Box::new(propagation)).is_ok()
}

/// Whether a [`Propagation`] is installed.
pub fn installed() -> bool {
    INSTALLED.get().is_some()
}

/// Writes `span`'s context through `set` with the installed [`Propagation`]; nothing when none
/// is installed.
pub fn inject(span: &tracing::Span, mut set: impl FnMut(&str, String)) {
    if let Some(propagation) = INSTALLED.get() {
        propagation.inject(span, &mut set);
    }
}

/// The W3C headers of `span`'s context, as name and value pairs (none when no
/// [`Propagation`] is installed, or the span has no context).
pub fn headers_of(span: &tracing::Span) -> Vec<(String, String)> {
    let mut headers = Vec::new();
    inject(span, |name, value| headers.push((name.to_owned(), value)));
    headers
}

/// Makes `span` the child of the context in the headers read through `get`, with the
/// installed [`Propagation`]; nothing when none is installed.
pub fn adopt(span: &tracing::Span, get: impl Fn(&str) -> Option<String>) {
    if let Some(propagation) = INSTALLED.get() {
        propagation.adopt(span, &get);
    }
}

/// Makes `span` the child of the context among a message's `headers` (name and value pairs;
/// names compared without regard to case, as HTTP's are).
pub fn adopt_from(span: &tracing::Span, headers: &[(String, String)]) {
    adopt(span, |wanted| {
        headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
            .map(|(_, value)| value.clone())
    });
}

/// Whether `name` is one of the W3C Trace Context headers.
pub fn is_trace_header(name: &str) -> bool {
    name.eq_ignore_ascii_case(TRACEPARENT) || name.eq_ignore_ascii_case(TRACESTATE)
}
