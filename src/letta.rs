//! `LettaMirror`: the mirror port over a Letta server's REST API:
//! archival passages under `/v1/agents/{agent}/archival-memory`, core
//! blocks under `/v1/agents/{agent}/core-memory/blocks`. Retries are the
//! Mirror actor's business.

use std::time::Duration;

use recall_actors::mirror::{BlockValue, BoxFuture, Listed, MirrorError, MirrorPort};
use recall_actors::port::error_chain;
use recall_actors::settings::LettaSettings;
use reqwest::{Method, StatusCode, Url};
use serde::{Deserialize, Serialize};

/// Longest error body kept in an error, in characters.
const MAX_BODY: usize = 512;

#[derive(Debug, Clone)]
pub struct LettaMirror {
    client: reqwest::Client,
    base: Url,
    token: Option<String>,
}

#[derive(Serialize)]
struct NewPassage<'a> {
    text: &'a str,
}

#[derive(Deserialize)]
struct Stored {
    id: String,
}

#[derive(Deserialize)]
struct ListedPassage {
    id: String,
    #[serde(default)]
    text: String,
}

/// Passages asked for per page when listing an agent's.
const PAGE: usize = 100;

#[derive(Deserialize)]
struct ListedBlock {
    label: Option<String>,
}

#[derive(Serialize)]
struct BlockUpdate<'a> {
    value: &'a str,
    limit: usize,
}

#[derive(Serialize)]
struct NewBlock<'a> {
    label: &'a str,
    value: &'a str,
    limit: usize,
}

/// Why the mirror's client could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LettaConfigError {
    #[error("letta.base_url {url:?} is not a URL: {reason}")]
    BaseUrl { url: String, reason: String },
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

impl LettaMirror {
    /// A client for `settings`, with the token (if any) already read by the
    /// caller from the variable the settings name.
    pub fn new(settings: &LettaSettings, token: Option<String>) -> Result<Self, LettaConfigError> {
        let url = settings.base_url.trim();
        let base = Url::parse(url).map_err(|e| LettaConfigError::BaseUrl {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
        if base.cannot_be_a_base() {
            return Err(LettaConfigError::BaseUrl {
                url: url.to_string(),
                reason: "it cannot hold a path".into(),
            });
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(settings.timeout_secs))
            .build()
            .map_err(|e| LettaConfigError::Client(e.to_string()))?;
        Ok(LettaMirror {
            client,
            base,
            token: token.filter(|t| !t.is_empty()),
        })
    }

    /// `{base}/v1/{segments…}`, each segment escaped.
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().push("v1").extend(segments);
        }
        url
    }

    /// Sends a request; a success's body, or the failure as the port's
    /// error (`404` is the caller's to read: `Ok(None)`).
    async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<serde_json::Value>,
    ) -> Result<Option<String>, MirrorError> {
        let mut req = self.client.request(method, url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = &body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| MirrorError::Unreachable(error_chain(&e)))?;
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| crate::llm::parse_retry_after(v, chrono::Utc::now()));
        let text = resp
            .text()
            .await
            .map_err(|e| MirrorError::Unreachable(error_chain(&e)))?;
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(MirrorError::Status {
                status: status.as_u16(),
                body: recall_actors::model::truncate_chars(text.trim(), MAX_BODY).to_string(),
                retry_after,
            });
        }
        Ok(Some(text))
    }

    /// Like [`LettaMirror::send`], where a `404` is an error too (`what`
    /// is not there).
    async fn send_found(
        &self,
        method: Method,
        url: Url,
        body: Option<serde_json::Value>,
        what: &str,
    ) -> Result<String, MirrorError> {
        self.send(method, url, body)
            .await?
            .ok_or_else(|| MirrorError::Status {
                status: 404,
                body: format!("{what} not found"),
                retry_after: None,
            })
    }

    async fn put_passage_now(&self, remote: &str, text: &str) -> Result<Vec<String>, MirrorError> {
        let url = self.url(&["agents", remote, "archival-memory"]);
        let body = json(&NewPassage { text })?;
        let answer = self
            .send_found(
                Method::POST,
                url,
                Some(body),
                &format!("Letta agent {remote}"),
            )
            .await?;
        let stored: Vec<Stored> = parse(&answer)?;
        if stored.is_empty() {
            return Err(MirrorError::Malformed(
                "the passage insert answered no passage".into(),
            ));
        }
        Ok(stored.into_iter().map(|p| p.id).collect())
    }

    async fn delete_passage_now(&self, remote: &str, id: &str) -> Result<(), MirrorError> {
        let url = self.url(&["agents", remote, "archival-memory", id]);
        if self.send(Method::DELETE, url, None).await?.is_some() {
            return Ok(());
        }
        // A 404: the passage is gone already (what was asked) if the
        // agent is there; a missing agent (or a route the server does not
        // have) is an error, so the ledger keeps the passage's id.
        self.send_found(
            Method::GET,
            self.url(&["agents", remote]),
            None,
            &format!("Letta agent {remote}"),
        )
        .await
        .map(|_| ())
    }

    async fn list_passages_now(&self, remote: &str) -> Result<Vec<Listed>, MirrorError> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut url = self.url(&["agents", remote, "archival-memory"]);
            url.query_pairs_mut()
                .append_pair("limit", &PAGE.to_string())
                .append_pair("ascending", "true");
            if let Some(a) = &after {
                url.query_pairs_mut().append_pair("after", a);
            }
            let page: Vec<ListedPassage> = parse(
                &self
                    .send_found(Method::GET, url, None, &format!("Letta agent {remote}"))
                    .await?,
            )?;
            let full = page.len() >= PAGE;
            let next = page.last().map(|p| p.id.clone());
            // (A server that ignored the cursor would answer the same
            // page again: the listing stops rather than go round.)
            if next.is_some() && next == after {
                return Ok(all);
            }
            after = next;
            all.extend(page.into_iter().map(|p| Listed {
                id: p.id,
                text: p.text,
            }));
            if !full {
                return Ok(all);
            }
        }
    }

    async fn set_block_now(&self, remote: &str, block: BlockValue<'_>) -> Result<(), MirrorError> {
        let agent = format!("Letta agent {remote}");
        // The agent's blocks first: Letta 0.10's update by label, asked
        // for a label the agent lacks, updates another of its blocks
        // instead of answering 404. A wrong agent id is then a 404 here,
        // before any block is made.
        let list = self.url(&["agents", remote, "core-memory", "blocks"]);
        let listed: Vec<ListedBlock> =
            parse(&self.send_found(Method::GET, list, None, &agent).await?)?;
        if listed
            .iter()
            .any(|b| b.label.as_deref() == Some(block.label))
        {
            let url = self.url(&["agents", remote, "core-memory", "blocks", block.label]);
            let update = json(&BlockUpdate {
                value: block.value,
                limit: block.limit.max(block.value.chars().count()),
            })?;
            self.send_found(Method::PATCH, url, Some(update), &agent)
                .await?;
            return Ok(());
        }
        let new = json(&NewBlock {
            label: block.label,
            value: block.value,
            limit: block.limit.max(block.value.chars().count()),
        })?;
        let made: Stored = parse(
            &self
                .send_found(Method::POST, self.url(&["blocks", ""]), Some(new), "blocks")
                .await?,
        )?;
        let attach = self.url(&[
            "agents",
            remote,
            "core-memory",
            "blocks",
            "attach",
            &made.id,
        ]);
        self.send_found(Method::PATCH, attach, None, &agent).await?;
        Ok(())
    }
}

fn json<T: Serialize>(v: &T) -> Result<serde_json::Value, MirrorError> {
    serde_json::to_value(v).map_err(|e| MirrorError::Malformed(e.to_string()))
}

fn parse<T: serde::de::DeserializeOwned>(body: &str) -> Result<T, MirrorError> {
    serde_json::from_str(body).map_err(|e| {
        MirrorError::Malformed(format!(
            "{e}: {}",
            recall_actors::model::truncate_chars(body.trim(), MAX_BODY)
        ))
    })
}

impl MirrorPort for LettaMirror {
    fn name(&self) -> &'static str {
        "letta"
    }

    fn put_passage<'a>(
        &'a self,
        remote: &'a str,
        text: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, MirrorError>> {
        Box::pin(self.put_passage_now(remote, text))
    }

    fn list_passages<'a>(
        &'a self,
        remote: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Listed>, MirrorError>> {
        Box::pin(self.list_passages_now(remote))
    }

    fn delete_passage<'a>(
        &'a self,
        remote: &'a str,
        passage_id: &'a str,
    ) -> BoxFuture<'a, Result<(), MirrorError>> {
        Box::pin(self.delete_passage_now(remote, passage_id))
    }

    fn set_block<'a>(
        &'a self,
        remote: &'a str,
        block: BlockValue<'a>,
    ) -> BoxFuture<'a, Result<(), MirrorError>> {
        Box::pin(self.set_block_now(remote, block))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mirror(base: &str) -> LettaMirror {
        let s = LettaSettings {
            base_url: base.into(),
            ..LettaSettings::default()
        };
        LettaMirror::new(&s, Some(String::new())).unwrap()
    }

    #[test]
    fn paths_are_under_v1_with_each_segment_escaped() {
        let m = mirror("http://127.0.0.1:8283/");
        assert_eq!(
            m.url(&["agents", "agent-1", "archival-memory"]).as_str(),
            "http://127.0.0.1:8283/v1/agents/agent-1/archival-memory"
        );
        let m = mirror("http://h/letta");
        assert_eq!(
            m.url(&["agents", "a/b", "core-memory"]).as_str(),
            "http://h/letta/v1/agents/a%2Fb/core-memory"
        );
        assert!(m.token.is_none(), "an empty token sends no header");
    }

    #[test]
    fn a_base_url_that_is_no_url_is_a_typed_error() {
        let s = LettaSettings {
            base_url: "mailto:x@y".into(),
            ..LettaSettings::default()
        };
        assert!(matches!(
            LettaMirror::new(&s, None),
            Err(LettaConfigError::BaseUrl { .. })
        ));
    }
}
