use super::mirror::Held;
use super::*;
use crate::store::contract::{call, fact, opened};
use chrono::TimeZone;

fn summary(id: Uuid, text: &str) -> ConversationSummary {
    let t = Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap();
    ConversationSummary::session(id, "kairix", "mark", t, text)
}

#[test]
fn generations_move_only_the_parts_written() {
    let g = Generations::default();
    let start = g.get("kairix", "mark");
    assert_eq!(start, Stamp::default());
    g.bump("kairix", Parts::FACTS);
    let facts = g.get("kairix", "mark");
    assert_eq!(facts.changed_since(&start), Parts::FACTS);
    g.bump("kairix", Parts::SUMMARIES | Parts::BLOCKS);
    let now = g.get("kairix", "mark");
    assert_eq!(now.changed_since(&facts), Parts::SUMMARIES | Parts::BLOCKS);
    assert_eq!(
        now.changed_since(&start),
        Parts::SUMMARIES | Parts::BLOCKS | Parts::FACTS
    );
    assert!(now.changed_since(&now).is_empty());
    // one user's write moves that user's counters alone
    let ada = g.get("kairix", "ada");
    g.bump_user("kairix", "mark", Parts::SESSIONS | Parts::SUMMARIES);
    assert_eq!(
        g.get("kairix", "mark").changed_since(&now),
        Parts::SESSIONS | Parts::SUMMARIES
    );
    assert!(g.get("kairix", "ada").changed_since(&ada).is_empty());
    g.bump("kairix", Parts::ALL);
    assert_eq!(g.get("kairix", "ada").changed_since(&ada), Parts::ALL);
    // another agent's counters are its own
    assert_eq!(g.get("juniper", "mark"), Stamp::default());
}

#[test]
fn context_parts_reads_only_what_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
    let (id, summary) = call("mark", 1);
    trees
        .complete_reflection(
            &summary,
            &[],
            &[fact("mark", "Has a dog called Biscuit", Some("dog"), id)],
        )
        .unwrap();
    let only = trees.source_parts("kairix", "mark", Parts::FACTS).unwrap();
    assert_eq!(only.facts.as_ref().map(CurrentFacts::len), Some(1));
    assert!(only.summaries.is_none() && only.blocks.is_none());
    assert!(only.ended.is_none() && only.topics.is_none());
    let all = trees.source_parts("kairix", "mark", Parts::ALL).unwrap();
    assert_eq!(all.summaries.map(|s| s.len()), Some(1));
    assert!(all.blocks.is_some() && all.ended.is_some() && all.topics.is_some());
    let summaries = trees
        .source_parts("kairix", "mark", Parts::SUMMARIES)
        .unwrap();
    assert!(summaries.summaries.is_some() && summaries.facts.is_none());
}

#[test]
fn a_selection_of_several_groups_takes_each_record_once() {
    let mut held: Held<FactRecord> = Held {
        by_key: HashMap::new(),
        groups: HashMap::new(),
    };
    let call = Uuid::new_v4();
    for (n, (user, shared)) in [
        ("mark", false),
        ("mark", true),
        ("ada", true),
        ("ada", false),
    ]
    .into_iter()
    .enumerate()
    {
        let mut f = fact(user, &format!("fact {n}"), None, call);
        if shared {
            f.visibility = Visibility::Shared;
        }
        let rec = FactRecord {
            fact: f,
            history: Default::default(),
        };
        held.insert(
            ::sled::IVec::from(format!("k{n}").as_bytes()),
            std::sync::Arc::new(rec),
        );
    }
    let contents = |groups: &[(&str, &str)]| {
        let mut c: Vec<String> = held
            .select(groups, &|_| true)
            .iter()
            .map(|f| f.content.clone())
            .collect();
        c.sort();
        c
    };
    let want = ["fact 0", "fact 1", "fact 2"];
    assert_eq!(contents(&[("kairix", "mark"), ("kairix", "")]), want);
    assert_eq!(contents(&[("kairix", ""), ("kairix", "mark")]), want);
    assert_eq!(contents(&[("kairix", "")]), ["fact 1", "fact 2"]);
    assert_eq!(contents(&[("kairix", "mark")]), ["fact 0", "fact 1"]);
}

#[test]
fn facts_planned_against_the_mirror_are_those_of_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
    let scanned = |trees: &Trees| {
        let mut f: Vec<FactRecord> = trees
            .scan(
                &trees.facts,
                keys::TREE_FACTS,
                trees
                    .facts
                    .scan_prefix(keys::facts_prefix("kairix", "mark")),
            )
            .unwrap();
        f.sort_by_key(|f| (f.extracted_at, f.fact_id));
        f
    };
    let (a, first) = call("mark", 1);
    trees
        .complete_reflection(
            &first,
            &[],
            &[fact("mark", "Lives in Austin", Some("home"), a)],
        )
        .unwrap();
    // not built yet: read from the tree
    assert!(Trees::mirror_if_built(&trees.mirror_facts, &[("kairix", "mark")]).is_none());
    // a context read builds it (and the other mirrors)
    trees.source_parts("kairix", "mark", Parts::ALL).unwrap();
    let held = Trees::mirror_if_built(&trees.mirror_facts, &[("kairix", "mark")]);
    assert_eq!(held.map(|h| h.len()), Some(1));
    // the same fact again adds nothing; a new home supersedes the old
    let (b, second) = call("mark", 2);
    trees
        .complete_reflection(
            &second,
            &[],
            &[
                fact("mark", "Lives in Austin", Some("home"), b),
                fact("mark", "Lives in Denver", Some("home"), b),
            ],
        )
        .unwrap();
    let facts = trees.user_facts("kairix", "mark").unwrap();
    assert_eq!(facts, scanned(&trees));
    let mut contents: Vec<(&str, bool)> = facts
        .iter()
        .map(|f| (f.content.as_str(), f.is_current()))
        .collect();
    contents.sort();
    assert_eq!(
        contents,
        [("Lives in Austin", false), ("Lives in Denver", true)]
    );
    let held = Trees::mirror_if_built(&trees.mirror_facts, &[("kairix", "mark")]);
    assert_eq!(held.map(|h| h.len()), Some(2), "planned from the mirror");
    assert!(trees.mirrors_match().unwrap());
}

#[test]
fn a_folder_in_use_is_a_locked_error_and_opens_once_released() {
    let dir = tempfile::tempdir().unwrap();
    let settings = StoreSettings::default();
    let first = Trees::open(dir.path(), &settings).unwrap();
    let err = Trees::open_waiting(dir.path(), &settings, Duration::ZERO)
        .err()
        .expect("the folder is locked");
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    assert!(err.to_string().contains("in use"), "{err}");
    drop(first);
    Trees::open_waiting(dir.path(), &settings, Duration::ZERO).unwrap();
}

#[test]
fn facts_stored_before_their_call_time_was_kept_get_it_from_their_session() {
    let dir = tempfile::tempdir().unwrap();
    let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
    // an old record: no stated_at, extracted long after its call
    let old_call = SessionRecord {
        session_id: Uuid::new_v4(),
        agent_id: "kairix".into(),
        user_id: "mark".into(),
        connection_id: "c1".into(),
        started_at: Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap(),
        ended_at: Some(Utc.with_ymd_and_hms(2026, 3, 1, 9, 5, 0).unwrap()),
        end_reason: Some(EndReason::Disconnect),
        turn_count: 1,
    };
    trees.end_session(&old_call, old_call.started_at).unwrap();
    let mut old = fact("mark", "Lives in Austin", Some("home"), old_call.session_id);
    old.extracted_at = Utc.with_ymd_and_hms(2026, 3, 20, 9, 0, 0).unwrap();
    let json = serde_json::to_vec(&old).unwrap();
    trees
        .facts
        .insert(keys::fact("kairix", "mark", old.fact_id), json)
        .unwrap();
    trees
        .fact_index
        .insert(
            old.fact_id.as_bytes(),
            keys::fact("kairix", "mark", old.fact_id),
        )
        .unwrap();
    // a call after the old one, reflected before the old fact's extraction time
    let (c2, s2) = call("mark", 5);
    let denver = fact("mark", "Moved to Denver", Some("home"), c2);
    trees
        .complete_reflection(&s2, &[], std::slice::from_ref(&denver))
        .unwrap();
    let austin = trees.fact(old.fact_id).unwrap().unwrap();
    assert_eq!(austin.history.stated_at, Some(old_call.started_at));
    assert_eq!(austin.history.superseded_by, Some(denver.fact_id));
    assert!(trees.fact(denver.fact_id).unwrap().unwrap().is_current());
}

#[test]
fn a_corrupt_record_is_skipped_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
    let id = Uuid::new_v4();
    trees
        .complete_reflection(&summary(id, "ok"), &[], &[])
        .unwrap();
    trees
        .summaries
        .insert(
            keys::summary("kairix", SummaryType::Session, Utc::now(), Uuid::new_v4()),
            &b"{broken"[..],
        )
        .unwrap();
    let all = trees
        .summaries("kairix", SummaryType::Session, None)
        .unwrap();
    assert_eq!(all.len(), 1);
}

#[test]
fn sessions_are_indexed_by_agent_and_user_and_folders_from_before_get_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let ids = |v: Vec<SessionRecord>| -> Vec<u128> {
        v.into_iter().map(|s| s.session_id.as_u128()).collect()
    };
    {
        let trees = Trees::open(dir.path(), &Default::default()).unwrap();
        // "ab" and "abc" share a prefix; the index keeps them apart.
        trees.open_session(&opened(3, "kairix", "ab", 30)).unwrap();
        trees.open_session(&opened(1, "kairix", "abc", 10)).unwrap();
        trees.open_session(&opened(2, "kairix", "ab", 20)).unwrap();
        trees.open_session(&opened(4, "kairi", "ab", 5)).unwrap();
        let mut ended = opened(2, "kairix", "ab", 20);
        ended.ended_at = Some(ended.started_at);
        ended.end_reason = Some(EndReason::Disconnect);
        trees.end_session(&ended, ended.started_at).unwrap();

        assert_eq!(ids(trees.user_sessions("kairix", "ab").unwrap()), [2, 3]);
        assert_eq!(ids(trees.user_sessions("kairix", "abc").unwrap()), [1]);
        assert_eq!(ids(trees.sessions(Some("kairix")).unwrap()), [1, 2, 3]);
        assert_eq!(ids(trees.sessions(Some("kairi")).unwrap()), [4]);
        assert_eq!(ids(trees.sessions(None).unwrap()), [4, 1, 2, 3]);
        assert!(trees.user_sessions("kairix", "a").unwrap().is_empty());

        // A folder written before the index: no rows, no marker.
        trees.user_sessions.clear().unwrap();
        trees.meta.remove(keys::USER_SESSIONS_BUILT).unwrap();
        trees.db.flush().unwrap();
    }
    let trees = Trees::open(dir.path(), &Default::default()).unwrap();
    assert_eq!(trees.user_sessions.len(), 4, "built again at open");
    assert_eq!(ids(trees.user_sessions("kairix", "ab").unwrap()), [2, 3]);
    assert_eq!(ids(trees.sessions(Some("kairix")).unwrap()), [1, 2, 3]);
    // Built once: a second open finds the marker and leaves the tree be.
    trees.user_sessions.clear().unwrap();
    drop(trees);
    let trees = Trees::open(dir.path(), &Default::default()).unwrap();
    assert!(trees.user_sessions.is_empty());
}

#[test]
fn a_folder_from_before_the_listing_indexes_gets_them_built_once_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let ids = |v: Vec<SessionRecord>| -> Vec<u128> {
        v.into_iter().map(|s| s.session_id.as_u128()).collect()
    };
    let letter = |id: u128, minute| DeadLetter {
        session_id: Uuid::from_u128(id),
        agent_id: "kairix".into(),
        user_id: "mark".into(),
        attempts: 3,
        error: "timed out".into(),
        error_kind: "timeout".into(),
        failed_at: Utc.with_ymd_and_hms(2026, 3, 5, 10, minute, 0).unwrap(),
    };
    let newest = SessionListing {
        limit: 10,
        ..SessionListing::default()
    };
    let kairix = SessionListing {
        agents: Some(vec!["kairix".into()]),
        ..newest.clone()
    };
    {
        let trees = Trees::open(dir.path(), &Default::default()).unwrap();
        trees.open_session(&opened(1, "kairix", "ab", 10)).unwrap();
        trees.open_session(&opened(2, "nova", "ab", 20)).unwrap();
        trees.open_session(&opened(3, "kairix", "abc", 30)).unwrap();
        trees.dead_letter(&letter(1, 5)).unwrap();
        trees.dead_letter(&letter(3, 1)).unwrap();
        assert_eq!(ids(trees.list_sessions(&newest).unwrap()), [3, 2, 1]);

        // A folder written before the indexes: no rows, no markers (and no
        // count but the one made at open).
        trees.session_starts.clear().unwrap();
        trees.agent_dead_letters.clear().unwrap();
        trees.meta.remove(keys::SESSION_STARTS_BUILT).unwrap();
        trees.meta.remove(keys::AGENT_DEAD_LETTERS_BUILT).unwrap();
        trees.db.flush().unwrap();
    }
    let trees = Trees::open(dir.path(), &Default::default()).unwrap();
    assert_eq!(trees.session_starts.len(), 6, "two rows a session");
    assert_eq!(ids(trees.list_sessions(&newest).unwrap()), [3, 2, 1]);
    assert_eq!(ids(trees.list_sessions(&kairix).unwrap()), [3, 1]);
    let listed: Vec<u128> = trees
        .agent_dead_letters("kairix", None, 10)
        .unwrap()
        .into_iter()
        .map(|d| d.session_id.as_u128())
        .collect();
    assert_eq!(listed, [3, 1]);
    assert_eq!(trees.dead_letter_count(), 2);
    // Built once: a second open finds the markers and leaves the trees be.
    trees.session_starts.clear().unwrap();
    trees.agent_dead_letters.clear().unwrap();
    drop(trees);
    let trees = Trees::open(dir.path(), &Default::default()).unwrap();
    assert!(trees.session_starts.is_empty() && trees.agent_dead_letters.is_empty());
}

#[test]
fn a_forget_takes_the_users_index_rows_with_their_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let trees = Trees::open(dir.path(), &Default::default()).unwrap();
    trees.open_session(&opened(1, "kairix", "zoe", 1)).unwrap();
    trees.open_session(&opened(2, "nova", "zoe", 2)).unwrap();
    trees.open_session(&opened(3, "kairix", "ada", 3)).unwrap();
    let r = trees.forget_user("zoe", Some("kairix")).unwrap();
    assert_eq!(r.sessions, 1);
    assert!(trees.user_sessions("kairix", "zoe").unwrap().is_empty());
    assert_eq!(trees.user_sessions("nova", "zoe").unwrap().len(), 1);
    let r = trees.forget_user("zoe", None).unwrap();
    assert_eq!(r.sessions, 1);
    assert_eq!(trees.user_sessions.len(), 1, "only ada's row is left");
    assert_eq!(
        trees.session_starts.len(),
        2,
        "only ada's two rows are left"
    );
}

#[test]
fn a_folder_from_before_speakers_were_kept_is_upgraded_and_its_facts_are_the_users() {
    let dir = tempfile::tempdir().unwrap();
    let settings = StoreSettings::default();
    let (c, _) = call("mark", 1);
    let id = {
        let trees = Trees::open(dir.path(), &settings).unwrap();
        // what version 1 wrote: its mark, and a fact without a speaker
        trees
            .meta
            .insert(keys::SCHEMA_KEY, &1u32.to_be_bytes())
            .unwrap();
        let f = fact("mark", "Keeps bees", None, c);
        let mut body = serde_json::to_value(FactRecord {
            fact: f.clone(),
            history: Default::default(),
        })
        .unwrap();
        body.as_object_mut().unwrap().remove("speaker");
        let key = keys::fact("kairix", "mark", f.fact_id);
        trees
            .facts
            .insert(&key, serde_json::to_vec(&body).unwrap())
            .unwrap();
        trees.fact_index.insert(f.fact_id.as_bytes(), key).unwrap();
        trees.db.flush().unwrap();
        f.fact_id
    };
    let trees = Trees::open(dir.path(), &settings).unwrap();
    let mark = trees.meta.get(keys::SCHEMA_KEY).unwrap().unwrap();
    assert_eq!(mark.as_ref(), keys::SCHEMA_VERSION.to_be_bytes());
    let f = trees.fact(id).unwrap().expect("read back");
    assert_eq!(f.speaker, crate::model::Speaker::User);
}

#[test]
fn inbox_keys_that_do_not_read_never_end_a_batch_early() {
    let dir = tempfile::tempdir().unwrap();
    let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
    let t = Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap();
    // Keys of a kind no version of this build writes (a newer version's),
    // and one too short, before a summary's entry.
    for n in 0..10u128 {
        let k = keys::inbox(t, 200, Uuid::from_u128(n));
        trees.rollup_inbox.insert(&k[..], &b"kairix"[..]).unwrap();
    }
    let mut short = keys::inbox(t, 200, Uuid::nil()).to_vec();
    short.truncate(9);
    trees.rollup_inbox.insert(short, &b"kairix"[..]).unwrap();
    let id = Uuid::from_u128(99);
    let later = t + chrono::Duration::seconds(1);
    trees
        .rollup_inbox
        .insert(
            &keys::inbox(later, keys::INBOX_SUMMARY, id)[..],
            &b"kairix"[..],
        )
        .unwrap();
    let got = trees.inbox(None, 4).unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].key.id, got[0].key.item), (id, InboxItem::Summary));
    // The unreadable keys are kept, for the version that wrote them.
    assert_eq!(trees.rollup_inbox.len(), 12);
}
