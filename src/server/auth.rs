//! Bearer tokens: each covers some agents or all. With none configured the
//! server is open, and so only listens on loopback.

use std::collections::HashSet;
use std::hash::BuildHasher;
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
        // Every route that names an agent asks here first: an id no caller
        // could have stored is refused as such, before access is decided.
        recall_actors::model::validate_id("agent_id", agent_id)?;
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
    /// Each token with its keyed hash, made once.
    grants: Arc<Vec<(String, u64, Access)>>,
    /// A key of this process's own (`RandomState`): the hashes of a token
    /// sent and of the configured ones are compared first, so the time a
    /// check takes depends on the token sent, never on a configured
    /// token's length or bytes.
    keyed: std::collections::hash_map::RandomState,
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
        let keyed = std::collections::hash_map::RandomState::new();
        let grants = grants
            .into_iter()
            .map(|(t, access)| {
                let h = keyed.hash_one(t.as_bytes());
                (t, h, access)
            })
            .collect();
        Auth {
            grants: Arc::new(grants),
            keyed,
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
        // Every grant's keyed hash is compared with the sent token's: the
        // time taken tells neither which token came close nor how long
        // one is. Only a token whose hash matches is compared whole.
        let sent = token.trim().as_bytes();
        let h = self.keyed.hash_one(sent);
        let mut found = None;
        for (t, th, access) in self.grants.iter() {
            if *th == h && constant_time_eq(t.as_bytes(), sent) && found.is_none() {
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
        // a part of a token, or a token and more, is no token
        for near in ["Bearer roo", "Bearer rootroot", "Bearer ", "Bearer kk"] {
            assert_eq!(auth.check(Some(near)).unwrap_err().status, 401, "{near}");
        }
        assert_eq!(auth.check(Some("Bearer  root ")).unwrap(), Access::All);
        assert!(Auth::default().is_open());
    }
}
