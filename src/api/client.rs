//! A typed client for the `recall serve` API, used by the CLI.
//!
//! Each method is one endpoint: it takes the request types of
//! [`crate::api`] and returns the response type, so a field the server
//! renames is a decoding error here, not a silently empty table cell.

use recall_actors::model::FactRecord;
use recall_actors::rollup::RollupReport;
use recall_actors::store::ForgetReport;
use reqwest::{Method, RequestBuilder, Url};
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::*;
use crate::runtime::{ReplayProgress, ReplayReport, SessionStatus};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{url:?} is not a server URL (like http://127.0.0.1:7878)")]
    InvalidUrl { url: String },
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
    #[error("the answer from {url} is not what this client expects (another server version?)")]
    Decode {
        url: String,
        #[source]
        source: serde_json::Error,
    },
}

impl ClientError {
    /// Whether the server said "not found".
    pub fn is_not_found(&self) -> bool {
        matches!(self, ClientError::Api { status: 404, .. })
    }
}

/// Talks to one server.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    token: Option<String>,
}

impl Client {
    /// `base` like `http://127.0.0.1:7878`; `token` sent as a bearer token.
    pub fn new(base: &str, token: Option<String>) -> Result<Client, ClientError> {
        let invalid = || ClientError::InvalidUrl {
            url: base.to_string(),
        };
        let url = Url::parse(base).map_err(|_| invalid())?;
        if url.cannot_be_a_base() || !matches!(url.scheme(), "http" | "https") {
            return Err(invalid());
        }
        Ok(Client {
            http: reqwest::Client::new(),
            base: url,
            token: token.filter(|t| !t.is_empty()),
        })
    }

    /// A request to the path of these segments, each percent-encoded.
    fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("checked in new: the base URL has a path")
            .pop_if_empty()
            .extend(segments);
        let req = self.http.request(method, url);
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    async fn send(req: RequestBuilder) -> Result<(String, reqwest::Response), ClientError> {
        let (http, req) = req.build_split();
        let req = req.map_err(|source| ClientError::Transport {
            url: String::new(),
            source,
        })?;
        let url = req.url().to_string();
        let resp = http
            .execute(req)
            .await
            .map_err(|source| ClientError::Transport {
                url: url.clone(),
                source,
            })?;
        Ok((url, resp))
    }

    /// Sends and decodes the answer: `T` on success, the error body as
    /// [`ClientError::Api`] otherwise.
    async fn call<T: DeserializeOwned>(&self, req: RequestBuilder) -> Result<T, ClientError> {
        let (url, resp) = Self::send(req).await?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|source| ClientError::Transport {
                url: url.clone(),
                source,
            })?;
        if status.is_success() {
            return serde_json::from_slice(&body)
                .map_err(|source| ClientError::Decode { url, source });
        }
        Err(error_answer(url, status.as_u16(), &body))
    }

    pub async fn start_session(&self, body: &StartSession) -> Result<SessionStarted, ClientError> {
        self.call(self.request(Method::POST, &["v1", "sessions"]).json(body))
            .await
    }

    pub async fn sessions(&self, q: &ListSessions) -> Result<SessionList, ClientError> {
        self.call(self.request(Method::GET, &["v1", "sessions"]).query(q))
            .await
    }

    pub async fn session(&self, id: Uuid) -> Result<SessionStatus, ClientError> {
        let id = id.to_string();
        self.call(self.request(Method::GET, &["v1", "sessions", &id]))
            .await
    }

    pub async fn turns(&self, id: Uuid) -> Result<TurnList, ClientError> {
        let id = id.to_string();
        self.call(self.request(Method::GET, &["v1", "sessions", &id, "turns"]))
            .await
    }

    pub async fn record_turn(
        &self,
        connection_id: &str,
        turn: &TurnIn,
        options: TurnOptions,
    ) -> Result<TurnAck, ClientError> {
        let path = ["v1", "connections", connection_id, "turns"];
        self.call(self.request(Method::POST, &path).query(&options).json(turn))
            .await
    }

    pub async fn touch(&self, connection_id: &str) -> Result<Empty, ClientError> {
        let path = ["v1", "connections", connection_id, "touch"];
        self.call(self.request(Method::POST, &path)).await
    }

    pub async fn end_session(
        &self,
        connection_id: &str,
        body: &EndSession,
    ) -> Result<SessionEnded, ClientError> {
        let path = ["v1", "connections", connection_id, "end"];
        self.call(self.request(Method::POST, &path).json(body))
            .await
    }

    pub async fn blocks(&self, agent_id: &str) -> Result<BlockList, ClientError> {
        self.call(self.request(Method::GET, &["v1", "agents", agent_id, "blocks"]))
            .await
    }

    /// One block; the server checks the label (`invalid_label`).
    pub async fn block(
        &self,
        agent_id: &str,
        label: &str,
        q: &BlockParams,
    ) -> Result<Block, ClientError> {
        let path = ["v1", "agents", agent_id, "blocks", label];
        self.call(self.request(Method::GET, &path).query(q)).await
    }

    /// Sets a block; the server checks the label (`invalid_label`).
    pub async fn set_block(
        &self,
        agent_id: &str,
        label: &str,
        body: &BlockIn,
    ) -> Result<Block, ClientError> {
        let path = ["v1", "agents", agent_id, "blocks", label];
        self.call(self.request(Method::PUT, &path).json(body)).await
    }

    pub async fn summaries(
        &self,
        agent_id: &str,
        q: &SummaryParams,
    ) -> Result<SummaryList, ClientError> {
        let path = ["v1", "agents", agent_id, "summaries"];
        self.call(self.request(Method::GET, &path).query(q)).await
    }

    pub async fn summary(&self, id: Uuid) -> Result<SummaryView, ClientError> {
        let id = id.to_string();
        self.call(self.request(Method::GET, &["v1", "summaries", &id]))
            .await
    }

    pub async fn dead_letters(
        &self,
        agent_id: &str,
        q: &DeadLetterParams,
    ) -> Result<DeadLetterList, ClientError> {
        let path = ["v1", "agents", agent_id, "dead-letters"];
        self.call(self.request(Method::GET, &path).query(q)).await
    }

    pub async fn retry_dead_letter(&self, session_id: Uuid) -> Result<Requeued, ClientError> {
        let id = session_id.to_string();
        let path = ["v1", "dead-letters", &id, "retry"];
        self.call(self.request(Method::POST, &path)).await
    }

    pub async fn working_context(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<WorkingContext, ClientError> {
        let path = ["v1", "agents", agent_id, "users", user_id, "context"];
        self.call(self.request(Method::GET, &path)).await
    }

    pub async fn clear_context(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<ContextCleared, ClientError> {
        let path = ["v1", "agents", agent_id, "users", user_id, "context"];
        self.call(self.request(Method::DELETE, &path)).await
    }

    pub async fn context(&self, agent_id: &str, q: &ContextParams) -> Result<Context, ClientError> {
        let path = ["v1", "agents", agent_id, "context"];
        self.call(self.request(Method::GET, &path).query(q)).await
    }

    pub async fn facts(&self, agent_id: &str, q: &FactUser) -> Result<FactList, ClientError> {
        let path = ["v1", "agents", agent_id, "facts"];
        self.call(self.request(Method::GET, &path).query(q)).await
    }

    pub async fn patch_fact(
        &self,
        fact_id: Uuid,
        body: &FactPatch,
    ) -> Result<FactRecord, ClientError> {
        let id = fact_id.to_string();
        self.call(
            self.request(Method::PATCH, &["v1", "facts", &id])
                .json(body),
        )
        .await
    }

    pub async fn delete_fact(
        &self,
        fact_id: Uuid,
        q: &FactUser,
    ) -> Result<FactDeleted, ClientError> {
        let id = fact_id.to_string();
        self.call(self.request(Method::DELETE, &["v1", "facts", &id]).query(q))
            .await
    }

    pub async fn topics(&self, agent_id: &str, q: &TopicParams) -> Result<TopicList, ClientError> {
        let path = ["v1", "agents", agent_id, "topics"];
        self.call(self.request(Method::GET, &path).query(q)).await
    }

    pub async fn search(
        &self,
        agent_id: &str,
        q: &SearchParams,
    ) -> Result<SearchResults, ClientError> {
        let path = ["v1", "agents", agent_id, "search"];
        self.call(self.request(Method::GET, &path).query(q)).await
    }

    pub async fn run_rollups(&self) -> Result<RollupReport, ClientError> {
        self.call(self.request(Method::POST, &["v1", "rollups", "run"]))
            .await
    }

    pub async fn forget_user(
        &self,
        user_id: &str,
        q: &ForgetParams,
    ) -> Result<ForgetReport, ClientError> {
        let path = ["v1", "users", user_id];
        self.call(self.request(Method::DELETE, &path).query(q))
            .await
    }

    /// A replay, answered when done.
    pub async fn replay(
        &self,
        agent_id: &str,
        body: &ReplayIn,
    ) -> Result<ReplayReport, ClientError> {
        let path = ["v1", "agents", agent_id, "replay"];
        self.call(self.request(Method::POST, &path).json(body))
            .await
    }

    /// A replay streamed: `on_progress` after each session, then the
    /// report (an `error` line is an error).
    pub async fn replay_streamed(
        &self,
        agent_id: &str,
        body: &ReplayIn,
        mut on_progress: impl FnMut(ReplayProgress),
    ) -> Result<ReplayReport, ClientError> {
        let path = ["v1", "agents", agent_id, "replay"];
        let req = self
            .request(Method::POST, &path)
            .query(&ReplayOptions { stream: true })
            .json(body);
        let (url, mut resp) = Self::send(req).await?;
        let status = resp.status();
        let transport = |source| ClientError::Transport {
            url: url.clone(),
            source,
        };
        if !status.is_success() {
            let body = resp.bytes().await.map_err(transport)?;
            return Err(error_answer(url, status.as_u16(), &body));
        }
        let mut pending: Vec<u8> = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(transport)? {
            pending.extend_from_slice(&chunk);
            while let Some(i) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=i).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let line: ReplayLine =
                    serde_json::from_slice(&line).map_err(|source| ClientError::Decode {
                        url: url.clone(),
                        source,
                    })?;
                match line {
                    ReplayLine::Progress(p) => on_progress(p),
                    ReplayLine::Report { report } => return Ok(report),
                    ReplayLine::Error { error } => {
                        return Err(ClientError::Api {
                            status: status.as_u16(),
                            code: error.code,
                            message: error.message,
                        })
                    }
                }
            }
        }
        Err(ClientError::Unexpected {
            url,
            status: status.as_u16(),
            body: "the replay stream ended without a report".into(),
        })
    }
}

/// The error an answer other than 2xx stands for.
fn error_answer(url: String, status: u16, body: &[u8]) -> ClientError {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => ClientError::Api {
            status,
            code: e.error.code,
            message: e.error.message,
        },
        Err(_) => ClientError::Unexpected {
            url,
            status,
            body: String::from_utf8_lossy(body).into_owned(),
        },
    }
}
