//! What keeps a web page from using the server: the `Host` a request
//! names and the `Origin` a browser puts on it.
//!
//! A page on any site can reach a server on the visitor's loopback
//! address: through DNS rebinding (its own name made to resolve to
//! 127.0.0.1, so its requests name its own host), and through WebSockets,
//! which browsers open to any address whatever the page's origin. Without
//! a token the server would grant such a page everything. So:
//!
//! - a request must name a loopback host (`localhost`, `*.localhost`,
//!   `127.x.x.x`, `[::1]`) or one of `server.allowed_hosts` — unless the
//!   server has a token and no `allowed_hosts` (the token is the guard
//!   then, and a reverse proxy may name any host): else `421`;
//! - a WebSocket upgrade or a request that changes something (any method
//!   but GET, HEAD and OPTIONS) carrying an `Origin` must carry one of
//!   `server.allowed_origins`: else `403`; so must every request to the
//!   MCP endpoint, `/mcp`. Requests without an `Origin` (servers,
//!   scripts, voice pipelines: not browsers) pass.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use recall_actors::settings::{split_host, ServerSettings};

use super::error::ApiError;

/// The hosts and origins a server answers.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    /// Whether the `Host` is checked at all.
    check_host: bool,
    /// `allowed_hosts`, lowercase, as (name, port if one is given).
    hosts: Arc<[(String, Option<u16>)]>,
    /// `allowed_origins`, lowercase, without a trailing slash.
    origins: Arc<[String]>,
}

impl Guard {
    /// From the settings; `open`: the server has no token.
    pub fn from_settings(s: &ServerSettings, open: bool) -> Guard {
        Guard {
            check_host: open || !s.allowed_hosts.is_empty(),
            hosts: s
                .allowed_hosts
                .iter()
                .filter_map(|h| {
                    let h = h.to_lowercase();
                    let (name, port) = split_host(&h)?;
                    Some((name.to_string(), port))
                })
                .collect(),
            origins: s
                .allowed_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_lowercase())
                .collect(),
        }
    }

    /// `Ok` when a request with this method and these headers may be
    /// served; `authority`: the host its target names, if any (what an
    /// HTTP/2 request has instead of a `Host`).
    pub fn check(
        &self,
        method: &Method,
        headers: &HeaderMap,
        authority: Option<&str>,
    ) -> Result<(), ApiError> {
        if self.check_host {
            // Every Host sent, and the target's own host if it names one,
            // must be allowed. (HTTP/1.1 and browsers always send a Host;
            // a request without any comes from no page.)
            let named = headers
                .get_all(header::HOST)
                .iter()
                .map(|h| h.to_str().unwrap_or(""))
                .chain(authority);
            for host in named {
                let host = host.trim().to_lowercase();
                if !self.host_allowed(&host) {
                    return Err(ApiError::new(
                        StatusCode::MISDIRECTED_REQUEST,
                        "host_not_allowed",
                        format!(
                            "this server does not answer for host {host:?}; add it to server.allowed_hosts if it is this server's name"
                        ),
                    ));
                }
            }
        }
        let changes = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
        let upgrade = headers
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
        if changes || upgrade {
            if let Some(origin) = headers.get(header::ORIGIN) {
                let origin = origin.to_str().unwrap_or("").trim().to_lowercase();
                let origin = origin.trim_end_matches('/');
                if !self.origins.iter().any(|o| o == origin) {
                    return Err(ApiError::new(
                        StatusCode::FORBIDDEN,
                        "origin_not_allowed",
                        format!(
                            "requests from pages of {origin:?} may not change anything here; add the origin to server.allowed_origins to allow them"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn host_allowed(&self, host: &str) -> bool {
        let Some((name, port)) = split_host(host) else {
            return false;
        };
        is_loopback(name)
            || self
                .hosts
                .iter()
                .any(|(h, p)| h == name && (p.is_none() || *p == port))
    }
}

/// Whether a host name always means this machine: `localhost` and its
/// subdomains (RFC 6761: browsers resolve them to loopback themselves,
/// never through DNS) and loopback addresses.
fn is_loopback(name: &str) -> bool {
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Middleware: refuses what [`Guard::check`] refuses, before anything else
/// (the token included) looks at the request.
pub async fn guard(
    State(guard): State<Guard>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let authority = req.uri().authority().map(|a| a.as_str());
    // The MCP endpoint's every request, its GET event stream included, is
    // checked as one that changes something: MCP's streamable HTTP asks a
    // server to check the Origin of every connection to it.
    let method = if crate::mcp::http::is_mcp_path(req.uri().path()) {
        &Method::POST
    } else {
        req.method()
    };
    guard.check(method, req.headers(), authority)?;
    Ok(next.run(req).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn settings(hosts: &[&str], origins: &[&str]) -> ServerSettings {
        ServerSettings {
            allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            allowed_origins: origins.iter().map(|o| o.to_string()).collect(),
            ..ServerSettings::default()
        }
    }

    #[test]
    fn host_values_split_into_name_and_port_or_are_refused() {
        assert_eq!(
            split_host("localhost:7878"),
            Some(("localhost", Some(7878)))
        );
        assert_eq!(split_host("[::1]:7878"), Some(("::1", Some(7878))));
        assert_eq!(split_host("[::1]"), Some(("::1", None)));
        assert_eq!(split_host("localhost."), Some(("localhost", None)));
        assert_eq!(split_host("127.0.0.1"), Some(("127.0.0.1", None)));
        for not_a_host in [
            "evil:80.localhost",
            "localhost:80@evil",
            "a@localhost",
            "localhost/x",
            "[::1]evil",
            "[::1",
            "[::1]@x",
            "[evil]:80",
            "localhost:",
            "localhost:99999",
            "localhost:80:80",
            "",
        ] {
            assert_eq!(split_host(not_a_host), None, "{not_a_host}");
        }
        for loopback in [
            "localhost",
            "app.localhost",
            "127.0.0.1",
            "127.8.9.10",
            "::1",
        ] {
            assert!(is_loopback(loopback), "{loopback}");
        }
        for other in [
            "attacker.example",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "0.0.0.0",
            "10.0.0.1",
            "",
        ] {
            assert!(!is_loopback(other), "{other}");
        }
    }

    #[test]
    fn an_open_server_answers_loopback_and_listed_hosts_only() {
        let g = Guard::from_settings(
            &settings(&["memory.internal", "box:9000", "[fe80::1]"], &[]),
            true,
        );
        let get = |host: &str| g.check(&Method::GET, &headers(&[(header::HOST, host)]), None);
        for ok in [
            "127.0.0.1:7878",
            "localhost:7878",
            "LOCALHOST",
            "[::1]:7878",
            "memory.internal",
            "memory.internal:7878",
            "[fe80::1]:7878",
            "box:9000",
        ] {
            assert!(get(ok).is_ok(), "{ok}");
        }
        for refused in [
            "attacker.example:7878",
            "box:9001",
            "127.0.0.1.nip.io:7878",
            "evil:80.localhost",
            "[fe80::2]:7878",
        ] {
            let err = get(refused).unwrap_err();
            assert_eq!(err.status, 421, "{refused}");
        }
        // every Host sent counts, and a target's own host as well
        let mut two = headers(&[(header::HOST, "localhost")]);
        two.append(header::HOST, HeaderValue::from_static("attacker.example"));
        assert_eq!(g.check(&Method::GET, &two, None).unwrap_err().status, 421);
        let h = headers(&[(header::HOST, "localhost")]);
        assert_eq!(
            g.check(&Method::GET, &h, Some("attacker.example"))
                .unwrap_err()
                .status,
            421
        );
        // no Host at all: not a page's request; an HTTP/2 target's host
        // counts as its Host
        assert!(g.check(&Method::GET, &HeaderMap::new(), None).is_ok());
        let h2 = |authority| g.check(&Method::GET, &HeaderMap::new(), Some(authority));
        assert!(h2("localhost:7878").is_ok());
        assert_eq!(h2("attacker.example:7878").unwrap_err().status, 421);
    }

    #[test]
    fn with_a_token_any_host_unless_some_are_listed() {
        let host = |g: &Guard, name: &str| {
            g.check(&Method::GET, &headers(&[(header::HOST, name)]), None)
                .map_err(|e| e.status)
        };
        let g = Guard::from_settings(&settings(&[], &[]), false);
        assert!(host(&g, "memory.example.com").is_ok());
        let g = Guard::from_settings(&settings(&["memory.example.com"], &[]), false);
        assert!(host(&g, "memory.example.com").is_ok());
        assert_eq!(
            host(&g, "elsewhere.example"),
            Err(StatusCode::MISDIRECTED_REQUEST)
        );
    }

    #[test]
    fn a_page_of_another_origin_changes_nothing_and_opens_no_stream() {
        let g = Guard::from_settings(&settings(&[], &["https://app.example.com/"]), true);
        let from = |method: Method, origin: Option<&str>, upgrade: bool| {
            let mut h = headers(&[(header::HOST, "127.0.0.1:7878")]);
            if let Some(o) = origin {
                h.insert(header::ORIGIN, HeaderValue::from_str(o).unwrap());
            }
            if upgrade {
                h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
            }
            g.check(&method, &h, None).map_err(|e| (e.status, e.code))
        };
        let refused = Err((StatusCode::FORBIDDEN, "origin_not_allowed"));
        let evil = Some("https://attacker.example");
        for m in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert_eq!(from(m.clone(), evil, false), refused, "{m}");
            // a browser page of the listed origin, and a client without one
            assert!(from(m.clone(), Some("https://APP.example.com"), false).is_ok());
            assert!(from(m, None, false).is_ok());
        }
        assert_eq!(from(Method::GET, evil, true), refused);
        assert_eq!(from(Method::GET, Some("null"), true), refused);
        assert!(from(Method::GET, None, true).is_ok());
        // reading is left to the Host check and the browser's own rules
        assert!(from(Method::GET, evil, false).is_ok());
    }
}
