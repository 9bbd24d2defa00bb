//! The outbound middleware, against a real server on loopback that records the keys it sees.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use guestlist_carry::{CarryKey, Step, scope};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};

/// What the server saw: the `Idempotency-Key` of every request, in order, and how many times to
/// answer 503 before succeeding.
#[derive(Clone, Default)]
struct Seen {
    keys: Arc<Mutex<Vec<Option<String>>>>,
    fail_first: Arc<Mutex<u32>>,
}

async fn record(State(seen): State<Seen>, headers: HeaderMap) -> StatusCode {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    seen.keys.lock().unwrap().push(key);
    let mut fail = seen.fail_first.lock().unwrap();
    if *fail > 0 {
        *fail -= 1;
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    StatusCode::CREATED
}

async fn server(seen: Seen) -> String {
    let router = Router::new()
        .route("/v1/charges", post(record).get(|| async { "ok" }))
        .route("/v1/emails", post(record))
        .with_state(seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    base
}

/// A plain retry middleware: up to three more tries on a 503, resending the same request.
struct RetryOn503;

#[async_trait::async_trait]
impl Middleware for RetryOn503 {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut axum::http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let mut tries = 0;
        loop {
            let attempt = request.try_clone().expect("a body that can be resent");
            let response = next.clone().run(attempt, extensions).await?;
            tries += 1;
            if response.status() != StatusCode::SERVICE_UNAVAILABLE || tries == 4 {
                return Ok(response);
            }
        }
    }
}

fn client() -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(CarryKey::new()) // before the retries, so every retry resends the same key
        .with(RetryOn503)
        .build()
}

#[tokio::test]
async fn two_steps_get_two_keys_that_hold_across_retries_of_the_work() {
    let seen = Seen::default();
    let base = server(seen.clone()).await;
    let work = || async {
        client()
            .post(format!("{base}/v1/charges"))
            .send()
            .await
            .unwrap();
        client()
            .post(format!("{base}/v1/emails"))
            .send()
            .await
            .unwrap();
    };
    scope("warehouse:evt_9f3k", work()).await;
    scope("warehouse:evt_9f3k", work()).await; // the redelivery runs the work again
    let keys = seen.keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 4);
    assert_ne!(keys[0], keys[1], "charge and email have keys of their own");
    assert_eq!(
        keys[0], keys[2],
        "the charge's key is the same on the redelivery"
    );
    assert_eq!(keys[1], keys[3]);
    assert_eq!(
        keys[0].as_deref(),
        Some("warehouse:evt_9f3k/post.v1.charges")
    );
}

#[tokio::test]
async fn a_retry_middleware_retrying_a_503_reuses_the_key() {
    let seen = Seen::default();
    *seen.fail_first.lock().unwrap() = 2;
    let base = server(seen.clone()).await;
    let response = scope("warehouse:evt_7h2m", async {
        client()
            .post(format!("{base}/v1/charges"))
            .send()
            .await
            .unwrap()
    })
    .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let keys = seen.keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 3, "two 503s, then the success");
    assert!(
        keys.iter().all(|k| k == &keys[0] && k.is_some()),
        "one key for every try: {keys:?}"
    );
}

#[tokio::test]
async fn an_outbound_mutating_call_without_context_is_refused() {
    let seen = Seen::default();
    let base = server(seen.clone()).await;
    let err = client()
        .post(format!("{base}/v1/charges"))
        .send()
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("refusing POST"), "{message}");
    assert!(
        message.contains("guestlist_carry::scope"),
        "it says what to do: {message}"
    );
    assert!(seen.keys.lock().unwrap().is_empty(), "nothing was sent");

    let read = client()
        .get(format!("{base}/v1/charges"))
        .send()
        .await
        .unwrap();
    assert!(read.status().is_success(), "a GET needs no key");

    let allowed = ClientBuilder::new(reqwest::Client::new())
        .with(CarryKey::new().allow_without_key(true))
        .build();
    allowed
        .post(format!("{base}/v1/charges"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        seen.keys.lock().unwrap().clone(),
        [None],
        "sent, unkeyed, when told to"
    );
}

#[tokio::test]
async fn a_named_step_and_an_explicit_key_are_respected() {
    let seen = Seen::default();
    let base = server(seen.clone()).await;
    scope("warehouse:evt_9f3k", async {
        client()
            .post(format!("{base}/v1/charges"))
            .with_extension(Step("refund-1".into()))
            .send()
            .await
            .unwrap();
        client()
            .post(format!("{base}/v1/charges"))
            .header("idempotency-key", "mine")
            .send()
            .await
            .unwrap();
    })
    .await;
    let keys = seen.keys.lock().unwrap().clone();
    assert_eq!(keys[0].as_deref(), Some("warehouse:evt_9f3k/refund-1"));
    assert_eq!(keys[1].as_deref(), Some("mine"));
}
