//! The API on a real socket, and a client that says what it sends.

use axum::Router;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use tokio::task::JoinHandle;

/// The router served on a loopback port for as long as this lives.
pub struct Server {
    pub base: String,
    task: JoinHandle<()>,
}

impl Server {
    pub async fn start(router: Router) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        Self { base, task }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A response, read whole.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn replayed(&self) -> bool {
        self.headers
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true")
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The problem's `type`, for an `application/problem+json` answer.
    pub fn problem(&self) -> Option<String> {
        if self.header("content-type") != Some("application/problem+json") {
            return None;
        }
        let problem: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        Some(problem["type"].as_str()?.rsplit('#').next()?.to_owned())
    }
}

/// A `POST /payments` with its key, credentials, body and extra headers.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: reqwest::Method,
    pub path: String,
    pub key_header: String,
    pub key: Option<String>,
    pub authorization: Option<String>,
    pub body: Vec<u8>,
    pub headers: Vec<(String, String)>,
}

impl Call {
    /// A payment of 100 by alice with `key`.
    pub fn new(key: &str) -> Self {
        Self {
            method: reqwest::Method::POST,
            path: "/payments".to_owned(),
            key_header: "idempotency-key".to_owned(),
            key: Some(key.to_owned()),
            authorization: Some("Bearer alice".to_owned()),
            body: br#"{"amount":100}"#.to_vec(),
            headers: Vec::new(),
        }
    }

    pub fn body(mut self, body: &[u8]) -> Self {
        self.body = body.to_vec();
        self
    }

    pub fn by(mut self, authorization: Option<&str>) -> Self {
        self.authorization = authorization.map(str::to_owned);
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn method(mut self, method: reqwest::Method) -> Self {
        self.method = method;
        self
    }

    pub fn path(mut self, path: &str) -> Self {
        self.path = path.to_owned();
        self
    }

    pub fn key_header(mut self, name: &str) -> Self {
        self.key_header = name.to_owned();
        self
    }

    pub fn raw_key(mut self, key: Option<&str>) -> Self {
        self.key = key.map(str::to_owned);
        self
    }

    pub async fn send(&self, base: &str) -> Answer {
        self.try_send(base).await.expect("the server answers")
    }

    /// [`Call::send`] to a server that may be gone (killed mid-request).
    pub async fn try_send(&self, base: &str) -> Result<Answer, reqwest::Error> {
        let mut request = reqwest::Client::new()
            .request(self.method.clone(), format!("{base}{}", self.path))
            .body(self.body.clone());
        if let Some(key) = &self.key {
            request = request.header(self.key_header.as_str(), key);
        }
        if let Some(authorization) = &self.authorization {
            request = request.header("authorization", authorization);
        }
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let response = request.send().await?;
        Ok(Answer {
            status: response.status(),
            headers: response.headers().clone(),
            body: response.bytes().await?.to_vec(),
        })
    }
}
