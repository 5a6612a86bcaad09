//! The connection table: which session (and actor) a connection's turns go
//! to. `record_turn` reads it under a read lock and casts to the session
//! actor, so the hot path never waits on an actor.
//!
//! The seed's tracker drops a turn whose connection has no live session.
//! Here a turn for a connection whose session already ended is kept as a
//! pending turn while the supervisor opens a new session on that
//! connection, and a connection that was never started is an error the
//! caller sees.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use ractor::ActorRef;
use tokio::time::Instant;
use uuid::Uuid;

use crate::model::{ConversationTurn, EndReason};
use crate::session::{LiveView, SessionMsg};

/// Who a connection belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub agent_id: Arc<str>,
    pub user_id: Arc<str>,
}

pub enum Conn {
    /// A live session receives the connection's turns.
    Live {
        owner: Owner,
        session_id: Uuid,
        actor: ActorRef<SessionMsg>,
        /// What context reads last got from the actor.
        view: Arc<LiveView>,
    },
    /// The session ended and a new one is being opened; turns wait here.
    Opening {
        owner: Owner,
        /// The id the new session will have, chosen when the first turn
        /// arrived, so that its caller can be told.
        session_id: Uuid,
        pending: Vec<ConversationTurn>,
        /// The caller ended the connection before the session opened: end
        /// it, for this reason, as soon as it has its pending turns.
        end_requested: Option<EndReason>,
    },
    /// The last session on this connection ended.
    Ended {
        owner: Owner,
        session_id: Uuid,
        at: Instant,
    },
}

/// A live session of one agent and user.
#[derive(Debug, Clone)]
pub struct LiveSession {
    pub connection_id: String,
    pub session_id: Uuid,
    pub actor: ActorRef<SessionMsg>,
    pub view: Arc<LiveView>,
}

/// Casts a turn to a live session's actor, counting it first in the
/// session's [`LiveView`] (so a context read after this call asks the
/// actor, behind the turn, instead of taking a view made before it).
fn send_turn(
    actor: &ActorRef<SessionMsg>,
    view: &LiveView,
    turn: ConversationTurn,
) -> Result<(), ractor::MessagingErr<SessionMsg>> {
    view.turn_sent();
    actor.cast(SessionMsg::Turn(turn))
}

/// What happened to a routed turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routed {
    /// Cast to the live session.
    Delivered(Uuid),
    /// Kept as pending; the caller must ask the supervisor to open a new
    /// session (with this id) on the connection.
    NeedsOpen(Uuid),
    /// Kept as pending; a new session with this id is already being opened.
    Pending(Uuid),
}

impl Routed {
    /// The session the turn belongs to.
    pub fn session_id(&self) -> Uuid {
        match self {
            Routed::Delivered(id) | Routed::NeedsOpen(id) | Routed::Pending(id) => *id,
        }
    }
}

/// Where a connection is, for a caller it belongs to.
#[derive(Debug, Clone)]
pub enum ConnState {
    Live(Uuid, ActorRef<SessionMsg>),
    /// A late turn is reopening it, as this session.
    Opening(Uuid),
    Ended,
}

/// Why a turn was not routed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error(transparent)]
    Unknown(#[from] UnknownConnection),
    /// The connection belongs to another agent or user now.
    #[error("the connection belongs to another agent or user now")]
    NotOwner,
}

/// Why a session cannot start on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// It has a live (or opening) session.
    Live,
    /// Its last session belonged to another agent, within the reopen window.
    OtherAgent,
}

/// The connection has no session and never had one (or it was forgotten
/// after the reopen window).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("connection {0:?} has no session; start one first")]
pub struct UnknownConnection(pub String);

#[derive(Default)]
pub struct Registry {
    conns: RwLock<HashMap<String, Conn>>,
    /// Moves on every change of `conns` (under its write lock).
    changes: std::sync::atomic::AtomicU64,
    /// The live sessions of the (agent, user) pairs read since the last
    /// change of `conns` ([`Registry::live_of`]), with the change count
    /// they hold for: a context read does not scan every connection of
    /// the reopen window again while none changed.
    live_seen: Mutex<LiveSeen>,
    /// Sessions marked ended whose actor has not reported its final record
    /// to the supervisor yet.
    ending: Mutex<HashSet<Uuid>>,
    /// Where new session ids come from.
    ids: SessionIds,
}

/// New session ids: random, or drawn from a seed so that a replay in
/// virtual time names its sessions the same way every run.
#[derive(Default)]
enum SessionIds {
    #[default]
    Random,
    Seeded {
        seed: u64,
        drawn: std::sync::atomic::AtomicU64,
    },
}

/// splitmix64's output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What [`Registry::live_of`] found since the change count it holds.
#[derive(Default)]
struct LiveSeen {
    changes: u64,
    by_owner: HashMap<(String, String), Vec<LiveSession>>,
}

/// How many (agent, user) pairs' live sessions are kept between changes at
/// most (past it, the kept ones start again).
const LIVE_SEEN_PAIRS: usize = 1_024;

impl Registry {
    pub fn new() -> Arc<Self> {
        Arc::new(Registry::default())
    }

    /// A registry whose session ids are drawn from `seed`: the n-th id is
    /// the same in every run (a version-4 UUID in form).
    pub fn seeded(seed: u64) -> Arc<Self> {
        Arc::new(Registry {
            ids: SessionIds::Seeded {
                seed,
                drawn: Default::default(),
            },
            ..Default::default()
        })
    }

    /// The id of a session about to open.
    pub fn new_session_id(&self) -> Uuid {
        match &self.ids {
            SessionIds::Random => Uuid::new_v4(),
            SessionIds::Seeded { seed, drawn } => {
                // The (2n+1)-th and (2n+2)-th outputs of splitmix64 from
                // the seed.
                const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
                let n = drawn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let at = |k: u64| mix(seed.wrapping_add(k.wrapping_mul(GOLDEN)));
                let (hi, lo) = (at(2 * n + 1), at(2 * n + 2));
                let mut bytes = [0u8; 16];
                bytes[..8].copy_from_slice(&hi.to_be_bytes());
                bytes[8..].copy_from_slice(&lo.to_be_bytes());
                uuid::Builder::from_random_bytes(bytes).into_uuid()
            }
        }
    }

    // A poisoned lock only means another thread panicked while holding it;
    // every update below leaves the map consistent, so keep going.
    fn read(&self) -> RwLockReadGuard<'_, HashMap<String, Conn>> {
        self.conns.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The connections to change: every change goes through here, which
    /// moves the change count (what `live_of` found before is stale).
    fn write(&self) -> RwLockWriteGuard<'_, HashMap<String, Conn>> {
        let conns = self.conns.write().unwrap_or_else(|p| p.into_inner());
        self.changes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        conns
    }

    /// Routes a turn: the hot path.
    pub fn route_turn(
        &self,
        connection_id: &str,
        turn: ConversationTurn,
    ) -> Result<Routed, UnknownConnection> {
        match self.route_turn_as(connection_id, None, turn) {
            Ok(r) => Ok(r),
            Err(RouteError::Unknown(e)) => Err(e),
            // No owner was asked for.
            Err(RouteError::NotOwner) => Err(UnknownConnection(connection_id.to_string())),
        }
    }

    /// Routes a turn only if the connection belongs to `owner` (agent,
    /// user), checked under the same lock as the routing, so that a caller
    /// holding a connection id cannot write into a session someone else
    /// now has on it.
    pub fn route_turn_as(
        &self,
        connection_id: &str,
        owner: Option<(&str, &str)>,
        turn: ConversationTurn,
    ) -> Result<Routed, RouteError> {
        let owns = |o: &Owner| owner.is_none_or(|(a, u)| &*o.agent_id == a && &*o.user_id == u);
        let turn = {
            let conns = self.read();
            match conns.get(connection_id) {
                None => return Err(UnknownConnection(connection_id.to_string()).into()),
                Some(
                    Conn::Live { owner, .. }
                    | Conn::Opening { owner, .. }
                    | Conn::Ended { owner, .. },
                ) if !owns(owner) => return Err(RouteError::NotOwner),
                Some(Conn::Live {
                    actor,
                    session_id,
                    view,
                    ..
                }) => match send_turn(actor, view, turn) {
                    Ok(()) => return Ok(Routed::Delivered(*session_id)),
                    // The actor is gone (it panicked): recover the turn.
                    Err(ractor::MessagingErr::SendErr(SessionMsg::Turn(t))) => t,
                    Err(_) => return Ok(Routed::Delivered(*session_id)),
                },
                Some(_) => turn,
            }
        };
        let mut conns = self.write();
        let Some(conn) = conns.get_mut(connection_id) else {
            return Err(UnknownConnection(connection_id.to_string()).into());
        };
        let (Conn::Live { owner: o, .. }
        | Conn::Opening { owner: o, .. }
        | Conn::Ended { owner: o, .. }) = &*conn;
        if !owns(o) {
            return Err(RouteError::NotOwner);
        }
        match conn {
            Conn::Live {
                actor,
                owner,
                session_id,
                view,
            } => match send_turn(actor, view, turn) {
                Ok(()) => Ok(Routed::Delivered(*session_id)),
                Err(ractor::MessagingErr::SendErr(SessionMsg::Turn(t))) => {
                    let id = self.new_session_id();
                    *conn = Conn::Opening {
                        owner: owner.clone(),
                        session_id: id,
                        pending: vec![t],
                        end_requested: None,
                    };
                    Ok(Routed::NeedsOpen(id))
                }
                Err(_) => Ok(Routed::Delivered(*session_id)),
            },
            Conn::Opening {
                pending,
                session_id,
                ..
            } => {
                pending.push(turn);
                Ok(Routed::Pending(*session_id))
            }
            Conn::Ended { owner, .. } => {
                let id = self.new_session_id();
                *conn = Conn::Opening {
                    owner: owner.clone(),
                    session_id: id,
                    pending: vec![turn],
                    end_requested: None,
                };
                Ok(Routed::NeedsOpen(id))
            }
        }
    }

    /// [`live`](Self::live), and whether a session is live or being
    /// opened there, only if the connection belongs to `owner` (any owner
    /// with `None`), read under one lock: `NotOwner` if it belongs to
    /// someone else, `Unknown` if it has no session and never had one.
    pub fn state_for(
        &self,
        connection_id: &str,
        owner: Option<(&str, &str)>,
    ) -> Result<ConnState, RouteError> {
        let conns = self.read();
        let conn = conns
            .get(connection_id)
            .ok_or_else(|| UnknownConnection(connection_id.to_string()))?;
        let (Conn::Live { owner: o, .. }
        | Conn::Opening { owner: o, .. }
        | Conn::Ended { owner: o, .. }) = conn;
        if owner.is_some_and(|(a, u)| &*o.agent_id != a || &*o.user_id != u) {
            return Err(RouteError::NotOwner);
        }
        Ok(match conn {
            Conn::Live {
                session_id, actor, ..
            } => ConnState::Live(*session_id, actor.clone()),
            Conn::Opening { session_id, .. } => ConnState::Opening(*session_id),
            Conn::Ended { .. } => ConnState::Ended,
        })
    }

    /// The live session actor of a connection.
    pub fn live(&self, connection_id: &str) -> Option<(Uuid, ActorRef<SessionMsg>)> {
        match self.read().get(connection_id) {
            Some(Conn::Live {
                session_id, actor, ..
            }) => Some((*session_id, actor.clone())),
            _ => None,
        }
    }

    /// The state of a connection: `Some(Some(id))` live, `Some(None)` known
    /// but without a live session, `None` unknown.
    pub fn session_of(&self, connection_id: &str) -> Option<Option<Uuid>> {
        self.read().get(connection_id).map(|c| match c {
            Conn::Live { session_id, .. } => Some(*session_id),
            _ => None,
        })
    }

    /// Whether a new session for `agent_id` may start on this connection:
    /// none live or opening, and not remembered as another agent's (a
    /// stream still open on it would otherwise write into that agent's
    /// session).
    pub fn is_free_for(&self, connection_id: &str, agent_id: &str) -> Result<(), Busy> {
        match self.read().get(connection_id) {
            None => Ok(()),
            Some(Conn::Ended { owner, .. }) if &*owner.agent_id == agent_id => Ok(()),
            Some(Conn::Ended { .. }) => Err(Busy::OtherAgent),
            Some(_) => Err(Busy::Live),
        }
    }

    pub fn insert_live(
        &self,
        connection_id: &str,
        owner: Owner,
        session_id: Uuid,
        actor: ActorRef<SessionMsg>,
        view: Arc<LiveView>,
    ) {
        self.write().insert(
            connection_id.to_string(),
            Conn::Live {
                owner,
                session_id,
                actor,
                view,
            },
        );
    }

    /// The owner of a connection that is being reopened, and the id its
    /// new session gets.
    pub fn opening(&self, connection_id: &str) -> Option<(Owner, Uuid)> {
        match self.read().get(connection_id) {
            Some(Conn::Opening {
                owner, session_id, ..
            }) => Some((owner.clone(), *session_id)),
            _ => None,
        }
    }

    /// Who a connection belongs to, whatever its state.
    pub fn owner(&self, connection_id: &str) -> Option<Owner> {
        self.read().get(connection_id).map(|c| match c {
            Conn::Live { owner, .. } | Conn::Opening { owner, .. } | Conn::Ended { owner, .. } => {
                owner.clone()
            }
        })
    }

    /// Whether the connection (in any state) belongs to this agent and user.
    pub fn owned_by(&self, connection_id: &str, agent_id: &str, user_id: &str) -> bool {
        self.read().get(connection_id).is_some_and(|c| {
            let (Conn::Live { owner, .. }
            | Conn::Opening { owner, .. }
            | Conn::Ended { owner, .. }) = c;
            &*owner.agent_id == agent_id && &*owner.user_id == user_id
        })
    }

    /// The connection's session, live or being opened, with its actor when
    /// live.
    pub fn current(&self, connection_id: &str) -> Option<(Uuid, Option<ActorRef<SessionMsg>>)> {
        match self.read().get(connection_id)? {
            Conn::Live {
                session_id, actor, ..
            } => Some((*session_id, Some(actor.clone()))),
            Conn::Opening { session_id, .. } => Some((*session_id, None)),
            Conn::Ended { .. } => None,
        }
    }

    /// Asks for a connection that is being reopened to be ended once open.
    /// Returns false if the connection is not being reopened.
    /// Returns the id the opening session gets, or `None` if the connection
    /// is not being reopened.
    pub fn request_end(&self, connection_id: &str, reason: EndReason) -> Option<Uuid> {
        match self.write().get_mut(connection_id) {
            Some(Conn::Opening {
                end_requested,
                session_id,
                ..
            }) => {
                end_requested.get_or_insert(reason);
                Some(*session_id)
            }
            _ => None,
        }
    }

    /// [`request_end`](Self::request_end) only while the connection is
    /// still being reopened as `session_id`; whether it was.
    pub fn request_end_of(&self, connection_id: &str, session_id: Uuid, reason: EndReason) -> bool {
        match self.write().get_mut(connection_id) {
            Some(Conn::Opening {
                end_requested,
                session_id: id,
                ..
            }) if *id == session_id => {
                end_requested.get_or_insert(reason);
                true
            }
            _ => false,
        }
    }

    /// Makes a reopened connection live and hands its pending turns to the
    /// new actor, under the write lock so that no later turn overtakes them.
    /// Returns why the caller asked for it to end meanwhile, if it did.
    pub fn promote(
        &self,
        connection_id: &str,
        session_id: Uuid,
        actor: ActorRef<SessionMsg>,
        view: Arc<LiveView>,
    ) -> Option<EndReason> {
        let mut conns = self.write();
        let conn = conns.get_mut(connection_id)?;
        let mut end = None;
        let owner = match conn {
            Conn::Opening {
                owner,
                pending,
                end_requested,
                ..
            } => {
                end = *end_requested;
                for t in pending.drain(..) {
                    // A freshly spawned actor accepts casts; if it died
                    // already, its pending turns are in the store via
                    // pre_start, which persisted them.
                    let _ = send_turn(&actor, &view, t);
                }
                owner.clone()
            }
            Conn::Live { owner, .. } | Conn::Ended { owner, .. } => owner.clone(),
        };
        *conn = Conn::Live {
            owner,
            session_id,
            actor,
            view,
        };
        end
    }

    /// Marks a connection's session ended, if it is still the live one.
    /// Returns whether it was.
    pub fn mark_ended(&self, connection_id: &str, session_id: Uuid) -> bool {
        let mut conns = self.write();
        match conns.get_mut(connection_id) {
            Some(conn @ Conn::Live { .. }) => {
                let (owner, live_id) = match &*conn {
                    Conn::Live {
                        owner, session_id, ..
                    } => (owner.clone(), *session_id),
                    _ => return false,
                };
                if live_id != session_id {
                    return false;
                }
                *conn = Conn::Ended {
                    owner,
                    session_id,
                    at: Instant::now(),
                };
                self.ending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(session_id);
                true
            }
            _ => false,
        }
    }

    /// The session's final record reached the supervisor.
    pub fn finished_ending(&self, session_id: Uuid) {
        self.ending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&session_id);
    }

    /// Whether the session was ended and has not reported its final record.
    pub fn is_ending(&self, session_id: Uuid) -> bool {
        self.ending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&session_id)
    }

    /// Sessions that were ended but have not reported their final record.
    pub fn ending(&self) -> usize {
        self.ending.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Connections with a live session.
    pub fn live_sessions(&self) -> Vec<(String, Uuid, ActorRef<SessionMsg>)> {
        self.read()
            .iter()
            .filter_map(|(c, conn)| match conn {
                Conn::Live {
                    session_id, actor, ..
                } => Some((c.clone(), *session_id, actor.clone())),
                _ => None,
            })
            .collect()
    }

    /// Forgets the ended connections of a user (with one agent, or all):
    /// a late turn on one then finds no session to reopen.
    pub fn forget_ended(&self, user_id: &str, agent_id: Option<&str>) {
        self.write().retain(|_, conn| match conn {
            Conn::Ended { owner, .. } => {
                !(&*owner.user_id == user_id && agent_id.is_none_or(|a| a == &*owner.agent_id))
            }
            _ => true,
        });
    }

    /// The (agent, user) of every live or opening connection.
    pub fn owners(&self) -> Vec<(String, String)> {
        self.read()
            .values()
            .filter_map(|conn| match conn {
                Conn::Live { owner, .. } | Conn::Opening { owner, .. } => {
                    Some((owner.agent_id.to_string(), owner.user_id.to_string()))
                }
                _ => None,
            })
            .collect()
    }

    /// The agents `user_id` has a live or opening connection with.
    pub fn agents_of(&self, user_id: &str) -> std::collections::BTreeSet<String> {
        self.read()
            .values()
            .filter_map(|conn| match conn {
                Conn::Live { owner, .. } | Conn::Opening { owner, .. }
                    if &*owner.user_id == user_id =>
                {
                    Some(owner.agent_id.to_string())
                }
                _ => None,
            })
            .collect()
    }

    /// Live sessions of one agent with one user: found once per change of
    /// the connections (a scan of every connection, ended ones of the
    /// reopen window too), then kept until the next change.
    pub fn live_of(&self, agent_id: &str, user_id: &str) -> Vec<LiveSession> {
        let conns = self.read();
        // Under the read lock: no change can come between this count and
        // the scan below.
        let changes = self.changes.load(std::sync::atomic::Ordering::Relaxed);
        let mut seen = self.live_seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.changes != changes || seen.by_owner.len() >= LIVE_SEEN_PAIRS {
            seen.changes = changes;
            seen.by_owner.clear();
        }
        let key = (agent_id.to_string(), user_id.to_string());
        if let Some(live) = seen.by_owner.get(&key) {
            return live.clone();
        }
        let live: Vec<LiveSession> = conns
            .iter()
            .filter_map(|(c, conn)| match conn {
                Conn::Live {
                    owner,
                    session_id,
                    actor,
                    view,
                } if &*owner.agent_id == agent_id && &*owner.user_id == user_id => {
                    Some(LiveSession {
                        connection_id: c.clone(),
                        session_id: *session_id,
                        actor: actor.clone(),
                        view: view.clone(),
                    })
                }
                _ => None,
            })
            .collect();
        seen.by_owner.insert(key, live.clone());
        live
    }

    /// Connections of one agent with one user whose session is being
    /// (re)opened.
    pub fn opening_of(&self, agent_id: &str, user_id: &str) -> Vec<String> {
        self.read()
            .iter()
            .filter_map(|(c, conn)| match conn {
                Conn::Opening { owner, .. }
                    if &*owner.agent_id == agent_id && &*owner.user_id == user_id =>
                {
                    Some(c.clone())
                }
                _ => None,
            })
            .collect()
    }

    /// The sessions being opened for an agent's user (a late turn
    /// reopening their connection): their ids.
    pub fn opening_sessions_of(&self, agent_id: &str, user_id: &str) -> Vec<Uuid> {
        self.read()
            .values()
            .filter_map(|conn| match conn {
                Conn::Opening {
                    owner, session_id, ..
                } if &*owner.agent_id == agent_id && &*owner.user_id == user_id => {
                    Some(*session_id)
                }
                _ => None,
            })
            .collect()
    }

    /// Connections waiting for a session to open.
    pub fn opening_connections(&self) -> Vec<String> {
        self.read()
            .iter()
            .filter(|(_, c)| matches!(c, Conn::Opening { .. }))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Forgets connections whose session ended more than `window` ago, so
    /// the table does not grow with every call ever made.
    pub fn prune(&self, window: std::time::Duration) -> usize {
        let now = Instant::now();
        let mut conns = self.write();
        let before = conns.len();
        conns.retain(|_, c| match c {
            Conn::Ended { at, .. } => now.saturating_duration_since(*at) < window,
            _ => true,
        });
        before - conns.len()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_session_ids_repeat_per_seed_and_look_like_v4() {
        let draw = |r: &Registry| (0..100).map(|_| r.new_session_id()).collect::<Vec<_>>();
        let a = draw(&Registry::seeded(42));
        assert_eq!(a, draw(&Registry::seeded(42)));
        assert!(a.iter().all(|id| id.get_version_num() == 4));
        assert_eq!(a.iter().collect::<HashSet<_>>().len(), a.len());
        let b = draw(&Registry::seeded(43));
        assert!(a.iter().all(|id| !b.contains(id)));
        // random by default
        assert_ne!(draw(&Registry::default()), draw(&Registry::default()));
    }

    /// A session actor that takes no message.
    struct Idle;

    impl ractor::Actor for Idle {
        type Msg = SessionMsg;
        type State = ();
        type Arguments = ();

        async fn pre_start(
            &self,
            _myself: ActorRef<SessionMsg>,
            _args: (),
        ) -> Result<(), ractor::ActorProcessingErr> {
            Ok(())
        }
    }

    /// The live sessions found are kept only until the connections change:
    /// a session opened, ended or reopened, on this connection or another,
    /// shows in the next read.
    #[tokio::test]
    async fn live_sessions_kept_between_reads_follow_every_change() {
        let registry = Registry::new();
        let (actor, handle) = ractor::Actor::spawn(None, Idle, ()).await.unwrap();
        let owner = |agent: &str, user: &str| Owner {
            agent_id: agent.into(),
            user_id: user.into(),
        };
        let live = |r: &Registry| -> Vec<(String, Uuid)> {
            let mut v: Vec<_> = r
                .live_of("kairix", "mark")
                .into_iter()
                .map(|l| (l.connection_id, l.session_id))
                .collect();
            v.sort();
            v
        };
        assert!(live(&registry).is_empty());
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        registry.insert_live(
            "c1",
            owner("kairix", "mark"),
            a,
            actor.clone(),
            Default::default(),
        );
        assert_eq!(live(&registry), [("c1".to_string(), a)]);
        assert_eq!(live(&registry), [("c1".to_string(), a)]);
        // another pair's session is not theirs, and is found for its own
        registry.insert_live(
            "c2",
            owner("kairix", "ana"),
            b,
            actor.clone(),
            Default::default(),
        );
        assert_eq!(live(&registry), [("c1".to_string(), a)]);
        assert_eq!(registry.live_of("kairix", "ana").len(), 1);
        registry.insert_live(
            "c3",
            owner("kairix", "mark"),
            b,
            actor.clone(),
            Default::default(),
        );
        assert_eq!(
            live(&registry),
            [("c1".to_string(), a), ("c3".to_string(), b)]
        );
        assert!(registry.mark_ended("c1", a));
        assert_eq!(live(&registry), [("c3".to_string(), b)]);
        registry.forget_ended("mark", None);
        assert!(registry.mark_ended("c3", b));
        assert!(live(&registry).is_empty());
        actor.stop(None);
        handle.await.unwrap();
    }
}
