//! A small client for the `recall serve` API, used by the `recall` CLI.

use reqwest::{Method, StatusCode};
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error body.
    #[error("{code}: {message} (HTTP {status})")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    #[error("cannot reach the recall server at {url}")]
    Transport {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("unexpected answer from {url} (HTTP {status}): {body}")]
    Unexpected {
        url: String,
        status: u16,
        body: String,
    },
}

/// Talks to one server.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    /// `base` like `http://127.0.0.1:7878`; `token` sent as a bearer token.
    pub fn new(base: &str, token: Option<String>) -> Client {
        Client {
            http: reqwest::Client::new(),
            base: base.trim_end_matches('/').to_string(),
            token: token.filter(|t| !t.is_empty()),
        }
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(String, reqwest::Response), ClientError> {
        let url = format!("{}{}", self.base, path);
        let mut req = self.http.request(method, &url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().await.map_err(|source| ClientError::Transport {
            url: url.clone(),
            source,
        })?;
        Ok((url, resp))
    }

    /// POSTs `body` and hands each line of a streamed JSON-lines answer to
    /// `on_line` as it arrives; an error answer is an error as usual.
    pub async fn post_lines(
        &self,
        path: &str,
        body: &Value,
        mut on_line: impl FnMut(Value),
    ) -> Result<(), ClientError> {
        let (url, mut resp) = self.send(Method::POST, path, Some(body)).await?;
        if !resp.status().is_success() {
            return Self::answer(url, resp).await.map(|_| ());
        }
        let mut pending: Vec<u8> = Vec::new();
        loop {
            let chunk = resp
                .chunk()
                .await
                .map_err(|source| ClientError::Transport {
                    url: url.clone(),
                    source,
                })?;
            let Some(chunk) = chunk else {
                break;
            };
            pending.extend_from_slice(&chunk);
            while let Some(i) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=i).collect();
                match serde_json::from_slice::<Value>(&line) {
                    Ok(v) => on_line(v),
                    Err(_) if line.iter().all(u8::is_ascii_whitespace) => {}
                    Err(_) => {
                        return Err(ClientError::Unexpected {
                            url,
                            status: 200,
                            body: String::from_utf8_lossy(&line).into_owned(),
                        })
                    }
                }
            }
        }
        Ok(())
    }

    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let (url, resp) = self.send(method, path, body).await?;
        Self::answer(url, resp).await
    }

    async fn answer(url: String, resp: reqwest::Response) -> Result<Value, ClientError> {
        let status = resp.status();
        let text = resp.text().await.map_err(|source| ClientError::Transport {
            url: url.clone(),
            source,
        })?;
        let parsed: Option<Value> = serde_json::from_str(&text).ok();
        if status.is_success() {
            return parsed.ok_or(ClientError::Unexpected {
                url,
                status: status.as_u16(),
                body: text,
            });
        }
        match parsed.as_ref().and_then(|v| v.get("error")) {
            Some(e) => Err(ClientError::Api {
                status: status.as_u16(),
                code: e["code"].as_str().unwrap_or("unknown").to_string(),
                message: e["message"].as_str().unwrap_or_default().to_string(),
            }),
            None => Err(ClientError::Unexpected {
                url,
                status: status.as_u16(),
                body: text,
            }),
        }
    }

    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.request(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.request(Method::POST, path, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.request(Method::PUT, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Result<Value, ClientError> {
        self.request(Method::DELETE, path, None).await
    }
}

/// Percent-encodes a path segment or query value.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Whether an error is the server saying "not found".
pub fn is_not_found(e: &ClientError) -> bool {
    matches!(e, ClientError::Api { status, .. } if *status == StatusCode::NOT_FOUND.as_u16())
}
