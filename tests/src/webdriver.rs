//! Just enough W3C WebDriver to click through a page in headless Chromium: chromedriver (Debian's
//! `chromium-driver`) started on a free port, one session, elements found by CSS selector with
//! a bounded wait, clicks, typing, dialogs, attributes, the page's source and a screenshot.
//! Every call is bounded; a failure says which call.

use crate::fleetd_proc::free_port;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// The W3C key an element reference is returned under.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// The chromedriver on `PATH` (`CHROMEDRIVER` overrides).
pub fn chromedriver() -> Option<PathBuf> {
    if let Some(c) = std::env::var_os("CHROMEDRIVER").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(c));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("chromedriver"))
        .find(|p| p.is_file())
}

pub struct Browser {
    _driver: tokio::process::Child,
    base: String,
    session: String,
    http: reqwest::Client,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session on it.
    pub async fn start(chromium: &std::path::Path, profile: &std::path::Path) -> Browser {
        let driver_bin = chromedriver()
            .unwrap_or_else(|| panic!("no chromedriver: apt-get install chromium-driver"));
        let port = free_port();
        let driver = tokio::process::Command::new(driver_bin)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting chromedriver: {e}"));
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        for _ in 0..100 {
            if http
                .get(format!("{base}/status"))
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let caps = json!({
            "capabilities": { "alwaysMatch": {
                "browserName": "chrome",
                // A dialog stays open until the test answers it.
                "unhandledPromptBehavior": "ignore",
                "goog:chromeOptions": {
                    "binary": chromium,
                    "args": ["--headless", "--no-sandbox", "--disable-gpu",
                             "--disable-dev-shm-usage", "--no-first-run",
                             format!("--user-data-dir={}", profile.display()),
                             "--window-size=1400,1000"],
                }
            }}
        });
        let mut b = Browser {
            _driver: driver,
            base,
            session: String::new(),
            http,
        };
        let v = b.call(reqwest::Method::POST, "/session", caps).await;
        b.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {v}"))
            .to_string();
        b
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .http
            .request(method.clone(), &url)
            .timeout(Duration::from_secs(60));
        if method != reqwest::Method::GET && method != reqwest::Method::DELETE {
            req = req.json(&body);
        }
        let r = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"));
        let v: Value = r.json().await.unwrap_or(Value::Null);
        v["value"].clone()
    }

    fn path(&self, tail: &str) -> String {
        format!("/session/{}{tail}", self.session)
    }

    pub async fn goto(&self, url: &str) {
        self.call(
            reqwest::Method::POST,
            &self.path("/url"),
            json!({ "url": url }),
        )
        .await;
    }

    /// The first element matching `css`, waiting up to `secs` for one.
    pub async fn find(&self, css: &str, secs: u64) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let v = self
                .call(
                    reqwest::Method::POST,
                    &self.path("/element"),
                    json!({ "using": "css selector", "value": css }),
                )
                .await;
            if let Some(id) = v[ELEMENT].as_str() {
                return id.to_string();
            }
            if tokio::time::Instant::now() > deadline {
                let src = self.source().await;
                panic!("no element {css} within {secs} s; the page:\n{src}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// How many elements match `css` now.
    pub async fn count(&self, css: &str) -> usize {
        let v = self
            .call(
                reqwest::Method::POST,
                &self.path("/elements"),
                json!({ "using": "css selector", "value": css }),
            )
            .await;
        v.as_array().map_or(0, Vec::len)
    }

    pub async fn click(&self, element: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            &self.path(&format!("/element/{element}/click")),
            json!({}),
        )
        .await
    }

    /// Finds `css` and clicks it, again if the page redrew it in between (a stale element).
    pub async fn click_on(&self, css: &str, secs: u64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let e = self.find(css, secs).await;
            let v = self.click(&e).await;
            match v["error"].as_str() {
                None => return,
                Some(err) if tokio::time::Instant::now() > deadline => {
                    panic!("clicking {css}: {err}: {v}")
                }
                Some(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    pub async fn type_into(&self, element: &str, text: &str) {
        self.call(
            reqwest::Method::POST,
            &self.path(&format!("/element/{element}/value")),
            json!({ "text": text }),
        )
        .await;
    }

    /// An element's current `value` property (what is typed in an input).
    pub async fn value(&self, element: &str) -> String {
        self.call(
            reqwest::Method::GET,
            &self.path(&format!("/element/{element}/property/value")),
            Value::Null,
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// Accepts the open `confirm()`/`alert()`, waiting up to 10 s for one; its text.
    pub async fn accept_dialog(&self) -> String {
        for _ in 0..50 {
            let text = self
                .call(reqwest::Method::GET, &self.path("/alert/text"), Value::Null)
                .await;
            if let Some(t) = text.as_str() {
                self.call(
                    reqwest::Method::POST,
                    &self.path("/alert/accept"),
                    json!({}),
                )
                .await;
                return t.to_string();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("no dialog opened within 10 s")
    }

    /// An element's attribute `name` (empty when it has none).
    pub async fn attr(&self, element: &str, name: &str) -> String {
        self.call(
            reqwest::Method::GET,
            &self.path(&format!("/element/{element}/attribute/{name}")),
            Value::Null,
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// The window as a PNG, written to `png`.
    pub async fn screenshot(&self, png: &std::path::Path) {
        use base64::Engine as _;
        let v = self
            .call(reqwest::Method::GET, &self.path("/screenshot"), Value::Null)
            .await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("the screenshot is not base64: {e}"));
        std::fs::write(png, bytes).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
    }

    pub async fn source(&self) -> String {
        self.call(reqwest::Method::GET, &self.path("/source"), Value::Null)
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub async fn quit(self) {
        self.call(reqwest::Method::DELETE, &self.path(""), Value::Null)
            .await;
    }
}
