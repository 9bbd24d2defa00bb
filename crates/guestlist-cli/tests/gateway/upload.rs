//! A body over the limit gets its 413 read by the client, as an ordinary client uploads it:
//! Python's `requests` and curl send the whole body before they read the answer, and a gateway
//! that answers and closes mid-upload gives them a connection reset instead of the 413.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{Gateways, Store, Upstream};

/// The upload: well over `--max-body`, within what the gateway drains.
const UPLOAD: usize = 4 << 20;
/// Written a chunk at a time with a pause between, as over a real network: the gateway's answer
/// and its close come while the client is still writing.
const CHUNK: usize = 64 << 10;

/// A gateway on SQLite that takes bodies up to 1 KiB; the store lives as long as the gateway.
async fn gateway_with_a_small_limit() -> (Upstream, Gateways, Store) {
    let store = Store::sqlite().await;
    let upstream = Upstream::start().await;
    let gateways = Gateways::start(&upstream.url, &store, &["--max-body", "1KiB"]).await;
    (upstream, gateways, store)
}

/// Connects to the first of `gateways` and sends the head of Alice's `POST /payments` with
/// `key`, then `headers` (each line ending in CRLF).
async fn send_head(gateways: &Gateways, key: &str, headers: &str) -> TcpStream {
    let url = gateways.everywhere("")[0].clone();
    let addr = url.strip_prefix("http://").expect("an http URL");
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /payments HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer alice\r\n\
         Idempotency-Key: {key}\r\n{headers}\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// Writes `total` bytes of body, `frame` wrapping each chunk; every write must succeed, as it
/// must for a client that reads only after it has sent everything.
async fn upload(stream: &mut TcpStream, total: usize, frame: impl Fn(&[u8]) -> Vec<u8>) {
    let chunk = vec![b'x'; CHUNK];
    let mut sent = 0;
    while sent < total {
        let n = CHUNK.min(total - sent);
        stream
            .write_all(&frame(&chunk[..n]))
            .await
            .unwrap_or_else(|err| {
                panic!("the upload broke off after {sent} bytes ({err}): the client never reads the 413")
            });
        sent += n;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Reads the answer's head (status line and headers).
async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    let read = async {
        while !head.ends_with(b"\r\n\r\n") {
            match stream.read(&mut byte).await {
                Ok(0) => panic!(
                    "the gateway closed before answering: {:?}",
                    String::from_utf8_lossy(&head)
                ),
                Ok(_) => head.push(byte[0]),
                Err(err) => panic!(
                    "reading the answer failed ({err}): the client sees a reset, not the 413"
                ),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("the gateway answers");
    String::from_utf8(head).unwrap()
}

pub async fn an_oversize_upload_reads_its_413_not_a_reset() {
    let (upstream, gateways, _store) = gateway_with_a_small_limit().await;
    // requests.post(url, data=big, headers={"Idempotency-Key": …}): a Content-Length, no Expect.
    let headers = format!("Content-Type: application/octet-stream\r\nContent-Length: {UPLOAD}\r\n");
    let mut stream = send_head(&gateways, "k-big", &headers).await;
    upload(&mut stream, UPLOAD, <[u8]>::to_vec).await;
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("application/problem+json"),
        "{head}"
    );
    assert_eq!(
        upstream.executions("/payments"),
        0,
        "an oversize body reaches nothing"
    );
}

pub async fn an_oversize_chunked_upload_reads_its_413_not_a_reset() {
    let (upstream, gateways, _store) = gateway_with_a_small_limit().await;
    // requests.post(url, data=generator()): chunked, no length to refuse it by; the gateway
    // finds it too large while reading.
    let mut stream = send_head(&gateways, "k-chunked", "Transfer-Encoding: chunked\r\n").await;
    upload(&mut stream, UPLOAD, |chunk| {
        let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
        framed.extend_from_slice(chunk);
        framed.extend_from_slice(b"\r\n");
        framed
    })
    .await;
    stream.write_all(b"0\r\n\r\n").await.unwrap();
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert_eq!(upstream.executions("/payments"), 0);
}

pub async fn a_client_that_expects_100_continue_gets_the_413_and_sends_nothing() {
    let (upstream, gateways, _store) = gateway_with_a_small_limit().await;
    // curl -T big-file: it asks first, and sends the body only after "100 Continue".
    let headers = format!("Content-Length: {UPLOAD}\r\nExpect: 100-continue\r\n");
    let mut stream = send_head(&gateways, "k-expect", &headers).await;
    let head = read_head(&mut stream).await;
    assert!(
        head.starts_with("HTTP/1.1 413"),
        "the final answer straight away, no 100 Continue: {head}"
    );
    assert_eq!(upstream.executions("/payments"), 0);
}
