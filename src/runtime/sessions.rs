//! Sessions and the hot path: starting one, recording turns (plain and
//! durable), touches, ending, reading a context, and what the live
//! sessions hold; the options those calls take ([`Turn`], [`EndOptions`],
//! [`TouchOptions`]).

use super::*;

impl Runtime {
    /// Starts a session on a connection (a voice call opening).
    pub async fn start_session(
        &self,
        agent_id: &str,
        user_id: &str,
        connection_id: &str,
    ) -> Result<SessionRecord, RecallError> {
        let res = ask(
            &self.inner.supervisor,
            "supervisor",
            CALL_TIMEOUT_MS,
            |reply| SupervisorMsg::Start {
                agent_id: agent_id.to_string(),
                user_id: user_id.to_string(),
                connection_id: connection_id.to_string(),
                reply,
            },
        )
        .await??;
        Ok(res)
    }

    pub(super) fn check_message(&self, field: &'static str, text: &str) -> Result<(), InputError> {
        let max = self.inner.settings.session.max_message_chars;
        // bytes bound chars from above: count only when it could matter
        if text.len() > max {
            let len = text.chars().count();
            if len > max {
                return Err(InputError::TooLong { field, len, max });
            }
        }
        Ok(())
    }

    /// Records a completed exchange. Non-blocking: validates, reads the
    /// connection table and casts to the session actor, so it is
    /// acknowledged in microseconds. Returns the id of the session the turn
    /// went to. A turn for a connection whose session ended opens a new
    /// session there (and gets its id); a turn for a connection never
    /// started is `UnknownConnection`.
    ///
    /// A turn built with [`Turn::owned_by`] is recorded only if the
    /// connection belongs to that agent and user, checked atomically with
    /// the routing: for callers (a WebSocket stream) that hold a connection
    /// id longer than its session may last. Otherwise `NotOwner`, and
    /// nothing is recorded.
    pub fn record_turn(&self, connection_id: &str, turn: Turn<'_>) -> Result<Uuid, RecallError> {
        let Turn {
            user_message,
            agent_response,
            owner,
        } = turn;
        if user_message.trim().is_empty() && agent_response.trim().is_empty() {
            return Err(InputError::EmptyTurn.into());
        }
        self.check_message("user_message", &user_message)?;
        self.check_message("agent_response", &agent_response)?;
        let turn = ConversationTurn {
            user_message,
            agent_response,
            timestamp: self.inner.clock.now(),
        };
        // Refused rather than acknowledged while too many are unwritten.
        self.inner.backlog.check()?;
        let routed = match self
            .inner
            .registry
            .route_turn_as(connection_id, owner, turn)
        {
            Ok(r) => r,
            Err(RouteError::Unknown(e)) => return Err(e.into()),
            Err(RouteError::NotOwner) => {
                return Err(RecallError::NotOwner(connection_id.to_string()))
            }
        };
        if let Routed::NeedsOpen(_) = routed {
            self.inner
                .supervisor
                .cast(SupervisorMsg::Reopen {
                    connection_id: connection_id.to_string(),
                })
                .map_err(unavailable("supervisor"))?;
        }
        Ok(routed.session_id())
    }

    /// [`record_turn`](Self::record_turn), returning once the turn is on
    /// disk (flushed), whatever the flush policy: for callers that cannot
    /// afford the group-commit window for this turn. The turn's owner, if
    /// it names one, is checked as `record_turn` checks it.
    pub async fn record_turn_durable(
        &self,
        connection_id: &str,
        turn: Turn<'_>,
    ) -> Result<Uuid, RecallError> {
        let session_id = self.record_turn(connection_id, turn)?;
        self.confirm_durable(connection_id, session_id).await
    }

    /// Returns once the turns routed to `session_id` so far are on disk.
    pub(super) async fn confirm_durable(
        &self,
        connection_id: &str,
        session_id: Uuid,
    ) -> Result<Uuid, RecallError> {
        let not_durable = |why: &str| {
            RecallError::NotDurable(format!(
                "turn recorded in session {session_id} but not confirmed on disk: {why}"
            ))
        };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(CALL_TIMEOUT_MS);
        loop {
            match self.inner.registry.current(connection_id) {
                // The session actor forwards a flush to the Store after the
                // turn's write, from its own mailbox, so the flush cannot
                // overtake the write.
                Some((id, Some(actor))) if id == session_id => {
                    match call_t!(actor, SessionMsg::Sync, CALL_TIMEOUT_MS) {
                        Ok(res) => return Ok(res.map(|()| session_id)?),
                        Err(ractor::RactorErr::Messaging(_)) => {
                            // The actor stopped (ended) meanwhile: it wrote
                            // the turn before stopping.
                            if actor
                                .wait(Some(Duration::from_millis(CALL_TIMEOUT_MS)))
                                .await
                                .is_err()
                            {
                                return Err(not_durable("the session did not stop in time"));
                            }
                            self.flush().await?;
                            return Ok(session_id);
                        }
                        Err(_) => return Err(not_durable("the session did not answer in time")),
                    }
                }
                // The session is still being opened with the turn pending.
                Some((id, None)) if id == session_id => {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(not_durable("the session did not open in time"));
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                // The session ended: its actor wrote every turn before it
                // stopped, so these writes are queued at the Store already.
                _ => {
                    if !self.wait_session_stopped(session_id).await {
                        return Err(not_durable("the session did not stop in time"));
                    }
                    self.flush().await?;
                    return Ok(session_id);
                }
            }
        }
    }

    /// Waits until an ended session's actor has stopped, i.e. its final
    /// record reached the supervisor. False if that takes too long.
    pub(super) async fn wait_session_stopped(&self, session_id: Uuid) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(CALL_TIMEOUT_MS);
        while self.inner.registry.is_ending(session_id) {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        true
    }

    /// The user is speaking: defer the silence timeout. With
    /// [`TouchOptions::owned_by`], only if the connection belongs to that
    /// agent and user (`NotOwner` otherwise): what a caller that names the
    /// connection's owner, such as the HTTP API, uses.
    pub fn touch(&self, connection_id: &str, options: TouchOptions<'_>) -> Result<(), RecallError> {
        self.touch_inner(connection_id, options.owner)
    }

    fn touch_inner(
        &self,
        connection_id: &str,
        owner: Option<(&str, &str)>,
    ) -> Result<(), RecallError> {
        match self.connection_state(connection_id, owner)? {
            ConnState::Live(_, actor) => {
                // A session that just began ending has nothing to defer.
                let _ = actor.cast(SessionMsg::Touch(tokio::time::Instant::now()));
                Ok(())
            }
            ConnState::Opening(_) | ConnState::Ended => Ok(()),
        }
    }

    fn connection_state(
        &self,
        connection_id: &str,
        owner: Option<(&str, &str)>,
    ) -> Result<ConnState, RecallError> {
        self.inner
            .registry
            .state_for(connection_id, owner)
            .map_err(|e| match e {
                RouteError::Unknown(e) => e.into(),
                RouteError::NotOwner => RecallError::NotOwner(connection_id.to_string()),
            })
    }

    /// Ends the connection's live session. Returns its id, or `None` if it
    /// had already ended. Idempotent.
    ///
    /// The options say why ([`EndOptions::because`]: `disconnect`, the
    /// default, or `cleared`, the reasons a caller can give) and, with
    /// [`EndOptions::owned_by`], end it only if the connection belongs to
    /// that agent and user (`NotOwner` otherwise, and nothing ends).
    pub fn end_session(
        &self,
        connection_id: &str,
        options: EndOptions<'_>,
    ) -> Result<Option<Uuid>, RecallError> {
        self.end_inner(connection_id, options.owner, options.reason)
    }

    fn end_inner(
        &self,
        connection_id: &str,
        owner: Option<(&str, &str)>,
        reason: EndReason,
    ) -> Result<Option<Uuid>, RecallError> {
        if !matches!(reason, EndReason::Disconnect | EndReason::Cleared) {
            return Err(InputError::Invalid {
                field: "reason",
                reason: format!(
                    "{reason} is recorded by the runtime itself; a caller ends a session with disconnect or cleared"
                ),
            }
            .into());
        }
        // The session found for its owner is the one ended: the steps below
        // each name it, so a connection passed on meanwhile is not touched.
        match self.connection_state(connection_id, owner)? {
            ConnState::Live(id, actor) => {
                // Marked here, not only in the actor, so that a turn sent
                // after this returns opens a new session.
                if self.inner.registry.mark_ended(connection_id, id) {
                    let _ = actor.cast(SessionMsg::End(reason));
                    Ok(Some(id))
                } else {
                    // It ended meanwhile (or a late turn is reopening it).
                    self.end_inner(connection_id, owner, reason)
                }
            }
            // A late turn is reopening the connection: that session ends
            // as soon as it opens, with the turn in it.
            ConnState::Opening(id) => {
                match self
                    .inner
                    .registry
                    .request_end_of(connection_id, id, reason)
                {
                    true => Ok(Some(id)),
                    false => self.end_inner(connection_id, owner, reason),
                }
            }
            ConnState::Ended => Ok(None),
        }
    }

    /// The agent and user a connection belongs to (live, opening or
    /// recently ended), or `None` for a connection unknown here.
    pub fn connection_owner(&self, connection_id: &str) -> Option<(String, String)> {
        self.inner
            .registry
            .owner(connection_id)
            .map(|o| (o.agent_id.to_string(), o.user_id.to_string()))
    }

    /// Whether a connection is (still) this agent's and user's.
    pub fn connection_owned_by(&self, connection_id: &str, agent_id: &str, user_id: &str) -> bool {
        self.inner
            .registry
            .owned_by(connection_id, agent_id, user_id)
    }

    /// A stored session with its live state: for a live session the turn
    /// count is the one so far.
    pub async fn session_status(
        &self,
        session_id: Uuid,
    ) -> Result<Option<SessionStatus>, RecallError> {
        let Some(mut record) = self.session(session_id).await? else {
            return Ok(None);
        };
        let mut live = false;
        if record.ended_at.is_none() {
            if let Some((id, Some(actor))) = self.inner.registry.current(&record.connection_id) {
                if id == session_id {
                    if let Ok(view) = call_t!(actor, SessionMsg::Inspect, CALL_TIMEOUT_MS) {
                        record = view.record;
                        live = true;
                    }
                }
            }
            if !live {
                // Ended meanwhile: read the final record.
                let _ = self.wait_session_stopped(session_id).await;
                if let Some(r) = self.session(session_id).await? {
                    live = r.ended_at.is_none();
                    record = r;
                }
            }
        }
        Ok(Some(SessionStatus { record, live }))
    }

    /// The working context of an agent with a user: their live sessions,
    /// turn counts, a token estimate and the time since the last turn (the
    /// operator view of `recall context show`).
    pub async fn live_contexts(
        &self,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Vec<LiveContext>, RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        recall_actors::model::validate_id("user_id", user_id)?;
        let now = self.inner.clock.now();
        let mut out = Vec::new();
        for live in self.inner.registry.live_of(agent_id, user_id) {
            // A session that ended meanwhile does not answer: skip it.
            let Ok(view) = call_t!(live.actor, SessionMsg::Inspect, CALL_TIMEOUT_MS) else {
                continue;
            };
            let chars: usize = view
                .turns
                .iter()
                .map(|t| t.user_message.chars().count() + t.agent_response.chars().count())
                .sum();
            let last = view
                .turns
                .last()
                .map(|t| t.timestamp)
                .unwrap_or(view.record.started_at);
            out.push(LiveContext {
                turn_count: view.record.turn_count as usize,
                // About four characters per token (seed 002).
                token_estimate: chars.div_ceil(4),
                last_activity_at: last,
                idle_secs: (now - last).num_milliseconds().max(0) as f64 / 1000.0,
                session: view.record,
            });
        }
        out.sort_by_key(|c| c.session.started_at);
        Ok(out)
    }

    /// The context for the agent's next LLM call with `user_id`: core
    /// memory blocks, the facts the user may see, the user's session
    /// summaries, the live session's turns, then `current_message`, within
    /// `budget_tokens` (see [`recall_actors::context`]). Reads what is
    /// stored and what the live session holds; never waits on an LLM.
    ///
    /// [`ContextOptions::default`] shows the live call and reads through
    /// the source cache; `include_live: false` leaves the live call out
    /// (for a caller that sends the call's own messages to its LLM itself),
    /// `use_cache: false` reads everything from the store.
    pub async fn context(
        &self,
        agent_id: &str,
        user_id: &str,
        current_message: &str,
        budget_tokens: usize,
        options: ContextOptions,
    ) -> Result<AssembledContext, RecallError> {
        self.assemble_context(agent_id, user_id, current_message, budget_tokens, options)
            .await
    }

    /// Entries, hits and misses of the source cache (the prepared sources
    /// of contexts).
    pub fn source_cache_stats(&self) -> SourceCacheStats {
        self.inner.source_cache.stats()
    }

    /// The old name of [`Runtime::source_cache_stats`].
    #[deprecated(note = "renamed to source_cache_stats")]
    pub fn context_cache_stats(&self) -> SourceCacheStats {
        self.source_cache_stats()
    }

    /// Clears the working context of an agent with a user: ends their live
    /// sessions with reason `cleared` (each is still reflected on). Returns
    /// the sessions ended.
    pub fn clear_context(&self, agent_id: &str, user_id: &str) -> Result<Vec<Uuid>, RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        recall_actors::model::validate_id("user_id", user_id)?;
        let mut ended = Vec::new();
        for live in self.inner.registry.live_of(agent_id, user_id) {
            if self
                .inner
                .registry
                .mark_ended(&live.connection_id, live.session_id)
            {
                let _ = live.actor.cast(SessionMsg::End(EndReason::Cleared));
                ended.push(live.session_id);
            }
        }
        // Sessions a late turn is reopening end as soon as they open.
        for conn in self.inner.registry.opening_of(agent_id, user_id) {
            if let Some(id) = self.inner.registry.request_end(&conn, EndReason::Cleared) {
                ended.push(id);
            }
        }
        Ok(ended)
    }

    /// The live session on a connection, with its turns so far.
    pub async fn live_session(
        &self,
        connection_id: &str,
    ) -> Result<Option<SessionView>, RecallError> {
        let Some((_, actor)) = self.inner.registry.live(connection_id) else {
            return Ok(None);
        };
        // An actor that ended meanwhile does not answer: report no session.
        Ok(call_t!(actor, SessionMsg::Inspect, CALL_TIMEOUT_MS).ok())
    }
}

/// A completed exchange for [`Runtime::record_turn`] and
/// [`Runtime::record_turn_durable`]: what a [`ConversationTurn`] stores
/// once the runtime stamps it, and the owner the connection must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn<'a> {
    user_message: String,
    agent_response: String,
    owner: Option<(&'a str, &'a str)>,
}

impl<'a> Turn<'a> {
    /// What the user said and what the agent answered; either may be empty,
    /// not both. Recorded on whichever agent and user own the connection.
    pub fn new(user_message: impl Into<String>, agent_response: impl Into<String>) -> Self {
        Turn {
            user_message: user_message.into(),
            agent_response: agent_response.into(),
            owner: None,
        }
    }

    /// Records the turn only if the connection belongs to this agent and
    /// user, checked atomically with the routing (`NotOwner` otherwise).
    pub fn owned_by(self, agent_id: &'a str, user_id: &'a str) -> Self {
        Turn {
            owner: Some((agent_id, user_id)),
            ..self
        }
    }
}

/// How [`Runtime::end_session`] ends a session. The default ends it for
/// `disconnect` whoever owns the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndOptions<'a> {
    reason: EndReason,
    owner: Option<(&'a str, &'a str)>,
}

impl Default for EndOptions<'_> {
    fn default() -> Self {
        EndOptions {
            reason: EndReason::Disconnect,
            owner: None,
        }
    }
}

impl<'a> EndOptions<'a> {
    /// Ends the session for `reason`: `disconnect` or `cleared`, the reasons
    /// a caller can give; any other is refused as invalid input.
    pub fn because(reason: EndReason) -> Self {
        EndOptions {
            reason,
            ..EndOptions::default()
        }
    }

    /// Ends it only if the connection belongs to this agent and user
    /// (`NotOwner` otherwise, and nothing ends).
    pub fn owned_by(self, agent_id: &'a str, user_id: &'a str) -> Self {
        EndOptions {
            owner: Some((agent_id, user_id)),
            ..self
        }
    }
}

/// How [`Runtime::touch`] touches a connection. The default touches it
/// whoever owns it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TouchOptions<'a> {
    owner: Option<(&'a str, &'a str)>,
}

impl<'a> TouchOptions<'a> {
    /// Touches it only if the connection belongs to this agent and user
    /// (`NotOwner` otherwise).
    pub fn owned_by(self, agent_id: &'a str, user_id: &'a str) -> Self {
        TouchOptions {
            owner: Some((agent_id, user_id)),
        }
    }
}
