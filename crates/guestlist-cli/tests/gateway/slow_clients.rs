//! Clients that send slowly, or not at all, cannot hoard the gateway's connections: headers and
//! bodies have time limits, and connections a cap.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{Gateway, Store, Upstream, post};

const FLAGS: [&str; 6] = [
    "--header-timeout",
    "1s",
    "--body-timeout",
    "1s",
    "--max-connections",
    "16",
];

/// Descriptors the process holds now.
fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// Whether the gateway ends the request on `socket` within `limit`: closes the connection, or
/// answers; what it answered, if anything.
async fn ended_within(socket: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut buffer = [0u8; 4096];
    let first_read = async {
        match socket.read(&mut buffer).await {
            Ok(n) => String::from_utf8_lossy(&buffer[..n]).into_owned(),
            Err(_) => String::new(),
        }
    };
    tokio::time::timeout(limit, first_read).await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_headers_and_bodies_are_cut_off() {
    let upstream = Upstream::start().await;
    let store = Store::sqlite().await;
    let gateway = Gateway::start(&upstream.url, &store, &FLAGS).await;
    let addr = gateway.url.trim_start_matches("http://").to_owned();

    let mut headers = TcpStream::connect(&addr).await.unwrap();
    headers
        .write_all(b"POST /charges HTTP/1.1\r\nhost: gateway\r\nauthorization: Bearer a\r\n")
        .await
        .unwrap();
    let ended = ended_within(&mut headers, Duration::from_secs(5)).await;
    assert!(
        ended.is_some(),
        "a head that never ends is cut off after --header-timeout"
    );

    let mut body = TcpStream::connect(&addr).await.unwrap();
    body.write_all(
        b"POST /charges HTTP/1.1\r\nhost: gateway\r\nauthorization: Bearer a\r\n\
          idempotency-key: slow-body\r\ncontent-length: 100\r\n\r\n{\"amount\":",
    )
    .await
    .unwrap();
    let ended = ended_within(&mut body, Duration::from_secs(5)).await;
    assert!(
        ended
            .as_deref()
            .is_some_and(|answer| answer.is_empty() || answer.starts_with("HTTP/1.1 400")),
        "a body that stops arriving fails its request after --body-timeout: {ended:?}"
    );
    assert_eq!(
        upstream.executions("/charges"),
        0,
        "nothing half-sent was forwarded"
    );
    let whole = post(
        &format!("{}/charges", gateway.url),
        &[
            ("authorization", "Bearer a"),
            ("idempotency-key", "slow-body"),
        ],
        b"{\"amount\":1}",
    )
    .await;
    assert_eq!(
        whole.status, 201,
        "the key was never claimed by the broken request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_idle_connections_hold_at_most_the_cap() {
    let upstream = Upstream::start().await;
    let store = Store::sqlite().await;
    let gateway = Gateway::start(&upstream.url, &store, &FLAGS).await;
    let addr = gateway.url.trim_start_matches("http://").to_owned();
    let before = descriptors(gateway.pid());
    let mut idle = Vec::new();
    for _ in 0..200 {
        let mut socket = TcpStream::connect(&addr).await.unwrap();
        socket.write_all(b"POST / HTTP/1.1\r\n").await.unwrap();
        idle.push(socket);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = descriptors(gateway.pid()).saturating_sub(before);
    assert!(
        held <= 16 + 4,
        "200 idle clients hold {held} descriptors; the cap is 16 connections"
    );
    drop(idle);
    let answer = post(
        &format!("{}/charges", gateway.url),
        &[("authorization", "Bearer a"), ("idempotency-key", "after")],
        b"{}",
    )
    .await;
    assert_eq!(answer.status, 201, "served once the idle clients are gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_grow_the_key_table_past_its_cap() {
    let upstream = Upstream::start().await;
    let store = Store::sqlite().await;
    let gateway = Gateway::start(&upstream.url, &store, &["--max-keys-per-scope", "2"]).await;
    let url = format!("{}/charges", gateway.url);
    let send = |who: &'static str, key: &'static str| {
        let url = url.clone();
        async move {
            post(
                &url,
                &[("authorization", who), ("idempotency-key", key)],
                b"{}",
            )
            .await
        }
    };
    assert_eq!(send("Bearer a", "k-1").await.status, 201);
    assert_eq!(send("Bearer a", "k-2").await.status, 201);
    let over = send("Bearer a", "k-3").await;
    assert_eq!(over.status, 429, "{}", String::from_utf8_lossy(&over.body));
    assert!(
        over.json()["type"]
            .as_str()
            .unwrap()
            .ends_with("#too-many-keys")
    );
    assert!(
        send("Bearer a", "k-1").await.replayed,
        "its stored keys still replay"
    );
    assert_eq!(
        send("Bearer b", "k-3").await.status,
        201,
        "another client's cap is its own"
    );
    assert_eq!(upstream.executions("/charges"), 3);
}
