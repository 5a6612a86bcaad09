use super::mirror::Held;
use super::*;
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
    let only = trees.context_parts("kairix", "mark", Parts::FACTS).unwrap();
    assert_eq!(only.facts.as_ref().map(CurrentFacts::len), Some(1));
    assert!(only.summaries.is_none() && only.blocks.is_none());
    assert!(only.ended.is_none() && only.topics.is_none());
    let all = trees.context_parts("kairix", "mark", Parts::ALL).unwrap();
    assert_eq!(all.summaries.map(|s| s.len()), Some(1));
    assert!(all.blocks.is_some() && all.ended.is_some() && all.topics.is_some());
    let summaries = trees
        .context_parts("kairix", "mark", Parts::SUMMARIES)
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
    trees.context_parts("kairix", "mark", Parts::ALL).unwrap();
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

fn fact(user: &str, content: &str, subject: Option<&str>, call: Uuid) -> Fact {
    Fact {
        fact_id: Uuid::new_v4(),
        agent_id: "kairix".into(),
        user_id: user.into(),
        category: crate::model::FactCategory::Other,
        content: content.into(),
        subject: subject.map(str::to_string),
        visibility: Visibility::Private,
        source_session_id: Some(call),
        extracted_at: Utc.with_ymd_and_hms(2026, 3, 9, 9, 0, 0).unwrap(),
        conflicts_with: None,
    }
}

/// A call of `user` on day `day` of March 2026 and its summary.
fn call(user: &str, day: u32) -> (Uuid, ConversationSummary) {
    let id = Uuid::new_v4();
    let at = Utc.with_ymd_and_hms(2026, 3, day, 9, 0, 0).unwrap();
    (
        id,
        ConversationSummary::session(id, "kairix", user, at, "a call"),
    )
}

#[test]
fn facts_are_deduplicated_superseded_conflicts_flagged_and_owned() {
    let dir = tempfile::tempdir().unwrap();
    let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
    let (c1, s1) = call("mark", 1);
    let (c2, s2) = call("ada", 1);
    let works = fact("mark", "Works at Initech", Some("employer"), c1);
    // one reflection per user, as the reflector stores them
    trees
        .complete_reflection(
            &s1,
            &[],
            &[works.clone(), fact("mark", "Prefers mornings", None, c1)],
        )
        .unwrap();
    trees
        .complete_reflection(&s2, &[], &[fact("ada", "Lives in Porto", Some("home"), c2)])
        .unwrap();
    let (c3, s3) = call("mark", 2);
    let globex = fact("mark", "Works at Globex", Some("employer"), c3);
    let second = [
        // the same fact, other case and spacing: dropped
        fact("mark", "works  at initech.", Some("employer"), c3),
        // a later call's value on the subject: the new current one
        globex.clone(),
        fact("mark", "Allergic to peanuts", None, c3),
    ];
    trees.complete_reflection(&s3, &[], &second).unwrap();
    // two values in one call: a conflict, both current
    let (c4, s4) = call("mark", 3);
    let austin = fact("mark", "Lives in Austin", Some("home"), c4);
    let denver = fact("mark", "Lives in Denver", Some("home"), c4);
    trees
        .complete_reflection(&s4, &[], &[austin.clone(), denver.clone()])
        .unwrap();

    let mark = trees.user_facts("kairix", "mark").unwrap();
    let mut contents: Vec<&str> = mark.iter().map(|f| f.content.as_str()).collect();
    contents.sort_unstable();
    assert_eq!(
        contents,
        [
            "Allergic to peanuts",
            "Lives in Austin",
            "Lives in Denver",
            "Prefers mornings",
            "Works at Globex",
            "Works at Initech"
        ]
    );
    let by = |c: &str| mark.iter().find(|f| f.content == c).unwrap().clone();
    let initech = by("Works at Initech");
    assert_eq!(initech.history.superseded_by, Some(globex.fact_id));
    assert_eq!(initech.history.superseded_at, Some(s3.period_start));
    assert_eq!(initech.history.stated_at, Some(s1.period_start));
    assert!(by("Works at Globex").is_current());
    assert_eq!(by("Works at Globex").conflicts_with, None);
    let homes = [by("Lives in Austin"), by("Lives in Denver")];
    assert!(homes.iter().all(FactRecord::is_current));
    assert_eq!(
        homes.iter().filter_map(|f| f.conflicts_with).count(),
        1,
        "one of the two names the other"
    );

    // the context holds current facts, and what each replaced
    let ctx = trees.context_sources("kairix", "mark").unwrap();
    let mut current: Vec<&str> = ctx.facts.iter().map(|f| f.content.as_str()).collect();
    current.sort_unstable();
    assert_eq!(
        current,
        [
            "Allergic to peanuts",
            "Lives in Austin",
            "Lives in Denver",
            "Prefers mornings",
            "Works at Globex"
        ]
    );
    let earlier = ctx.facts.earlier(globex.fact_id).unwrap();
    assert_eq!(
        (earlier.content.as_str(), earlier.until, earlier.fact_id),
        ("Works at Initech", s3.period_start, works.fact_id)
    );
    assert_eq!(ctx.facts.earlier.len(), 1);

    // deleting the current value makes the one it replaced current
    trees.delete_fact(globex.fact_id, "mark").unwrap();
    assert!(trees.fact(works.fact_id).unwrap().unwrap().is_current());
    assert!(trees
        .context_sources("kairix", "mark")
        .unwrap()
        .facts
        .earlier
        .is_empty());

    // visibility: ada sees only her own until mark shares one
    let ada_sees = |t: &Trees| -> Vec<String> {
        let mut v: Vec<String> = t
            .visible_facts("kairix", "ada")
            .unwrap()
            .into_iter()
            .map(|f| f.fact.content)
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(ada_sees(&trees), ["Lives in Porto"]);
    let id = by("Prefers mornings").fact_id;
    assert!(matches!(
        trees.set_fact_visibility(id, "ada", Visibility::Shared),
        Err(StoreError::NotFactOwner(_))
    ));
    assert_eq!(ada_sees(&trees), ["Lives in Porto"]);
    trees
        .set_fact_visibility(id, "mark", Visibility::Shared)
        .unwrap();
    assert_eq!(ada_sees(&trees), ["Lives in Porto", "Prefers mornings"]);
    trees
        .set_fact_visibility(id, "mark", Visibility::Private)
        .unwrap();
    assert_eq!(ada_sees(&trees), ["Lives in Porto"]);
    assert_eq!(
        trees
            .fact(works.fact_id)
            .unwrap()
            .unwrap()
            .history
            .stated_at,
        Some(s1.period_start),
        "a change of visibility keeps the history"
    );

    // deleting: only the owner; unknown ids are errors
    assert!(matches!(
        trees.delete_fact(id, "ada"),
        Err(StoreError::NotFactOwner(_))
    ));
    assert!(trees.fact(id).unwrap().is_some());
    trees.delete_fact(id, "mark").unwrap();
    assert!(trees.fact(id).unwrap().is_none());
    assert_eq!(trees.user_facts("kairix", "mark").unwrap().len(), 4);
    let unknown = Uuid::new_v4();
    assert!(matches!(
        trees.delete_fact(unknown, "mark"),
        Err(StoreError::FactNotFound(_))
    ));
    // another agent's facts are another namespace
    assert!(trees.visible_facts("other", "mark").unwrap().is_empty());
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
fn summaries_from_before_the_inbox_are_queued_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
    trees.fill_inbox = false;
    let id = Uuid::new_v4();
    trees
        .complete_reflection(&summary(id, "An older summary"), &[], &[])
        .unwrap();
    assert!(trees.inbox(None, 10).unwrap().is_empty());
    assert_eq!(trees.backfill_inbox().unwrap(), 1);
    let queued = trees.inbox(None, 10).unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!((queued[0].id, queued[0].kind), (id, keys::INBOX_SUMMARY));
    assert_eq!(queued[0].agent_id, "kairix");
    // once per folder
    trees.inbox_done(&[queued[0].key.clone()]).unwrap();
    assert_eq!(trees.backfill_inbox().unwrap(), 0);
    assert!(trees.inbox(None, 10).unwrap().is_empty());
}

#[test]
fn storing_a_session_summary_twice_is_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
    let id = Uuid::new_v4();
    assert!(trees
        .complete_reflection(&summary(id, "first"), &[], &[])
        .unwrap());
    assert!(!trees
        .complete_reflection(&summary(id, "second"), &[], &[])
        .unwrap());
    let all = trees
        .summaries("kairix", SummaryType::Session, None)
        .unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].summary_text, "first");
    assert_eq!(trees.agent("kairix").unwrap().summary_version, 1);
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

fn opened(id: u128, agent: &str, user: &str, minute: u32) -> SessionRecord {
    SessionRecord {
        session_id: Uuid::from_u128(id),
        agent_id: agent.into(),
        user_id: user.into(),
        connection_id: format!("c{id}"),
        started_at: Utc.with_ymd_and_hms(2026, 1, 5, 9, minute, 0).unwrap(),
        ended_at: None,
        end_reason: None,
        turn_count: 0,
    }
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
}

/// The Store actor answers reads that scan from the blocking pool; a read
/// sent after writes still sees every one of them.
#[tokio::test]
async fn a_read_off_the_writer_sees_the_writes_sent_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let trees = Trees::open(dir.path(), &Default::default()).unwrap();
    let embed: std::sync::Arc<dyn crate::embed::Embed> =
        std::sync::Arc::new(crate::embed::HashingEmbed::default());
    let (store, handle) = Actor::spawn(
        None,
        StoreActor,
        StoreArgs {
            backend: std::sync::Arc::new(trees),
            settings: Default::default(),
            generations: Default::default(),
            search: std::sync::Arc::new(SearchIndex::new(&embed)),
        },
    )
    .await
    .unwrap();
    let rec = opened(7, "kairix", "mark", 0);
    let id = rec.session_id;
    store.cast(StoreMsg::OpenSession(rec.clone())).unwrap();
    for seq in 0..200u32 {
        let turn = ConversationTurn {
            user_message: format!("turn {seq}"),
            agent_response: "ok".into(),
            timestamp: rec.started_at,
        };
        store
            .cast(StoreMsg::append_turn(id, seq, &turn).unwrap())
            .unwrap();
        if seq % 50 == 49 {
            let turns = ractor::call!(store, StoreMsg::GetTurns, id)
                .unwrap()
                .unwrap();
            assert_eq!(turns.len() as u32, seq + 1);
            assert_eq!(turns.last().unwrap().user_message, format!("turn {seq}"));
        }
    }
    let mut ended = rec;
    ended.ended_at = Some(ended.started_at);
    ended.end_reason = Some(EndReason::Disconnect);
    ended.turn_count = 200;
    store.cast(StoreMsg::EndSession(ended)).unwrap();
    let listed = ractor::call!(store, StoreMsg::ListSessions, Some("kairix".into()))
        .unwrap()
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].ended_at.is_some(), "the end sent before the read");
    let queued = ractor::call!(store, StoreMsg::ListQueue).unwrap().unwrap();
    assert_eq!(queued.len(), 1);
    let (rec, turns) = ractor::call!(store, |reply| StoreMsg::LoadSession {
        session_id: id,
        reply
    })
    .unwrap()
    .unwrap()
    .unwrap();
    assert_eq!((rec.turn_count, turns.len()), (200, 200));
    store.stop(None);
    handle.await.unwrap();
}
