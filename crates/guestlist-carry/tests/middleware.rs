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
        message.contains("guestlist::carry::scope"),
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

/// A downstream that answers every request with `status` and, if given, `Retry-After`.
async fn answering(status: StatusCode, retry_after: Option<&str>) -> String {
    let mut headers = HeaderMap::new();
    if let Some(value) = retry_after {
        headers.insert("retry-after", value.parse().unwrap());
    }
    let router = Router::new().route(
        "/v1/charges",
        post(move || async move { (status, headers, "not yet") }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    base
}

/// Sends a charge to `base` with `client` inside a piece of work whose deferrals are watched.
async fn charge(
    client: &ClientWithMiddleware,
    base: &str,
) -> (
    reqwest_middleware::Result<reqwest::Response>,
    Option<guestlist_core::Deferral>,
) {
    let url = format!("{base}/v1/charges");
    guestlist_carry::watch_deferral(scope("warehouse:evt_9f3k", client.post(url).send())).await
}

#[tokio::test]
async fn a_downstream_not_yet_becomes_a_deferral_for_as_long_as_it_asks() {
    let client = client();
    let in_flight = answering(StatusCode::CONFLICT, Some("7")).await;
    let (result, recorded) = charge(&client, &in_flight).await;
    let err = result.expect_err("409 in flight is not a response to act on");
    assert!(err.to_string().contains("not yet"), "{err}");
    let recorded = recorded.expect("recorded for the consumer, whatever the error becomes");
    assert_eq!(recorded.after(), std::time::Duration::from_secs(7));
    assert!(recorded.reason().contains("409"), "{}", recorded.reason());

    let limited = answering(StatusCode::TOO_MANY_REQUESTS, None).await;
    let (_, recorded) = charge(&client, &limited).await;
    assert_eq!(
        recorded.map(|d| d.after()),
        Some(std::time::Duration::from_secs(1)),
        "429 without Retry-After: a second"
    );

    let later =
        httpdate::fmt_http_date(std::time::SystemTime::now() + std::time::Duration::from_secs(60));
    let restarting = answering(StatusCode::SERVICE_UNAVAILABLE, Some(&later)).await;
    let (_, recorded) = charge(&client, &restarting).await;
    let after = recorded.expect("503 is not yet").after();
    assert!(
        (58..=60).contains(&after.as_secs()),
        "an HTTP-date Retry-After is a wait until then: {after:?}"
    );

    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gone = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let (result, recorded) = charge(&client, &gone).await;
    assert!(result.is_err());
    assert!(
        recorded.is_some_and(|d| d.reason().contains("cannot connect")),
        "a refused connection is not yet"
    );
}

/// A downstream that accepts each connection, reads the request, and closes without an answer:
/// a proxy with no backend, a server that died mid-request.
fn hanging_up() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut connection in listener.incoming().flatten() {
            let mut request = [0u8; 1024];
            let _ = std::io::Read::read(&mut connection, &mut request);
        }
    });
    base
}

#[tokio::test]
async fn a_call_that_went_out_and_got_no_answer_is_not_yet() {
    // Found by the soak rig: a payments link cut by a proxy (connections accepted, then
    // closed) dead-lettered hundreds of paid orders as poison within the consumer's five tries,
    // though the carried key makes the call safe to make again.
    let client = client();
    let gone = hanging_up();
    let (result, recorded) = charge(&client, &gone).await;
    assert!(result.is_err());
    let recorded = recorded.expect("no answer is not yet");
    assert!(
        recorded.reason().contains("no answer"),
        "{}",
        recorded.reason()
    );

    let slow = ClientBuilder::new(
        reqwest::Client::builder()
            .timeout(std::time::Duration::from_millis(200))
            .build()
            .unwrap(),
    )
    .with(CarryKey::new())
    .build();
    let stalled = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let never = format!("http://{}", stalled.local_addr().unwrap());
    let (result, recorded) = charge(&slow, &never).await;
    assert!(result.is_err());
    assert!(
        recorded.is_some_and(|d| d.reason().contains("no answer")),
        "a call that timed out is not yet"
    );
    drop(stalled);
}

#[tokio::test]
async fn a_conflict_without_retry_after_and_other_answers_pass_through() {
    let client = client();
    for (status, retry_after) in [
        (StatusCode::CONFLICT, None),
        (StatusCode::UNPROCESSABLE_ENTITY, None),
        (StatusCode::INTERNAL_SERVER_ERROR, Some("5")),
    ] {
        let base = answering(status, retry_after).await;
        let (result, recorded) = charge(&client, &base).await;
        assert_eq!(result.expect("passed through").status(), status);
        assert!(recorded.is_none(), "{status} is no deferral");
    }
    let off = ClientBuilder::new(reqwest::Client::new())
        .with(CarryKey::new().defer_not_yet(false))
        .build();
    let base = answering(StatusCode::CONFLICT, Some("7")).await;
    let (result, recorded) = charge(&off, &base).await;
    assert_eq!(result.unwrap().status(), StatusCode::CONFLICT, "turned off");
    assert!(recorded.is_none());
}
