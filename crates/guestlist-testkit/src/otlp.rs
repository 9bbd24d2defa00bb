//! An OTLP/HTTP collector in the test's own process: what guestlist's programs export when
//! given `--otlp-endpoint`, decoded from the protobuf they send, for a test to read the trace.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message as _;

/// One span as the receiver got it.
#[derive(Debug, Clone)]
pub struct Received {
    /// Its service's `service.name`.
    pub service: String,
    /// Its name.
    pub name: String,
    /// Its trace id, in hex.
    pub trace: String,
    /// Its span id, in hex.
    pub id: String,
    /// Its parent's span id, in hex (empty for a root).
    pub parent: String,
    /// Its attributes, each value as text.
    pub attributes: Vec<(String, String)>,
}

impl Received {
    /// The value of the attribute `name`, as text.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// An OTLP/HTTP receiver (protobuf, `POST /v1/traces`) on a port of its own, keeping what it
/// receives.
pub struct Collector {
    /// Its base URL, for `OTEL_EXPORTER_OTLP_ENDPOINT` or `--otlp-endpoint`.
    pub url: String,
    spans: Arc<Mutex<Vec<Received>>>,
}

impl Collector {
    /// A collector listening on loopback, on a port of its own.
    pub async fn start() -> Self {
        let (url, spans) = receiver().await;
        Self { url, spans }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }
}

async fn receiver() -> (String, Arc<Mutex<Vec<Received>>>) {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&spans);
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let kept = Arc::clone(&kept);
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                kept.lock().unwrap().extend(received(request));
                // An empty ExportTraceServiceResponse: all accepted.
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, spans)
}

/// The spans of one export, with their service's name.
fn received(request: ExportTraceServiceRequest) -> Vec<Received> {
    let text = |value: Option<&Value>| match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(n)) => n.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    };
    let mut out = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref().and_then(|v| v.value.as_ref())))
            .unwrap_or_default();
        for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
            out.push(Received {
                service: service.clone(),
                name: span.name,
                trace: hex(&span.trace_id),
                id: hex(&span.span_id),
                parent: hex(&span.parent_span_id),
                attributes: span
                    .attributes
                    .iter()
                    .map(|kv| {
                        let value = text(kv.value.as_ref().and_then(|v| v.value.as_ref()));
                        (kv.key.clone(), value)
                    })
                    .collect(),
            });
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The span `span` descends from, nearest first, as far as the spans received reach.
pub fn ancestry(spans: &[Received], span: &Received) -> Vec<Received> {
    let mut chain = vec![span.clone()];
    while let Some(parent) = spans.iter().find(|s| s.id == chain.last().unwrap().parent) {
        chain.push(parent.clone());
    }
    chain
}
