//! Bearer tokens: each covers some agents or all. With none configured the
//! server is open, and so only listens on loopback.

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use recall_actors::settings::ServerSettings;

use super::error::ApiError;

/// What a request may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    All,
    Agents(Arc<HashSet<String>>),
}

impl Access {
    /// `403` unless this access covers `agent_id`.
    pub fn allow(&self, agent_id: &str) -> Result<(), ApiError> {
        match self {
            Access::All => Ok(()),
            Access::Agents(set) if set.contains(agent_id) => Ok(()),
            Access::Agents(_) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("this token does not cover agent {agent_id:?}"),
            )),
        }
    }

    /// `403` unless this access covers every agent (operations that span
    /// agents, such as running rollups).
    pub fn require_all(&self) -> Result<(), ApiError> {
        match self {
            Access::All => Ok(()),
            Access::Agents(_) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "this operation spans every agent; it needs a token for all of them",
            )),
        }
    }

    pub fn covers(&self, agent_id: &str) -> bool {
        self.allow(agent_id).is_ok()
    }
}

/// The configured tokens.
#[derive(Clone, Default)]
pub struct Auth {
    grants: Arc<Vec<(String, Access)>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("tokens", &self.grants.len())
            .finish()
    }
}

impl Auth {
    pub fn from_settings(s: &ServerSettings) -> Auth {
        let mut grants = Vec::new();
        if !s.token.is_empty() {
            grants.push((s.token.clone(), Access::All));
        }
        for g in &s.tokens {
            let access = if g.agents.iter().any(|a| a == "*") {
                Access::All
            } else {
                Access::Agents(Arc::new(g.agents.iter().cloned().collect()))
            };
            grants.push((g.token.clone(), access));
        }
        Auth {
            grants: Arc::new(grants),
        }
    }

    /// No token configured: every request is allowed.
    pub fn is_open(&self) -> bool {
        self.grants.is_empty()
    }

    /// The access the `Authorization` header grants.
    pub fn check(&self, authorization: Option<&str>) -> Result<Access, ApiError> {
        if self.is_open() {
            return Ok(Access::All);
        }
        let unauthorized = |m: &str| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", m);
        let Some(value) = authorization else {
            return Err(unauthorized("missing Authorization: Bearer <token>"));
        };
        let Some(token) = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
        else {
            return Err(unauthorized("expected Authorization: Bearer <token>"));
        };
        // Every grant is compared, in constant time each, so the time taken
        // does not tell which token came close.
        let mut found = None;
        for (t, access) in self.grants.iter() {
            if constant_time_eq(t.as_bytes(), token.trim().as_bytes()) && found.is_none() {
                found = Some(access.clone());
            }
        }
        found.ok_or_else(|| unauthorized("invalid token"))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Middleware: checks the token and puts the request's [`Access`] in its
/// extensions.
pub async fn require_token(
    State(auth): State<Auth>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let access = auth.check(header)?;
    req.extensions_mut().insert(access);
    Ok(next.run(req).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use recall_actors::settings::TokenGrant;

    #[test]
    fn tokens_grant_their_agents() {
        let s = ServerSettings {
            token: "root".into(),
            tokens: vec![TokenGrant {
                token: "k".into(),
                agents: vec!["kairix".into()],
            }],
            ..ServerSettings::default()
        };
        let auth = Auth::from_settings(&s);
        assert_eq!(auth.check(Some("Bearer root")).unwrap(), Access::All);
        let k = auth.check(Some("Bearer k")).unwrap();
        assert!(k.covers("kairix") && !k.covers("other"));
        assert_eq!(auth.check(Some("Bearer nope")).unwrap_err().status, 401);
        assert_eq!(auth.check(None).unwrap_err().status, 401);
        assert_eq!(auth.check(Some("root")).unwrap_err().status, 401);
        assert!(Auth::default().is_open());
    }
}
