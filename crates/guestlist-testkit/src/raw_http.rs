//! An HTTP/1.1 client on a bare socket, for tests that hang up at a moment of their choosing.

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Sends `POST path` to `addr` (`host:port`) with `headers` and a `Content-Length` of the whole
/// `body`, but only its first `sent` bytes; returns the open connection. Drop it to hang up.
pub async fn post_partly(
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    sent: usize,
) -> TcpStream {
    let mut head = format!("POST {path} HTTP/1.1\r\nhost: {addr}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    let mut stream = TcpStream::connect(addr)
        .await
        .unwrap_or_else(|err| panic!("connect to {addr}: {err}"));
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
        .write_all(&body[..sent.min(body.len())])
        .await
        .unwrap();
    stream.flush().await.unwrap();
    stream
}
