//! Every sled key is built here. Integers are big-endian so that a prefix
//! scan returns records in order (a session's turns by sequence number, an
//! agent's summaries by time).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::model::{BlockLabel, SummaryType};

/// Bumped whenever a key layout or record shape changes incompatibly.
///
/// 2: a fact keeps whose words it came from (`speaker`). A build that
/// knew only 1 would read the agent side's facts as the user's, so it
/// must refuse a folder at 2; a folder at 1 is upgraded in place (its
/// facts are all the user's, which is what a fact without a speaker
/// reads as).
pub const SCHEMA_VERSION: u32 = 2;
pub const SCHEMA_KEY: &[u8] = b"schema_version";

pub const TREE_META: &str = "meta";
pub const TREE_SESSIONS: &str = "sessions";
pub const TREE_OPEN: &str = "open_sessions";
pub const TREE_TURNS: &str = "turns";
pub const TREE_SUMMARIES: &str = "summaries";
pub const TREE_SUMMARY_INDEX: &str = "summary_index";
pub const TREE_BLOCKS: &str = "blocks";
pub const TREE_QUEUE: &str = "reflection_queue";
pub const TREE_DEAD: &str = "dead_letters";
pub const TREE_AGENTS: &str = "agents";
pub const TREE_FACTS: &str = "facts";
pub const TREE_FACT_INDEX: &str = "fact_index";
pub const TREE_ROLLUP_CURSORS: &str = "rollup_cursors";
pub const TREE_ROLLUP_INBOX: &str = "rollup_inbox";
pub const TREE_TOPICS: &str = "topics";
pub const TREE_EMBEDDINGS: &str = "embeddings";
pub const TREE_FACT_TOMBSTONES: &str = "fact_tombstones";
pub const TREE_USER_SESSIONS: &str = "user_sessions";
pub const TREE_SESSION_STARTS: &str = "session_starts";
pub const TREE_AGENT_DEAD_LETTERS: &str = "agent_dead_letters";
/// The forget log: see [`forget_log`].
pub const TREE_FORGET_LOG: &str = "forget_log";
/// Ids forgotten lately, with when: see [`crate::store::FORGOTTEN_FOR`].
pub const TREE_FORGOTTEN: &str = "forgotten";
/// The mirror's ledger: (remote agent, summary id) → the passage ids the
/// remote agent holds of it (see [`mirror_ledger`]).
pub const TREE_MIRROR_LEDGER: &str = "mirror_ledger";
/// `meta`: set once `user_sessions` holds every session (a data folder
/// from before the index gets it built at open).
pub const USER_SESSIONS_BUILT: &[u8] = b"user_sessions_built";
/// `meta`: set once `session_starts` holds every session (built at open
/// for a data folder from before it).
pub const SESSION_STARTS_BUILT: &[u8] = b"session_starts_built";
/// `meta`: set once `agent_dead_letters` holds every dead letter (built
/// at open for a data folder from before it).
pub const AGENT_DEAD_LETTERS_BUILT: &[u8] = b"agent_dead_letters_built";
/// `meta` (and PostgreSQL's `meta`): set once the Rollup actor's inbox
/// holds every session summary and fact stored before there was one.
pub const INBOX_BACKFILLED: &str = "inbox_backfilled";

/// `sessions`, `open_sessions`, `reflection_queue`, `dead_letters`: the
/// session id.
pub fn session(id: Uuid) -> [u8; 16] {
    *id.as_bytes()
}

/// `turns`: session id, then the turn's sequence number.
pub fn turn(session_id: Uuid, seq: u32) -> [u8; 20] {
    let mut k = [0u8; 20];
    k[..16].copy_from_slice(session_id.as_bytes());
    k[16..].copy_from_slice(&seq.to_be_bytes());
    k
}

pub fn turns_prefix(session_id: Uuid) -> [u8; 16] {
    *session_id.as_bytes()
}

/// Ids never contain a NUL (they are validated: no control characters), so
/// it ends the agent id unambiguously.
fn agent_prefix(agent_id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(agent_id.len() + 1);
    k.extend_from_slice(agent_id.as_bytes());
    k.push(0);
    k
}

/// `user_sessions` (an index, values empty): agent, user, start time,
/// session id; a prefix scan gives one user's sessions with an agent in
/// the order they started, an agent prefix scan every user's.
pub fn user_session(rec: &crate::model::SessionRecord) -> Vec<u8> {
    let mut k = user_sessions_prefix(&rec.agent_id, &rec.user_id);
    k.extend_from_slice(&time_key(rec.started_at));
    k.extend_from_slice(rec.session_id.as_bytes());
    k
}

pub fn user_sessions_prefix(agent_id: &str, user_id: &str) -> Vec<u8> {
    let mut k = agent_prefix(agent_id);
    k.extend_from_slice(user_id.as_bytes());
    k.push(0);
    k
}

pub fn agent_sessions_prefix(agent_id: &str) -> Vec<u8> {
    agent_prefix(agent_id)
}

/// The session id at the end of a `user_sessions` key.
pub fn user_session_id(key: &[u8]) -> Option<Uuid> {
    let at = key.len().checked_sub(16)?;
    Uuid::from_slice(&key[at..]).ok()
}

/// `session_starts` (an index): every session by start time, in two
/// families told apart by the first byte. Each key ends with the start
/// time and the session id ([`ORDER_TAIL`] bytes), so a backwards scan
/// gives the newest first.
const STARTS_ALL: u8 = 0;
const STARTS_OF_AGENT: u8 = 1;

/// The bytes every index key that orders records by time ends with: a
/// time key and an id.
pub const ORDER_TAIL: usize = 24;

/// The time and id a record is ordered by, as index keys end with them.
pub fn order_tail(t: DateTime<Utc>, id: Uuid) -> [u8; ORDER_TAIL] {
    let mut k = [0u8; ORDER_TAIL];
    k[..8].copy_from_slice(&time_key(t));
    k[8..].copy_from_slice(id.as_bytes());
    k
}

/// The last [`ORDER_TAIL`] bytes of an index key (all of a shorter one).
pub fn tail_of(key: &[u8]) -> &[u8] {
    &key[key.len().saturating_sub(ORDER_TAIL)..]
}

/// `session_starts`, every agent's family: start time, session id; the
/// value is the agent and user ([`session_owner`]), so a listing filters
/// by them without reading the session.
pub fn session_start(rec: &crate::model::SessionRecord) -> Vec<u8> {
    let mut k = session_starts_prefix(None);
    k.extend_from_slice(&order_tail(rec.started_at, rec.session_id));
    k
}

/// `session_starts`, one agent's family: agent, start time, session id.
pub fn agent_session_start(rec: &crate::model::SessionRecord) -> Vec<u8> {
    let mut k = session_starts_prefix(Some(&rec.agent_id));
    k.extend_from_slice(&order_tail(rec.started_at, rec.session_id));
    k
}

/// The prefix of one agent's family in `session_starts`, or of every
/// agent's.
pub fn session_starts_prefix(agent_id: Option<&str>) -> Vec<u8> {
    match agent_id {
        None => vec![STARTS_ALL],
        Some(agent) => {
            let mut k = vec![STARTS_OF_AGENT];
            k.extend_from_slice(&agent_prefix(agent));
            k
        }
    }
}

/// The value of a session's row in every agent's family of
/// `session_starts`: agent, NUL, user.
pub fn session_owner(rec: &crate::model::SessionRecord) -> Vec<u8> {
    let mut v = agent_prefix(&rec.agent_id);
    v.extend_from_slice(rec.user_id.as_bytes());
    v
}

/// The agent and user of a [`session_owner`] value.
pub fn owner_parts(value: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = value.iter().position(|b| *b == 0)?;
    Some((&value[..at], &value[at + 1..]))
}

/// The id at the end of an index key ending in an [`order_tail`].
pub fn tail_id(key: &[u8]) -> Option<Uuid> {
    if key.len() < ORDER_TAIL {
        return None;
    }
    Uuid::from_slice(&key[key.len() - 16..]).ok()
}

/// `agent_dead_letters` (an index, values empty): agent, time the
/// reflection failed, session id; an agent's dead letters oldest first.
pub fn agent_dead_letter(letter: &crate::model::DeadLetter) -> Vec<u8> {
    let mut k = agent_prefix(&letter.agent_id);
    k.extend_from_slice(&order_tail(letter.failed_at, letter.session_id));
    k
}

pub fn agent_dead_letters_prefix(agent_id: &str) -> Vec<u8> {
    agent_prefix(agent_id)
}

/// Milliseconds since the epoch, shifted so that ordering holds across 1970.
pub fn time_key(t: DateTime<Utc>) -> [u8; 8] {
    ((t.timestamp_millis() as u64) ^ (1 << 63)).to_be_bytes()
}

pub fn time_key_of(t: DateTime<Utc>) -> [u8; 8] {
    time_key(t)
}

/// `summaries`: agent, type, end of period, summary id.
pub fn summary(
    agent_id: &str,
    kind: SummaryType,
    period_end: DateTime<Utc>,
    summary_id: Uuid,
) -> Vec<u8> {
    let mut k = summaries_prefix(agent_id, kind);
    k.extend_from_slice(&time_key(period_end));
    k.extend_from_slice(summary_id.as_bytes());
    k
}

/// `summaries`: the key a stored summary lives under.
pub fn summary_of(s: &crate::model::ConversationSummary) -> Vec<u8> {
    summary(&s.agent_id, s.summary_type, s.period_end, s.summary_id)
}

pub fn summaries_prefix(agent_id: &str, kind: SummaryType) -> Vec<u8> {
    let mut k = agent_prefix(agent_id);
    k.push(kind.tag());
    k
}

/// The first `summaries` key of `agent_id`'s summaries of `kind` that ended
/// at or after `since`.
pub fn summaries_since(agent_id: &str, kind: SummaryType, since: DateTime<Utc>) -> Vec<u8> {
    let mut k = summaries_prefix(agent_id, kind);
    k.extend_from_slice(&time_key(since));
    k
}

/// `blocks`: agent, then the label.
pub fn block(agent_id: &str, label: BlockLabel) -> Vec<u8> {
    let mut k = agent_prefix(agent_id);
    k.push(label as u8);
    k
}

pub fn blocks_prefix(agent_id: &str) -> Vec<u8> {
    agent_prefix(agent_id)
}

/// `blocks`: a block drawn from one user's conversations: agent, label,
/// then the user (never empty, so never an agent-wide key).
pub fn user_block(agent_id: &str, label: BlockLabel, user_id: &str) -> Vec<u8> {
    let mut k = block(agent_id, label);
    k.extend_from_slice(user_id.as_bytes());
    k
}

/// Whether a `blocks` key under `agent_id` is an agent-wide block's.
pub fn is_agent_block(agent_id: &str, key: &[u8]) -> bool {
    key.len() == agent_prefix(agent_id).len() + 1
}

/// `agents`: the agent id.
pub fn agent(agent_id: &str) -> &[u8] {
    agent_id.as_bytes()
}

/// `facts`: agent, user, fact id; a prefix scan gives one user's facts, an
/// agent prefix scan every user's.
pub fn fact(agent_id: &str, user_id: &str, fact_id: Uuid) -> Vec<u8> {
    let mut k = facts_prefix(agent_id, user_id);
    k.extend_from_slice(fact_id.as_bytes());
    k
}

/// `fact_tombstones`: agent, user, then a hash of a deleted fact's
/// normalized content (never the content), so a replay does not bring it
/// back.
pub fn fact_tombstone(agent_id: &str, user_id: &str, normalized: &str) -> Vec<u8> {
    fact(agent_id, user_id, tombstone_hash(normalized))
}

/// The hash a deleted fact's normalized content is remembered by.
pub fn tombstone_hash(normalized: &str) -> Uuid {
    const NS: Uuid = Uuid::from_u128(0x6661_6374_2d74_6f6d_6273_746f_6e65_0001);
    Uuid::new_v5(&NS, normalized.as_bytes())
}

/// A forget log key: the time (microseconds, as the entry keeps it,
/// ordered), the user's hash, then the agent it was limited to (none:
/// every agent). The value is the entry itself.
pub fn forget_log(at: DateTime<Utc>, user_hash: Uuid, agent_id: Option<&str>) -> Vec<u8> {
    let mut k = Vec::with_capacity(24 + agent_id.map_or(0, str::len));
    k.extend_from_slice(&((at.timestamp_micros() as u64) ^ (1 << 63)).to_be_bytes());
    k.extend_from_slice(user_hash.as_bytes());
    k.extend_from_slice(agent_id.unwrap_or_default().as_bytes());
    k
}

/// The time [`time_key`] made the bytes of.
pub fn millis_at(b: &[u8]) -> Option<DateTime<Utc>> {
    let b = <[u8; 8]>::try_from(b).ok()?;
    DateTime::from_timestamp_millis((u64::from_be_bytes(b) ^ (1 << 63)) as i64)
}

/// The agent and user of a `facts` or `fact_tombstones` key.
pub fn fact_owner(key: &[u8]) -> Option<(String, String)> {
    let head = key.get(..key.len().checked_sub(16)?)?;
    let mut parts = head.split(|b| *b == 0);
    let agent = String::from_utf8(parts.next()?.to_vec()).ok()?;
    let user = String::from_utf8(parts.next()?.to_vec()).ok()?;
    Some((agent, user))
}

pub fn facts_prefix(agent_id: &str, user_id: &str) -> Vec<u8> {
    let mut k = agent_prefix(agent_id);
    k.extend_from_slice(user_id.as_bytes());
    k.push(0);
    k
}

pub fn agent_facts_prefix(agent_id: &str) -> Vec<u8> {
    agent_prefix(agent_id)
}

/// `rollup_cursors`: agent, then the level (0 daily, 1 weekly).
pub fn rollup_cursor(agent_id: &str, level: crate::period::Level) -> Vec<u8> {
    let mut k = agent_prefix(agent_id);
    k.push(level as u8);
    k
}

/// What a `rollup_inbox` entry points at.
pub const INBOX_SUMMARY: u8 = 0;
pub const INBOX_FACT: u8 = 1;

/// `rollup_inbox`: the time of the item (a session's start, a fact's
/// extraction), its kind and id, so the Rollup actor takes them in the
/// order they happened whenever they arrived.
pub fn inbox(at: DateTime<Utc>, kind: u8, id: Uuid) -> [u8; 25] {
    let mut k = [0u8; 25];
    k[..8].copy_from_slice(&time_key(at));
    k[8] = kind;
    k[9..].copy_from_slice(id.as_bytes());
    k
}

/// The kind and id of a `rollup_inbox` key.
pub fn inbox_item(key: &[u8]) -> Option<(u8, Uuid)> {
    (key.len() == 25).then(|| (key[8], Uuid::from_slice(&key[9..]).unwrap_or_default()))
}

/// The time, kind and id of a `rollup_inbox` key (the time to the
/// millisecond, as the key holds it).
pub fn inbox_parts(key: &[u8]) -> Option<(DateTime<Utc>, u8, Uuid)> {
    let (kind, id) = inbox_item(key)?;
    let millis = (u64::from_be_bytes(key[..8].try_into().ok()?) ^ (1 << 63)) as i64;
    Some((DateTime::from_timestamp_millis(millis)?, kind, id))
}

/// `topics`: agent, user, topic id.
pub fn topic(agent_id: &str, user_id: &str, topic_id: Uuid) -> Vec<u8> {
    let mut k = facts_prefix(agent_id, user_id);
    k.extend_from_slice(topic_id.as_bytes());
    k
}

/// `topics` of one user of an agent.
pub fn topics_prefix(agent_id: &str, user_id: &str) -> Vec<u8> {
    facts_prefix(agent_id, user_id)
}

/// `embeddings`: the id of the summary or fact the vector is of.
pub fn embedding(id: Uuid) -> [u8; 16] {
    *id.as_bytes()
}

/// A mirror ledger key: the remote agent id, a 0 byte, then the summary
/// id's 16 bytes (a remote's entries are one prefix; ids hold no 0 byte:
/// they are validated ids of another service, made of printable text).
pub fn mirror_ledger(remote: &str, summary_id: uuid::Uuid) -> Vec<u8> {
    let mut k = mirror_ledger_prefix(remote);
    k.extend_from_slice(summary_id.as_bytes());
    k
}

/// The prefix of a remote agent's mirror ledger keys.
pub fn mirror_ledger_prefix(remote: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(remote.len() + 17);
    k.extend_from_slice(remote.as_bytes());
    k.push(0);
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn turn_keys_sort_by_sequence() {
        let id = Uuid::new_v4();
        assert!(turn(id, 9) < turn(id, 10));
        assert!(turn(id, 255) < turn(id, 256));
    }

    #[test]
    fn inbox_keys_give_back_their_parts() {
        let id = Uuid::new_v4();
        for millis in [-1_500, 0, 1_700_000_000_123] {
            let at = Utc.timestamp_millis_opt(millis).unwrap();
            assert_eq!(
                inbox_parts(&inbox(at, INBOX_FACT, id)),
                Some((at, INBOX_FACT, id))
            );
        }
        assert_eq!(inbox_parts(b"short"), None);
    }

    #[test]
    fn session_start_keys_sort_by_time_and_keep_agents_apart() {
        let rec = |agent: &str, millis: i64, id: u128| crate::model::SessionRecord {
            session_id: Uuid::from_u128(id),
            agent_id: agent.into(),
            user_id: "mark".into(),
            connection_id: "c".into(),
            started_at: Utc.timestamp_millis_opt(millis).unwrap(),
            ended_at: None,
            end_reason: None,
            turn_count: 0,
        };
        let (early, late) = (rec("ab", -1_500, 9), rec("ab", 7, 1));
        assert!(session_start(&early) < session_start(&late));
        assert!(agent_session_start(&early) < agent_session_start(&late));
        // same time: by id
        assert!(session_start(&rec("ab", 7, 0)) < session_start(&late));
        // an agent whose id extends another's is not in its family
        let other = agent_session_start(&rec("abc", 7, 1));
        assert!(!other.starts_with(&session_starts_prefix(Some("ab"))));
        assert!(!session_start(&late).starts_with(&session_starts_prefix(Some("ab"))));
        // the value tells the owner, the key's tail the id
        assert_eq!(
            owner_parts(&session_owner(&late)),
            Some((&b"ab"[..], &b"mark"[..]))
        );
        assert_eq!(tail_id(&agent_session_start(&late)), Some(late.session_id));
        assert_eq!(tail_id(b"short"), None);
    }

    #[test]
    fn summary_keys_sort_by_time_even_before_1970() {
        let id = Uuid::nil();
        let a = summary(
            "a",
            SummaryType::Session,
            Utc.timestamp_opt(-5, 0).unwrap(),
            id,
        );
        let b = summary(
            "a",
            SummaryType::Session,
            Utc.timestamp_opt(5, 0).unwrap(),
            id,
        );
        assert!(a < b);
        // an agent whose id extends another's never interleaves with it
        let c = summary(
            "ab",
            SummaryType::Session,
            Utc.timestamp_opt(0, 0).unwrap(),
            id,
        );
        assert!(!c.starts_with(&summaries_prefix("a", SummaryType::Session)));
    }
}
