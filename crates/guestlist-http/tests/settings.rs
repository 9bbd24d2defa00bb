//! The layer's settings, each changing what a request gets. Settings do not depend on the
//! store, so one (SQLite) serves.

mod common;

use axum::http::{HeaderName, Method, StatusCode};
use common::app::AppState;
use common::client::{Call, Server};
use common::stores::{Settings, Sql, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Api {
    state: AppState,
    server: Server,
    _store: Sql<sqlx::Sqlite>,
}

async fn api(name: &str, settings: Settings) -> Api {
    let store = Sql::<sqlx::Sqlite>::open(name).await;
    let state = AppState::default();
    let server = Server::start(store.router(state.clone(), &settings)).await;
    Api {
        state,
        server,
        _store: store,
    }
}

impl Api {
    async fn twice(&self, call: &Call) -> (common::client::Answer, common::client::Answer) {
        (
            call.send(&self.server.base).await,
            call.send(&self.server.base).await,
        )
    }
}

#[tokio::test]
async fn patch_is_keyed_and_put_passes_through_by_default() {
    let api = api("settings_default_methods", Settings::default()).await;
    let (_, patched) = api.twice(&Call::new("m").method(Method::PATCH)).await;
    assert!(patched.replayed(), "PATCH is keyed by default");
    let (_, put) = api.twice(&Call::new("m2").method(Method::PUT)).await;
    assert!(
        !put.replayed(),
        "PUT is idempotent by its own semantics: not keyed by default"
    );
    assert_eq!(api.state.executions(), 3);
}

#[tokio::test]
async fn the_keyed_methods_can_be_chosen() {
    let settings = Settings {
        methods: Some(vec![Method::PUT]),
        ..Settings::default()
    };
    let api = api("settings_chosen_methods", settings).await;
    let (_, put) = api.twice(&Call::new("m").method(Method::PUT)).await;
    assert!(put.replayed());
    let (_, post) = api.twice(&Call::new("m2")).await;
    assert!(!post.replayed(), "POST is no longer keyed");
}

#[tokio::test]
async fn a_custom_header_carries_the_key() {
    let settings = Settings {
        header_name: Some(HeaderName::from_static("x-request-key")),
        ..Settings::default()
    };
    let api = api("settings_header_name", settings).await;
    let (_, again) = api.twice(&Call::new("k").key_header("x-request-key")).await;
    assert!(again.replayed());
    let (_, ignored) = api.twice(&Call::new("k")).await;
    assert!(!ignored.replayed(), "Idempotency-Key means nothing here");
}

#[tokio::test]
async fn a_reused_key_can_answer_400_like_stripe() {
    let settings = Settings {
        mismatch_status: Some(StatusCode::BAD_REQUEST),
        ..Settings::default()
    };
    let api = api("settings_mismatch_400", settings).await;
    Call::new("k").send(&api.server.base).await;
    let other = Call::new("k").body(b"other").send(&api.server.base).await;
    assert_eq!(other.status, StatusCode::BAD_REQUEST);
    assert_eq!(other.problem().as_deref(), Some("key-reused"));
}

#[tokio::test]
async fn keys_can_be_scoped_by_tenant() {
    let settings = Settings {
        scope_header: Some("x-tenant"),
        ..Settings::default()
    };
    let api = api("settings_scope_fn", settings).await;
    let acme = Call::new("k").by(None).header("x-tenant", "acme");
    let globex = Call::new("k").by(None).header("x-tenant", "globex");
    let (first, again) = api.twice(&acme).await;
    let other = globex.send(&api.server.base).await;
    assert!(again.replayed());
    assert!(!other.replayed(), "another tenant's key is its own");
    assert_ne!(first.body, other.body);
    let nobody = Call::new("k").send(&api.server.base).await;
    assert_eq!(nobody.status, StatusCode::BAD_REQUEST);
    assert!(nobody.text().contains("send X-Tenant"), "{}", nobody.text());
}

#[tokio::test]
async fn a_chosen_header_counts_in_the_fingerprint() {
    let counted = Settings {
        fingerprint_header: Some(HeaderName::from_static("content-type")),
        ..Settings::default()
    };
    let api = api("settings_fingerprint_header", counted).await;
    Call::new("k")
        .header("content-type", "application/json")
        .send(&api.server.base)
        .await;
    let xml = Call::new("k")
        .header("content-type", "application/xml")
        .send(&api.server.base)
        .await;
    assert_eq!(xml.status, StatusCode::UNPROCESSABLE_ENTITY);

    let plain = api_default("settings_fingerprint_default").await;
    Call::new("k")
        .header("content-type", "application/json")
        .send(&plain.server.base)
        .await;
    let xml = Call::new("k")
        .header("content-type", "application/xml")
        .send(&plain.server.base)
        .await;
    assert!(xml.replayed(), "by default headers do not count");
}

async fn api_default(name: &str) -> Api {
    api(name, Settings::default()).await
}

#[tokio::test]
async fn another_query_string_is_another_request() {
    let api = api_default("settings_query").await;
    Call::new("k")
        .path("/payments?currency=eur")
        .send(&api.server.base)
        .await;
    let usd = Call::new("k")
        .path("/payments?currency=usd")
        .send(&api.server.base)
        .await;
    assert_eq!(usd.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(api.state.executions(), 1);
}

/// Sends raw HTTP/1.1 to the server and returns the status line.
async fn raw(base: &str, request: &[u8]) -> String {
    let address = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = vec![0; 4096];
    let n = stream.read(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn two_key_headers_are_refused() {
    let api = api_default("settings_two_keys").await;
    let status = raw(
        &api.server.base,
        b"POST /payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\nIdempotency-Key: a\r\n\
          Idempotency-Key: b\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
    )
    .await;
    assert!(status.contains("400"), "{status}");
    assert_eq!(api.state.executions(), 0);
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_gets_413() {
    let settings = Settings {
        max_request_body: 1024,
        ..Settings::default()
    };
    let api = api("settings_chunked", settings).await;
    let mut request = b"POST /payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\n\
        Idempotency-Key: chunky\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        .to_vec();
    for _ in 0..4 {
        request.extend_from_slice(b"200\r\n");
        request.extend_from_slice(&[b'x'; 0x200]);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    let status = raw(&api.server.base, &request).await;
    assert!(
        status.contains("413"),
        "no Content-Length to check first: {status}"
    );
    assert_eq!(api.state.executions(), 0);
}
