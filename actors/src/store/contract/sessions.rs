//! The backend contract on sessions and their turns: listings, reads,
//! ends, and reads off the writer.

use super::*;

fn ids(v: Vec<SessionRecord>) -> Vec<u128> {
    v.into_iter().map(|s| s.session_id.as_u128()).collect()
}

pub(super) async fn sessions_are_listed_by_agent_and_user_in_start_order(h: &Harness) {
    let b = h.open().await;
    // "ab" and "abc" share a prefix; they are different users.
    b.open_session(&opened(3, "kairix", "ab", 30))
        .await
        .unwrap();
    b.open_session(&opened(1, "kairix", "abc", 10))
        .await
        .unwrap();
    b.open_session(&opened(2, "kairix", "ab", 20))
        .await
        .unwrap();
    b.open_session(&opened(4, "kairi", "ab", 5)).await.unwrap();
    let e = ended(opened(2, "kairix", "ab", 20), 0);
    b.end_session(&e, e.ended_at.unwrap()).await.unwrap();

    assert_eq!(ids(b.user_sessions("kairix", "ab").await.unwrap()), [2, 3]);
    assert_eq!(ids(b.user_sessions("kairix", "abc").await.unwrap()), [1]);
    assert_eq!(ids(b.sessions(Some("kairix")).await.unwrap()), [1, 2, 3]);
    assert_eq!(ids(b.sessions(Some("kairi")).await.unwrap()), [4]);
    assert_eq!(ids(b.sessions(None).await.unwrap()), [4, 1, 2, 3]);
    assert!(b.user_sessions("kairix", "a").await.unwrap().is_empty());
    assert_eq!(ids(b.open_sessions().await.unwrap()), [4, 1, 3]);
    let two = b.session(Uuid::from_u128(2)).await.unwrap().unwrap();
    assert_eq!(two, e);
    assert!(b.session(Uuid::from_u128(9)).await.unwrap().is_none());
    // no turns: nothing to reflect on
    assert!(b.queued().await.unwrap().is_empty());
}

pub(super) async fn turns_are_read_back_in_order_before_and_after_a_flush(h: &Harness) {
    let b = h.open().await;
    let rec = opened(1, "kairix", "mark", 0);
    let id = rec.session_id;
    b.open_session(&rec).await.unwrap();
    for seq in [0, 1, 2, 3, 10] {
        append(&*b, id, seq, &format!("turn {seq}")).await;
    }
    // Read before any flush: every turn written is seen.
    let texts = |v: Vec<(u32, ConversationTurn)>| -> Vec<(u32, String)> {
        v.into_iter().map(|(n, t)| (n, t.user_message)).collect()
    };
    assert_eq!(
        texts(b.numbered_turns(id).await.unwrap()),
        [0, 1, 2, 3, 10].map(|n| (n, format!("turn {n}")))
    );
    // Written again: the latest value stands, in one batch or across two.
    append(&*b, id, 3, "turn 3 again").await;
    append(&*b, id, 3, "turn 3 once more").await;
    b.flush().await.unwrap();
    append(&*b, id, 4, "turn 4").await;
    assert_eq!(
        b.turn(id, 3).await.unwrap().unwrap().user_message,
        "turn 3 once more"
    );
    assert!(b.turn(id, 5).await.unwrap().is_none());
    assert_eq!(b.turns(id).await.unwrap().len(), 6);
    assert!(b.turns(Uuid::from_u128(77)).await.unwrap().is_empty());
    // A session with its turns, for a reflection.
    let (rec2, turns) = b.load_session(id).await.unwrap().unwrap();
    assert_eq!((rec2, turns.len()), (rec, 6));
    assert!(b.load_session(Uuid::from_u128(77)).await.unwrap().is_none());
    // A NUL in a turn is kept like any other character.
    append(&*b, id, 11, "nul \u{0} inside").await;
    b.flush().await.unwrap();
    assert_eq!(
        b.turn(id, 11).await.unwrap().unwrap().user_message,
        "nul \u{0} inside"
    );
}

pub(super) async fn ending_a_session_queues_its_reflection_with_its_turns(h: &Harness) {
    let b = h.open().await;
    let rec = opened(1, "kairix", "mark", 0);
    let id = rec.session_id;
    b.open_session(&rec).await.unwrap();
    append(&*b, id, 0, "hello").await;
    append(&*b, id, 1, "bye").await;
    // An orphan (its actor gone) ends with its stored turns counted, at
    // its last turn when recovered.
    let closed = b
        .close_orphan(id, EndReason::Recovered, at(6, 0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(closed.turn_count, 2);
    assert_eq!(closed.ended_at, Some(at(5, 0)));
    assert!(b
        .close_orphan(id, EndReason::Recovered, at(6, 0))
        .await
        .unwrap()
        .is_none());
    assert!(matches!(
        b.close_orphan(Uuid::from_u128(5), EndReason::Crashed, at(6, 0))
            .await,
        Err(StoreError::SessionNotFound(_))
    ));
    let queued = b.queued().await.unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!(
        (queued[0].session_id, queued[0].enqueued_at),
        (id, at(6, 0))
    );
    assert!(b.open_sessions().await.unwrap().is_empty());
    b.drop_job(id).await.unwrap();
    assert!(b.queued().await.unwrap().is_empty());
}

/// The Store actor answers reads that scan from the blocking pool; a read
/// sent after writes still sees every one of them (turns a backend has not
/// written yet among them).
pub(super) async fn a_read_off_the_writer_sees_the_writes_sent_before_it(h: &Harness) {
    let b = h.open().await;
    let (store, handle) = spawn_store(b).await;
    let rec = opened(7, "kairix", "mark", 0);
    let id = rec.session_id;
    store.cast(StoreMsg::OpenSession(rec.clone())).unwrap();
    for seq in 0..200u32 {
        let turn = turn(&format!("turn {seq}"), rec.started_at);
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
    let e = ended(rec, 200);
    store.cast(StoreMsg::EndSession(e)).unwrap();
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

fn listing(limit: usize) -> SessionListing {
    SessionListing {
        limit,
        ..SessionListing::default()
    }
}

fn agents(names: &[&str]) -> Option<Vec<String>> {
    Some(names.iter().map(|a| a.to_string()).collect())
}

pub(super) async fn sessions_are_listed_newest_first_and_read_no_further_than_the_limit(
    h: &Harness,
) {
    let b = h.open().await;
    // 1 (oldest) to 5 (newest); 2 and 4 live.
    let calls = [
        (1, "kairix", "mark", 10, true),
        (2, "kairix", "ada", 20, false),
        (3, "nova", "mark", 30, true),
        (4, "kairix", "mark", 40, false),
        (5, "kairix", "mark", 50, true),
    ];
    for (id, agent, user, minute, end) in calls {
        let rec = opened(id, agent, user, minute);
        b.open_session(&rec).await.unwrap();
        if end {
            let e = ended(rec, 0);
            b.end_session(&e, e.ended_at.unwrap()).await.unwrap();
        }
    }
    let list = |q: SessionListing| {
        let b = b.clone();
        async move { ids(b.list_sessions(&q).await.unwrap()) }
    };
    let before = |id: u128| {
        let (_, _, _, minute, _) = calls[id as usize - 1];
        Some((at(5, minute), Uuid::from_u128(id)))
    };
    assert_eq!(list(listing(10)).await, [5, 4, 3, 2, 1]);
    assert_eq!(list(listing(2)).await, [5, 4]);
    assert!(list(listing(0)).await.is_empty());
    // the next page starts after the last session of the one before
    let next = SessionListing {
        before: before(4),
        ..listing(2)
    };
    assert_eq!(list(next).await, [3, 2]);
    // agents: one, several (a token's), none
    let of = |names: &[&str], limit| SessionListing {
        agents: agents(names),
        ..listing(limit)
    };
    assert_eq!(list(of(&["kairix"], 10)).await, [5, 4, 2, 1]);
    assert_eq!(list(of(&["kairix", "nova"], 10)).await, [5, 4, 3, 2, 1]);
    assert_eq!(list(of(&["nova", "kairix"], 3)).await, [5, 4, 3]);
    assert_eq!(list(of(&["nova"], 10)).await, [3]);
    assert!(list(of(&[], 10)).await.is_empty());
    assert!(list(of(&["kairi"], 10)).await.is_empty());
    // a user, with every agent, one or several
    let mark = |names: Option<&[&str]>, limit| SessionListing {
        agents: names.and_then(agents),
        user_id: Some("mark".into()),
        ..listing(limit)
    };
    assert_eq!(list(mark(None, 10)).await, [5, 4, 3, 1]);
    assert_eq!(list(mark(Some(&["kairix"]), 10)).await, [5, 4, 1]);
    assert_eq!(list(mark(Some(&["kairix", "nova"]), 3)).await, [5, 4, 3]);
    let next = SessionListing {
        before: before(4),
        ..mark(None, 10)
    };
    assert_eq!(list(next).await, [3, 1]);
    // live or ended
    let live = |live, limit| SessionListing {
        live: Some(live),
        ..listing(limit)
    };
    assert_eq!(list(live(true, 10)).await, [4, 2]);
    assert_eq!(list(live(false, 10)).await, [5, 3, 1]);
    assert_eq!(list(live(false, 1)).await, [5]);
    let next = SessionListing {
        before: before(4),
        ..live(true, 10)
    };
    assert_eq!(list(next).await, [2]);
    let next = SessionListing {
        before: before(5),
        agents: agents(&["kairix"]),
        ..live(false, 10)
    };
    assert_eq!(list(next).await, [1]);
    let theirs = SessionListing {
        agents: agents(&["kairix"]),
        user_id: Some("mark".into()),
        ..live(true, 10)
    };
    assert_eq!(list(theirs).await, [4]);

    // A page reads the sessions it returns and no older one: the oldest,
    // damaged, is met only by a listing that reaches it.
    drop(b);
    h.damage("sessions", Uuid::from_u128(1)).await;
    let b = h.open().await;
    for q in [
        listing(4),
        of(&["kairix"], 3),
        of(&["kairix", "nova"], 4),
        mark(None, 3),
        mark(Some(&["kairix"]), 2),
        live(false, 2),
    ] {
        assert_eq!(b.list_sessions(&q).await.unwrap().len(), q.limit);
        assert_eq!(b.skipped_records(), 0, "{q:?} read past its page");
    }
    assert_eq!(
        ids(b.list_sessions(&listing(10)).await.unwrap()),
        [5, 4, 3, 2]
    );
    assert_eq!(b.skipped_records(), 1);
}
