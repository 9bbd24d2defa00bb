//! Headless Chromium driven through chromedriver with the W3C WebDriver protocol: the few
//! commands the console's stories need, over plain HTTP.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

/// The key under which WebDriver names an element.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long any wait lasts before the story fails: generous, for a loaded machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// One Chromium, with a profile of its own, under its own chromedriver.
pub struct Browser {
    http: reqwest::Client,
    session: String,
    driver: Child,
    _profile: tempfile::TempDir,
}

/// A free port on loopback, for a server about to start.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

impl Browser {
    /// Starts chromedriver and, through it, a headless Chromium (Debian's `chromium` and
    /// `chromium-driver`: scripts/services.sh's ensure_chromium installs them).
    pub async fn start() -> Self {
        for program in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
            assert!(
                std::path::Path::new(program).exists(),
                "{program} is missing: run `source scripts/services.sh && ensure_chromium`"
            );
        }
        let port = free_port();
        let driver = Command::new("/usr/bin/chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let profile = tempfile::tempdir().unwrap();
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + PATIENCE;
        loop {
            let ready = match http.get(format!("{base}/status")).send().await {
                Ok(response) => response.json::<Value>().await.ok(),
                Err(_) => None,
            };
            if ready.is_some_and(|status| status["value"]["ready"] == true) {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Without these, Chromium on a machine with no internet stalls on its own fetches.
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,1400",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args},
        }}});
        let created: Value = http
            .post(format!("{base}/session"))
            .json(&capabilities)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("chromedriver made no session: {created}"))
            .to_owned();
        Self {
            http,
            session: format!("{base}/session/{session}"),
            driver,
            _profile: profile,
        }
    }

    /// Sends one command; the answer's `value`, or the error WebDriver named.
    async fn command(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> Result<Value, String> {
        let request = self.http.request(method, format!("{}{path}", self.session));
        let request = if body.is_null() {
            request
        } else {
            request.json(&body)
        };
        let answer: Value = request
            .send()
            .await
            .map_err(|err| err.to_string())?
            .json()
            .await
            .map_err(|err| err.to_string())?;
        match answer["value"].get("error") {
            Some(error) => Err(format!("{error}: {}", answer["value"]["message"])),
            None => Ok(answer["value"].clone()),
        }
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value, String> {
        self.command(reqwest::Method::POST, path, body).await
    }

    /// Opens `url` and waits for it to load.
    pub async fn goto(&self, url: &str) {
        self.post("/url", json!({"url": url})).await.unwrap();
    }

    /// The address shown now.
    pub async fn url(&self) -> String {
        let url = self
            .command(reqwest::Method::GET, "/url", Value::Null)
            .await;
        url.unwrap().as_str().unwrap_or_default().to_owned()
    }

    /// The elements `css` selects now.
    pub async fn all(&self, css: &str) -> Vec<String> {
        let found = self
            .post("/elements", json!({"using": "css selector", "value": css}))
            .await
            .unwrap();
        found
            .as_array()
            .unwrap()
            .iter()
            .map(|element| element[ELEMENT].as_str().unwrap().to_owned())
            .collect()
    }

    /// The text of the first element `css` selects, or `None` while there is none.
    pub async fn text(&self, css: &str) -> Option<String> {
        let element = self.all(css).await.into_iter().next()?;
        // The page may replace the element between the two commands: read again then.
        let text = self
            .command(
                reqwest::Method::GET,
                &format!("/element/{element}/text"),
                Value::Null,
            )
            .await
            .ok()?;
        Some(text.as_str().unwrap_or_default().to_owned())
    }

    /// Waits until `probe` finds something (30 s at most), and returns it; `what` names what
    /// is awaited.
    async fn until<T>(&self, what: &str, probe: impl AsyncFn() -> Option<T>) -> T {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(found) = probe().await {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "never {what} on {}",
                self.url().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the first element `css` selects has a text that `wanted` takes, and
    /// returns that text.
    pub async fn until_text(&self, css: &str, wanted: impl Fn(&str) -> bool) -> String {
        let what = format!("the text awaited in {css}");
        self.until(&what, async || {
            self.text(css).await.filter(|text| wanted(text))
        })
        .await
    }

    /// Waits until the first element `css` selects reads `text` exactly.
    pub async fn until_shows(&self, css: &str, text: &str) {
        let what = format!("{text:?} in {css}");
        self.until(&what, async || {
            self.text(css).await.filter(|shown| shown.trim() == text)
        })
        .await;
    }

    /// Types `text` into the field `css` selects. The figures refresh themselves, and an
    /// element found just before a refresh is gone by the time it is typed into ("stale"):
    /// then it is found again.
    pub async fn type_into(&self, css: &str, text: &str) {
        self.until(&format!("{text:?} typed into {css}"), async || {
            let element = self.all(css).await.into_iter().next()?;
            self.post(&format!("/element/{element}/clear"), json!({}))
                .await
                .ok()?;
            self.post(&format!("/element/{element}/value"), json!({"text": text}))
                .await
                .ok()
        })
        .await;
    }

    /// Clicks what `css` selects (a form's button: the form is sent, and the click returns
    /// once the next page has loaded); found again when a refresh replaced it first.
    pub async fn click(&self, css: &str) {
        self.until(&format!("a click on {css}"), async || {
            let element = self.all(css).await.into_iter().next()?;
            self.post(&format!("/element/{element}/click"), json!({}))
                .await
                .ok()
        })
        .await;
    }

    /// Clicks the button `css` selects, then waits until `shown_in` says `says`, and returns
    /// all it says.
    pub async fn press(&self, css: &str, shown_in: &str, says: &str) -> String {
        self.click(css).await;
        self.until_text(shown_in, |text| text.contains(says)).await
    }

    /// The window as a PNG.
    pub async fn screenshot(&self) -> Vec<u8> {
        self.png("/screenshot").await.unwrap()
    }

    /// The first element `css` selects, alone, as a PNG (scrolled into view first); found
    /// again when a refresh replaced it first.
    pub async fn element_screenshot(&self, css: &str) -> Vec<u8> {
        self.until(&format!("a picture of {css}"), async || {
            let element = self.all(css).await.into_iter().next()?;
            self.png(&format!("/element/{element}/screenshot"))
                .await
                .ok()
        })
        .await
    }

    async fn png(&self, path: &str) -> Result<Vec<u8>, String> {
        let shot = self
            .command(reqwest::Method::GET, path, Value::Null)
            .await?;
        base64::engine::general_purpose::STANDARD
            .decode(shot.as_str().unwrap_or_default())
            .map_err(|err| err.to_string())
    }

    /// The attribute `name` of the first element `css` selects, waited for; found again when a
    /// refresh replaced the element between finding it and reading it.
    pub async fn until_attribute(&self, css: &str, name: &str) -> String {
        self.until(&format!("the attribute {name} of {css}"), async || {
            let element = self.all(css).await.into_iter().next()?;
            let path = format!("/element/{element}/attribute/{name}");
            let value = self.command(reqwest::Method::GET, &path, Value::Null).await;
            value.ok()?.as_str().map(str::to_owned)
        })
        .await
    }

    /// Closes Chromium, then stops chromedriver.
    pub async fn quit(mut self) {
        let _ = self.command(reqwest::Method::DELETE, "", Value::Null).await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    /// A story that failed leaves no browser behind: Chromium outlives a killed chromedriver,
    /// so the session is ended first, with a plain blocking request (no runtime in a drop).
    fn drop(&mut self) {
        use std::io::{Read as _, Write as _};
        if let Some((host, path)) = self
            .session
            .strip_prefix("http://")
            .and_then(|rest| rest.split_once('/'))
            && let Ok(mut stream) = std::net::TcpStream::connect(host)
        {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let request = format!(
                "DELETE /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\
                 Connection: close\r\n\r\n"
            );
            let _ = stream.write_all(request.as_bytes());
            let _ = stream.read_to_end(&mut Vec::new());
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
