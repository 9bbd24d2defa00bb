//! The stories of a request that finds its key in flight and waits for the first attempt's
//! answer (`in_flight_wait`), every key store telling them the same way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;

use super::app::AppState;
use super::client::{Answer, Call, Server};
use super::stores::{Settings, Store};

/// A store with the layer waiting up to `wait` in front of it.
struct Api<S: Store> {
    store: S,
    state: AppState,
    server: Server,
}

impl<S: Store> Api<S> {
    async fn start(name: &str, settings: Settings) -> Arc<Self> {
        let store = S::open(name).await;
        let state = AppState::default();
        let server = Server::start(store.router(state.clone(), &settings)).await;
        Arc::new(Self {
            store,
            state,
            server,
        })
    }

    fn waiting(wait: Duration) -> Settings {
        Settings {
            in_flight_wait: Some(wait),
            ..Settings::default()
        }
    }

    async fn send(&self, call: &Call) -> Answer {
        call.send(&self.server.base).await
    }

    /// Sends `call` from a task of its own.
    fn spawn(self: &Arc<Self>, call: &Call) -> tokio::task::JoinHandle<Answer> {
        let (api, call) = (Arc::clone(self), call.clone());
        tokio::spawn(async move { api.send(&call).await })
    }

    /// Sends `call` held at the gate `gate`, and returns once its handler has arrived there.
    async fn held(self: &Arc<Self>, call: &Call, gate: &str) -> tokio::task::JoinHandle<Answer> {
        let entered = self.state.gate(gate).entered;
        let answer = self.spawn(&call.clone().header("x-test-block", gate));
        entered.notified().await;
        answer
    }

    fn open(&self, gate: &str) {
        self.state.gate(gate).open.notify_one();
    }
}

pub async fn fifty_requests_on_one_key_wait_for_one_answer<S: Store>(name: &str) {
    let api = Api::<S>::start(name, Api::<S>::waiting(Duration::from_secs(10))).await;
    let call = Call::new("fifty-wait").header("x-test-delay-ms", "1000");
    let requests: Vec<_> = (0..50).map(|_| api.spawn(&call)).collect();
    let mut answers = Vec::new();
    for request in requests {
        answers.push(request.await.unwrap());
    }
    assert_eq!(
        api.state.executions(),
        1,
        "{}: the handler ran once",
        S::LABEL
    );
    assert_eq!(api.store.effects(&api.state).await, 1, "one payment");
    let first: Vec<&Answer> = answers.iter().filter(|a| !a.replayed()).collect();
    assert_eq!(first.len(), 1, "one answer is the attempt's own");
    for answer in &answers {
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text());
        assert_eq!(answer.body, first[0].body, "byte for byte");
        assert_eq!(
            answer.header("content-type"),
            first[0].header("content-type")
        );
        assert_eq!(
            answer.header("preference-applied"),
            None,
            "no client asked for a wait"
        );
    }
}

pub async fn prefer_wait_asks_for_less_or_for_none<S: Store>(name: &str) {
    let api = Api::<S>::start(name, Api::<S>::waiting(Duration::from_secs(10))).await;
    let call = Call::new("prefer-wait");
    let first = api.held(&call, "prefer").await;
    let at_once = Instant::now();
    let none = api.send(&call.clone().header("prefer", "wait=0")).await;
    assert_eq!(none.status, StatusCode::CONFLICT, "{}", none.text());
    assert!(none.header("retry-after").is_some());
    assert_eq!(none.header("preference-applied"), Some("wait=0"));
    assert!(at_once.elapsed() < Duration::from_secs(1), "at once");
    let began = Instant::now();
    let less = api
        .send(&call.clone().header("prefer", "respond-async, wait=1"))
        .await;
    let waited = began.elapsed();
    assert_eq!(less.status, StatusCode::CONFLICT, "{}", less.text());
    assert_eq!(less.header("preference-applied"), Some("wait=1"));
    assert!(
        (Duration::from_millis(900)..Duration::from_secs(5)).contains(&waited),
        "waited a second, not the server's ten: {waited:?}"
    );
    // A client asking for more than the server gives gets the server's bound.
    let more = api.spawn(&call.clone().header("prefer", "wait=600"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    api.open("prefer");
    let (first, more) = (first.await.unwrap(), more.await.unwrap());
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(more.status, StatusCode::CREATED, "{}", more.text());
    assert!(more.replayed());
    assert_eq!(more.body, first.body);
    assert_eq!(more.header("preference-applied"), Some("wait=10"));
    assert_eq!(api.state.executions(), 1);
}

pub async fn a_released_first_attempt_is_run_again_by_one_waiter<S: Store>(name: &str) {
    let api = Api::<S>::start(name, Api::<S>::waiting(Duration::from_secs(10))).await;
    let call = Call::new("released-wait");
    let first = api
        .held(&call.clone().header("x-test-status", "503"), "release")
        .await;
    // The waiters' own runs succeed: the one that takes the key over answers them all.
    let waiters: Vec<_> = (0..8)
        .map(|_| api.spawn(&call.clone().header("x-test-delay-ms", "300")))
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    api.open("release");
    let first = first.await.unwrap();
    assert_eq!(first.status, StatusCode::SERVICE_UNAVAILABLE);
    let mut answers = Vec::new();
    for waiter in waiters {
        answers.push(waiter.await.unwrap());
    }
    let ran: Vec<&Answer> = answers.iter().filter(|a| !a.replayed()).collect();
    assert_eq!(ran.len(), 1, "{}: one waiter ran it again", S::LABEL);
    for answer in &answers {
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text());
        assert_eq!(
            answer.body, ran[0].body,
            "the others got that attempt's answer"
        );
    }
    assert_eq!(
        api.state.executions(),
        2,
        "the released attempt and one more"
    );
    if S::TRANSACTIONAL {
        assert_eq!(
            api.store.effects(&api.state).await,
            1,
            "the 503 rolled back"
        );
    }
}

pub async fn waiters_past_the_cap_get_409_at_once<S: Store>(name: &str) {
    // One key in flight at a time: SQLite's transactional mode holds one writer.
    let settings = Settings {
        in_flight_waiters: Some((2, 10)),
        ..Api::<S>::waiting(Duration::from_secs(10))
    };
    let api = Api::<S>::start(name, settings).await;
    let call = Call::new("capped");
    let first = api.held(&call, "cap").await;
    let waiting: Vec<_> = (0..2).map(|_| api.spawn(&call)).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let began = Instant::now();
    for _ in 0..3 {
        let over = api.send(&call).await;
        assert_eq!(over.status, StatusCode::CONFLICT, "two may wait on a key");
        assert!(over.header("retry-after").is_some());
    }
    assert!(began.elapsed() < Duration::from_secs(2), "at once");
    api.open("cap");
    let first = first.await.unwrap();
    for waiter in waiting {
        let answer = waiter.await.unwrap();
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text());
        assert!(answer.replayed());
        assert_eq!(answer.body, first.body);
    }
    assert_eq!(api.state.executions(), 1);
}

pub async fn a_waiter_that_hangs_up_leaves_its_place<S: Store>(name: &str) {
    let settings = Settings {
        in_flight_waiters: Some((1, 1)),
        ..Api::<S>::waiting(Duration::from_secs(30))
    };
    let api = Api::<S>::start(name, settings).await;
    let call = Call::new("hang-up-wait");
    let first = api.held(&call, "hang-up").await;
    let gone = tokio::time::timeout(Duration::from_millis(300), api.send(&call)).await;
    assert!(gone.is_err(), "the waiter waited, then its client hung up");
    // Its place is free again: the next retry waits (and gets the answer) instead of 409.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let next = api.spawn(&call);
    tokio::time::sleep(Duration::from_millis(300)).await;
    api.open("hang-up");
    let first = first.await.unwrap();
    let next = next.await.unwrap();
    assert_eq!(next.status, StatusCode::CREATED, "{}", next.text());
    assert!(next.replayed());
    assert_eq!(next.body, first.body);
    assert_eq!(api.state.executions(), 1);
}

/// The first attempt runs on one server, the waiter on another (as two processes: nothing in
/// memory shared), with a poll of 3 s. Where the store notifies (PostgreSQL, Redis), the
/// answer's notice wakes the waiter well before its next look; elsewhere the poll finds it.
pub async fn a_waiter_on_another_server_learns_of_the_answer<S: Store>(name: &str) {
    let poll = Duration::from_secs(3);
    let settings = Settings {
        in_flight_wait: Some(Duration::from_secs(10)),
        in_flight_poll: Some(poll),
        ..Settings::default()
    };
    let first = Api::<S>::start(name, settings.clone()).await;
    let other = S::attach(first.store.url(), first.store.tag()).await;
    let elsewhere = Server::start(other.router(AppState::default(), &settings)).await;
    let call = Call::new("answered-elsewhere");
    let held = first.held(&call, "first").await;
    let waiter = {
        let (call, base) = (call.clone(), elsewhere.base.clone());
        tokio::spawn(async move {
            let answer = call.send(&base).await;
            (answer, Instant::now())
        })
    };
    // The waiter claims, finds the key in flight, and settles into its wait: where the store
    // notifies, once it marked the key (an answer before the mark is the poll's to find).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while S::notifies() && other.waited_on().await == 0 {
        assert!(Instant::now() < deadline, "the waiter never marked the key");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.open("first");
    let answer = held.await.unwrap();
    let answered_at = Instant::now();
    let (waited, waiter_at) = waiter.await.unwrap();
    let gap = waiter_at.saturating_duration_since(answered_at);
    eprintln!(
        "{}: the other server's waiter answered {gap:?} after the first",
        S::LABEL
    );
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text());
    assert!(waited.replayed(), "{}", waited.text());
    assert_eq!(
        waited.body, answer.body,
        "the first attempt's answer, byte for byte"
    );
    if S::notifies() {
        assert!(
            gap < Duration::from_millis(1_000),
            "the notice woke the waiter, not its poll of {poll:?}: {gap:?}"
        );
    } else {
        assert!(
            gap < poll + Duration::from_secs(2),
            "the poll found it: {gap:?}"
        );
    }
    assert_eq!(first.state.executions(), 1);
}

/// `call` as a request for the router itself, with no socket between.
fn request_of(call: &Call) -> axum::http::Request<axum::body::Body> {
    let mut request = axum::http::Request::builder()
        .method(call.method.as_str())
        .uri(call.path.as_str());
    if let Some(key) = &call.key {
        request = request.header(call.key_header.as_str(), key);
    }
    if let Some(authorization) = &call.authorization {
        request = request.header("authorization", authorization);
    }
    for (name, value) in &call.headers {
        request = request.header(name, value);
    }
    request.body(call.body.clone().into()).unwrap()
}

/// The process's resident memory, in bytes.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Ten thousand requests on one key whose first attempt runs, sent straight to the router (no
/// sockets: what is measured is the layer): the default caps let 100 wait, the rest get 409 at
/// once, the first attempt runs once, and the process's memory grows by a bounded amount.
pub async fn ten_thousand_requests_on_one_key_are_capped<S: Store>(name: &str) {
    use tower::ServiceExt;
    const REQUESTS: usize = 10_000;
    const PER_KEY: usize = 100; // the default cap
    let store = S::open(name).await;
    let state = AppState::default();
    let settings = Settings {
        in_flight_wait: Some(Duration::from_secs(600)),
        // Ten thousand claims on a loaded machine can outlast the default 30 s: the first
        // attempt must keep its key throughout (no take-over, one execution).
        lease: Duration::from_secs(600),
        ..Settings::default()
    };
    let router = store.router(state.clone(), &settings);
    let call = Call::new("one-key-for-all");
    let entered = state.gate("first").entered;
    let first = tokio::spawn(
        router
            .clone()
            .oneshot(request_of(&call.clone().header("x-test-block", "first"))),
    );
    entered.notified().await;

    let before = resident_bytes();
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..REQUESTS {
        requests.spawn(router.clone().oneshot(request_of(&call)));
    }
    let mut refused = 0;
    let mut peak = resident_bytes();
    while refused < REQUESTS - PER_KEY {
        let answer = tokio::time::timeout(Duration::from_secs(60), requests.join_next())
            .await
            .expect("the requests past the cap are answered at once")
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(
            answer.status(),
            StatusCode::CONFLICT,
            "{:?}",
            answer.headers()
        );
        refused += 1;
        if refused % 1_000 == 0 {
            peak = peak.max(resident_bytes());
        }
    }
    let grown = peak.saturating_sub(before);
    eprintln!(
        "{}: {REQUESTS} requests on one key: {refused} refused at once, {PER_KEY} waiting; \
         resident memory grew by {} KiB",
        S::LABEL,
        grown / 1024
    );
    assert!(
        grown < 256 * 1024 * 1024,
        "the process's memory stays bounded: it grew by {} MiB",
        grown / (1024 * 1024)
    );
    assert_eq!(requests.len(), PER_KEY, "the cap's waiters still wait");

    state.gate("first").open.notify_one();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let mut replayed = 0;
    while let Some(answer) = requests.join_next().await {
        let answer = answer.unwrap().unwrap();
        assert_eq!(answer.status(), StatusCode::CREATED);
        assert_eq!(
            answer.headers().get("idempotent-replayed").unwrap(),
            "true",
            "each waiter gets the first attempt's answer"
        );
        replayed += 1;
    }
    assert_eq!(replayed, PER_KEY);
    assert_eq!(
        state.executions(),
        1,
        "one execution for ten thousand requests"
    );
}
