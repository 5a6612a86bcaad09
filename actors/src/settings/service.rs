//! Settings of the service: the HTTP server, logs and the store.

use super::*;

/// `recall serve`: where it listens and who may call it.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    pub addr: String,
    /// One bearer token for every agent; empty for none.
    pub token: String,
    /// Bearer tokens limited to some agents.
    pub tokens: Vec<TokenGrant>,
    pub max_body_bytes: usize,
    pub shutdown_grace_secs: u64,
    /// Host names (or `host:port`) requests may name in their `Host`
    /// besides the loopback ones. Without a token, a request naming any
    /// other is refused (what a page's DNS rebinding sends); with a token
    /// and none listed, any `Host` is served.
    pub allowed_hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`) whose pages may open a WebSocket
    /// stream or send a request that changes something. A request that
    /// carries another `Origin` is refused; one without (not a browser)
    /// passes.
    pub allowed_origins: Vec<String>,
    /// Longest a client may take to send a request's headers, counted
    /// from when the server starts waiting for them (so also how long an
    /// idle kept-alive connection stays open): past it the connection is
    /// closed.
    pub header_timeout_secs: u64,
    /// Longest a client may take to send a request's body once its
    /// headers are in, before it is answered `408 request_timeout` (what
    /// the server then does is bounded by its own timeouts).
    pub request_timeout_secs: u64,
    /// Connections open at once, WebSocket streams included; past it a
    /// new one is answered `503 too_many_connections` and closed.
    pub max_connections: usize,
    /// How often a WebSocket stream is pinged.
    pub ws_ping_secs: u64,
    /// A WebSocket stream that sends nothing (not even a pong) this long
    /// is closed, and its session ends as on a disconnect.
    pub ws_idle_secs: u64,
}

/// A bearer token and the agents it covers (`"*"` for all).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenGrant {
    pub token: String,
    pub agents: Vec<String>,
}

impl std::fmt::Debug for TokenGrant {
    // The token is a secret: never in logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenGrant")
            .field("token", &"…")
            .field("agents", &self.agents)
            .finish()
    }
}

impl std::fmt::Debug for ServerSettings {
    // Tokens are secrets: never in logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSettings")
            .field("addr", &self.addr)
            .field("token", &if self.token.is_empty() { "" } else { "…" })
            .field("tokens", &self.tokens)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("shutdown_grace_secs", &self.shutdown_grace_secs)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("header_timeout_secs", &self.header_timeout_secs)
            .field("request_timeout_secs", &self.request_timeout_secs)
            .field("max_connections", &self.max_connections)
            .field("ws_ping_secs", &self.ws_ping_secs)
            .field("ws_idle_secs", &self.ws_idle_secs)
            .finish()
    }
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            addr: "127.0.0.1:7878".into(),
            token: String::new(),
            tokens: Vec::new(),
            max_body_bytes: 1 << 20,
            shutdown_grace_secs: 30,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            header_timeout_secs: 10,
            request_timeout_secs: 30,
            max_connections: 4096,
            ws_ping_secs: 20,
            ws_idle_secs: 60,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Readable lines.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
    /// A `tracing` filter such as `info` or `recall=debug,warn`; the
    /// `RECALL_LOG` variable overrides it.
    pub filter: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            format: LogFormat::Human,
            filter: "info".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlushPolicy {
    /// Writes are acknowledged to the process at once and flushed to disk
    /// together every `flush_interval_ms`.
    GroupCommit,
    /// Every write is flushed before the Store handles the next message.
    EveryWrite,
}

/// Where the records are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// sled in the data folder: one process, nothing to run beside it.
    #[default]
    Sled,
    /// A PostgreSQL database (`store.postgres`), which several instances
    /// share.
    Postgres,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSettings {
    pub kind: StoreKind,
    pub flush: FlushPolicy,
    pub flush_interval_ms: u64,
    pub cache_capacity_mb: u64,
    /// Turns acknowledged and not yet written (waiting for a database
    /// that cannot be reached, say) before new ones are refused with
    /// `store_unavailable`; nothing acknowledged is ever dropped.
    pub max_unwritten_turns: u64,
    pub postgres: PostgresSettings,
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            kind: StoreKind::Sled,
            flush: FlushPolicy::GroupCommit,
            flush_interval_ms: 5,
            cache_capacity_mb: 64,
            max_unwritten_turns: 100_000,
            postgres: PostgresSettings::default(),
        }
    }
}

/// The PostgreSQL database of `store.kind = "postgres"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresSettings {
    /// `postgres://user:password@host:port/database`.
    pub url: String,
    /// Connections in the pool.
    pub pool_size: u32,
    /// The schema the tables are in (created if missing).
    pub schema: String,
    /// How long to wait for a connection before a write or read fails.
    pub connect_timeout_secs: u64,
    /// How long an instance's heartbeat, its claims on reflections and its
    /// leases (rollups, the watchdog) hold without renewal: another
    /// instance takes over an instance that died within this plus a third
    /// of it. Renewed every third of it.
    pub lease_secs: u64,
    /// The longest a cached context on one instance can miss a write made
    /// on another when the change notification is lost: every this often,
    /// each instance reads contexts afresh.
    pub refresh_secs: u64,
}

impl Default for PostgresSettings {
    fn default() -> Self {
        PostgresSettings {
            url: String::new(),
            pool_size: 8,
            schema: "recall".into(),
            connect_timeout_secs: 5,
            lease_secs: 15,
            refresh_secs: 10,
        }
    }
}

impl StoreSettings {
    /// Rejects values the runtime cannot run with, naming the key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        positive("store.flush_interval_ms", self.flush_interval_ms)?;
        positive("store.cache_capacity_mb", self.cache_capacity_mb)?;
        positive("store.max_unwritten_turns", self.max_unwritten_turns)?;
        let pg = &self.postgres;
        if self.kind == StoreKind::Postgres && pg.url.trim().is_empty() {
            return Err(SettingsError {
                key: "store.postgres.url",
                reason: "is needed with store.kind = \"postgres\", such as postgres://recall@127.0.0.1:5432/recall".into(),
            });
        }
        let scheme = pg.url.starts_with("postgres://") || pg.url.starts_with("postgresql://");
        if !(pg.url.is_empty() || scheme) {
            return Err(SettingsError {
                key: "store.postgres.url",
                reason: "must start with postgres:// or postgresql://".into(),
            });
        }
        positive("store.postgres.pool_size", pg.pool_size as u64)?;
        positive(
            "store.postgres.connect_timeout_secs",
            pg.connect_timeout_secs,
        )?;
        if pg.lease_secs < 3 {
            return Err(SettingsError {
                key: "store.postgres.lease_secs",
                reason: "must be at least 3 (it is renewed every third of it)".into(),
            });
        }
        positive("store.postgres.refresh_secs", pg.refresh_secs)?;
        let mut chars = pg.schema.chars();
        let identifier = chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && pg.schema.len() <= 63;
        if !identifier {
            return Err(SettingsError {
                key: "store.postgres.schema",
                reason: format!(
                    "{:?} is not a schema name: lowercase letters, digits and _, not starting with a digit",
                    pg.schema
                ),
            });
        }
        Ok(())
    }
}

impl ServerSettings {
    /// Rejects values the runtime cannot run with, naming the key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let srv = self;
        let host_port = srv
            .addr
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if srv.addr.parse::<std::net::SocketAddr>().is_err() && !host_port {
            return Err(SettingsError {
                key: "server.addr",
                reason: format!("{:?} is not HOST:PORT, such as 127.0.0.1:7878", srv.addr),
            });
        }
        if srv.token.chars().any(char::is_whitespace) {
            return Err(SettingsError {
                key: "server.token",
                reason: "must not contain whitespace".into(),
            });
        }
        for grant in &srv.tokens {
            if grant.token.is_empty() || grant.token.chars().any(char::is_whitespace) {
                return Err(SettingsError {
                    key: "server.tokens",
                    reason: "a token must be non-empty and without whitespace".into(),
                });
            }
            if grant.agents.is_empty() || grant.agents.iter().any(|a| a.is_empty()) {
                return Err(SettingsError {
                    key: "server.tokens",
                    reason: "each token needs a list of agent ids, or [\"*\"] for all".into(),
                });
            }
        }
        positive("server.max_body_bytes", srv.max_body_bytes as u64)?;
        positive("server.header_timeout_secs", srv.header_timeout_secs)?;
        positive("server.request_timeout_secs", srv.request_timeout_secs)?;
        positive("server.max_connections", srv.max_connections as u64)?;
        if srv.max_connections > 1_000_000 {
            return Err(SettingsError {
                key: "server.max_connections",
                reason: "must be at most 1000000 (each connection is an open file)".into(),
            });
        }
        positive("server.ws_ping_secs", srv.ws_ping_secs)?;
        if srv.ws_idle_secs <= srv.ws_ping_secs {
            return Err(SettingsError {
                key: "server.ws_idle_secs",
                reason: format!(
                    "must be longer than server.ws_ping_secs ({}): a client answering every ping would be closed as idle",
                    srv.ws_ping_secs
                ),
            });
        }
        for host in &srv.allowed_hosts {
            if split_host(&host.to_lowercase()).is_none() {
                return Err(SettingsError {
                    key: "server.allowed_hosts",
                    reason: format!(
                        "{host:?} is not a host name or HOST:PORT, such as memory.internal, memory.internal:7878 or [fe80::1]"
                    ),
                });
            }
        }
        for origin in &srv.allowed_origins {
            let rest = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"));
            let ok = rest.is_some_and(|r| split_host(&r.to_lowercase()).is_some());
            if !ok {
                return Err(SettingsError {
                    key: "server.allowed_origins",
                    reason: format!(
                        "{origin:?} is not an origin: http:// or https://, a host and an optional port, no path (such as https://app.example.com)"
                    ),
                });
            }
        }
        Ok(())
    }
}

impl LogSettings {
    /// Rejects values the runtime cannot run with, naming the key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.filter.trim().is_empty() {
            return Err(SettingsError {
                key: "log.filter",
                reason: "must not be empty".into(),
            });
        }

        Ok(())
    }
}

/// A `Host` value as its name and port: `[::1]:7878` → (`::1`, 7878),
/// `localhost.` → (`localhost`, none). `None` for what is not a host:
/// anything but letters, digits, `.` and `-` in a name (`evil:80.localhost`,
/// `a@b`), a port that is not a number, text after an address's `]`.
pub fn split_host(host: &str) -> Option<(&str, Option<u16>)> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (ip, after) = rest.split_once(']')?;
        ip.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (ip, port)
    } else {
        let (name, port) = match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        };
        let name = name.strip_suffix('.').unwrap_or(name);
        let ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
        if !ok {
            return None;
        }
        (name, port)
    };
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => Some(p.parse().ok()?),
        Some(_) => return None,
    };
    Some((name, port))
}
