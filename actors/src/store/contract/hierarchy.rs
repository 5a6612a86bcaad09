//! The backend contract on the summary hierarchy: rollups, the Rollup
//! actor's inbox, topics and vectors.

use super::*;

pub(super) async fn rollups_are_stored_once_and_supersede_their_older_version(h: &Harness) {
    let b = h.open().await;
    let d1 = daily("kairix", "mark", 1, &[Uuid::from_u128(1)], "day one");
    assert!(b.put_rollup(&d1, None, Some(&vector(0.5))).await.unwrap());
    assert!(!b.put_rollup(&d1, None, None).await.unwrap(), "once");
    let mut d1b = daily(
        "kairix",
        "mark",
        1,
        &[Uuid::from_u128(1), Uuid::from_u128(2)],
        "day one, later",
    );
    d1b.supersedes = Some(d1.summary_id);
    assert!(b.put_rollup(&d1b, Some(d1.summary_id), None).await.unwrap());
    let d2 = daily("kairix", "mark", 2, &[Uuid::from_u128(3)], "day two");
    assert!(b.put_rollup(&d2, None, None).await.unwrap());
    let all = b
        .summaries("kairix", SummaryType::Daily, None)
        .await
        .unwrap();
    assert_eq!(all.len(), 3);
    let old = all.iter().find(|s| s.summary_id == d1.summary_id).unwrap();
    assert_eq!(old.superseded_by, Some(d1b.summary_id));
    let since = b
        .summaries("kairix", SummaryType::Daily, Some(at(3, 0)))
        .await
        .unwrap();
    assert_eq!(
        since.iter().map(|s| s.summary_id).collect::<Vec<_>>(),
        [d2.summary_id]
    );
    assert_eq!(
        b.latest_summary("kairix", SummaryType::Daily)
            .await
            .unwrap()
            .map(|s| s.summary_id),
        Some(d2.summary_id)
    );
    assert!(b
        .latest_summary("kairix", SummaryType::Weekly)
        .await
        .unwrap()
        .is_none());
    assert_eq!(b.vector(d1.summary_id).await.unwrap(), Some(vector(0.5)));
    assert_eq!(b.agent("kairix").await.unwrap().summary_version, 3);
    // cursors
    let day = NaiveDate::from_ymd_opt(2026, 3, 2).unwrap();
    assert!(b
        .rollup_cursor("kairix", Level::Daily)
        .await
        .unwrap()
        .is_none());
    b.set_rollup_cursor("kairix", Level::Daily, day)
        .await
        .unwrap();
    b.set_rollup_cursor("kairix", Level::Daily, day.succ_opt().unwrap())
        .await
        .unwrap();
    assert_eq!(
        b.rollup_cursor("kairix", Level::Daily).await.unwrap(),
        day.succ_opt()
    );
    // never back (a run whose lease lapsed, finishing late)
    b.set_rollup_cursor("kairix", Level::Daily, day)
        .await
        .unwrap();
    assert_eq!(
        b.rollup_cursor("kairix", Level::Daily).await.unwrap(),
        day.succ_opt()
    );
    assert!(b
        .rollup_cursor("kairix", Level::Weekly)
        .await
        .unwrap()
        .is_none());
    assert!(b
        .rollup_cursor("nova", Level::Daily)
        .await
        .unwrap()
        .is_none());
}

pub(super) async fn a_batch_of_rollups_is_stored_once_each_then_its_cursors_move_forward(
    h: &Harness,
) {
    let b = h.open().await;
    let stored_before = daily("kairix", "mark", 1, &[Uuid::from_u128(1)], "day one");
    assert!(b.put_rollup(&stored_before, None, None).await.unwrap());
    let day = NaiveDate::from_ymd_opt(2026, 3, 2).unwrap();
    b.set_rollup_cursor("nova", Level::Daily, day)
        .await
        .unwrap();
    let mut later = daily(
        "kairix",
        "mark",
        1,
        &[Uuid::from_u128(1), Uuid::from_u128(2)],
        "day one, later",
    );
    later.supersedes = Some(stored_before.summary_id);
    let ada = daily("kairix", "ada", 1, &[Uuid::from_u128(3)], "Ada's day");
    let nova = daily("nova", "mark", 1, &[Uuid::from_u128(4)], "Nova's day");
    let new = |s: &ConversationSummary, v: Option<StoredVector>| NewRollup {
        summary: s.clone(),
        supersedes: s.supersedes,
        vector: v,
    };
    let batch = RollupBatch {
        rollups: vec![
            new(&stored_before, None),
            new(&later, Some(vector(0.25))),
            new(&ada, None),
            new(&ada, None),
            new(&nova, None),
        ],
        cursors: vec![
            CursorMove {
                agent_id: "kairix".into(),
                level: Level::Daily,
                period: day,
            },
            // never back
            CursorMove {
                agent_id: "nova".into(),
                level: Level::Daily,
                period: day.pred_opt().unwrap(),
            },
        ],
    };
    assert_eq!(
        b.put_rollups(&batch).await.unwrap(),
        [false, true, true, false, true],
        "what was stored already, or earlier in the batch, is not new"
    );
    let kairix = b
        .summaries("kairix", SummaryType::Daily, None)
        .await
        .unwrap();
    assert_eq!(kairix.len(), 3);
    let old = kairix
        .iter()
        .find(|s| s.summary_id == stored_before.summary_id)
        .unwrap();
    assert_eq!(old.superseded_by, Some(later.summary_id));
    assert_eq!(
        b.vector(later.summary_id).await.unwrap(),
        Some(vector(0.25))
    );
    assert_eq!(b.vector(ada.summary_id).await.unwrap(), None);
    assert_eq!(b.agent("kairix").await.unwrap().summary_version, 3);
    assert_eq!(b.agent("nova").await.unwrap().summary_version, 1);
    assert_eq!(
        b.rollup_cursor("kairix", Level::Daily).await.unwrap(),
        Some(day)
    );
    assert_eq!(
        b.rollup_cursor("nova", Level::Daily).await.unwrap(),
        Some(day)
    );
    // The same batch again stores nothing and moves nothing back.
    assert_eq!(
        b.put_rollups(&batch).await.unwrap(),
        [false, false, false, false, false]
    );
    assert_eq!(
        b.summaries("nova", SummaryType::Daily, None)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(b
        .put_rollups(&RollupBatch::default())
        .await
        .unwrap()
        .is_empty());
}

/// A rollup pass that ran while a user was forgotten: the Store drops the
/// batch's rollups made from that user's summaries and keeps the others.
pub(super) async fn a_batch_keeps_no_rollup_of_a_user_forgotten_meanwhile(h: &Harness) {
    let b = h.open().await;
    let (_, mark) = call("mark", 1);
    let (_, ada) = call("ada", 1);
    b.complete_reflection(&mark, &[], &[]).await.unwrap();
    b.complete_reflection(&ada, &[], &[]).await.unwrap();
    let (store, handle) = spawn_store(b.clone()).await;
    ractor::call!(store, |reply| StoreMsg::Forget {
        user_id: "mark".into(),
        agent_id: None,
        sessions: Vec::new(),
        again: false,
        reply
    })
    .unwrap()
    .unwrap();
    let of = |s: &ConversationSummary, text| NewRollup {
        summary: daily("kairix", &s.user_id, 1, &[s.summary_id], text),
        supersedes: None,
        vector: None,
    };
    let day = NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
    let batch = RollupBatch {
        rollups: vec![of(&mark, "Mark's day."), of(&ada, "Ada's day.")],
        cursors: vec![CursorMove {
            agent_id: "kairix".into(),
            level: Level::Daily,
            period: day,
        }],
    };
    let stored = ractor::call!(store, |reply| StoreMsg::PutRollups { batch, reply })
        .unwrap()
        .unwrap();
    assert_eq!(stored, [false, true]);
    let kept: Vec<String> = b
        .summaries("kairix", SummaryType::Daily, None)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.summary_text)
        .collect();
    assert_eq!(kept, ["Ada's day."]);
    assert_eq!(
        b.rollup_cursor("kairix", Level::Daily).await.unwrap(),
        Some(day)
    );
    store.stop(None);
    handle.await.unwrap();
}

pub(super) async fn the_inbox_is_read_in_order_after_a_key_and_emptied(h: &Harness) {
    let b = h.open().await;
    // stored out of order: read in the order they happened
    let (c2, s2) = call("mark", 2);
    let (_, s1) = call("ada", 1);
    let f = fact("mark", "Plays chess", None, c2);
    b.complete_reflection(&s2, &[], std::slice::from_ref(&f))
        .await
        .unwrap();
    b.complete_reflection(&s1, &[], &[]).await.unwrap();
    let all = b.inbox(None, 10).await.unwrap();
    let items: Vec<(Uuid, InboxItem)> = all.iter().map(|e| (e.id, e.kind)).collect();
    assert_eq!(
        items,
        [
            (s1.summary_id, InboxItem::Summary),
            (s2.summary_id, InboxItem::Summary),
            (f.fact_id, InboxItem::Fact)
        ]
    );
    assert!(all.iter().all(|e| e.agent_id == "kairix"));
    let rest = b.inbox(Some(&all[0].key), 1).await.unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].id, s2.summary_id);
    b.inbox_done(&[all[0].key, all[2].key]).await.unwrap();
    let left = b.inbox(None, 10).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].id, s2.summary_id);
    // rollups off: nothing is queued
    drop(b);
}

pub(super) async fn summaries_from_before_the_inbox_are_queued_once(h: &Harness) {
    let b = h.open_with(false).await;
    let id = Uuid::new_v4();
    let s = ConversationSummary::session(id, "kairix", "mark", at(5, 0), "An older summary");
    b.complete_reflection(&s, &[], &[]).await.unwrap();
    assert!(b.inbox(None, 10).await.unwrap().is_empty());
    assert_eq!(b.backfill_inbox().await.unwrap(), 1);
    let queued = b.inbox(None, 10).await.unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!((queued[0].id, queued[0].kind), (id, InboxItem::Summary));
    assert_eq!(queued[0].agent_id, "kairix");
    // once
    b.inbox_done(&[queued[0].key]).await.unwrap();
    assert_eq!(b.backfill_inbox().await.unwrap(), 0);
    assert!(b.inbox(None, 10).await.unwrap().is_empty());
}

pub(super) async fn topics_replace_their_summary_and_vectors_need_their_item(h: &Harness) {
    let b = h.open().await;
    let topic = |user: &str, n: u128| Topic {
        topic_id: Uuid::from_u128(n),
        agent_id: "kairix".into(),
        user_id: user.into(),
        label: "sailing".into(),
        keywords: vec![("sailing".into(), 2)],
        centroid: vec![0.1, 0.2],
        embedder: "test".into(),
        member_ids: vec![Uuid::from_u128(100 + n)],
        created_at: at(1, n as u32),
        updated_at: at(1, n as u32),
        last_active: at(1, n as u32),
    };
    let mut ts =
        ConversationSummary::session(Uuid::from_u128(50), "kairix", "mark", at(1, 0), "t1");
    ts.summary_type = SummaryType::Topic;
    let t1 = topic("mark", 1);
    b.put_topic(&t1, &ts, Some(&vector(0.1))).await.unwrap();
    b.put_topic(
        &topic("ada", 2),
        &{
            let mut s = ts.clone();
            s.summary_id = Uuid::from_u128(51);
            s.user_id = "ada".into();
            s
        },
        None,
    )
    .await
    .unwrap();
    // the topic's summary, again: replaced, its period end moved, and no
    // vector this time
    let mut ts2 = ts.clone();
    ts2.summary_text = "t1, later".into();
    ts2.period_end = at(4, 0);
    b.put_topic(&t1, &ts2, None).await.unwrap();
    let topics = b
        .summaries("kairix", SummaryType::Topic, None)
        .await
        .unwrap();
    assert_eq!(topics.len(), 2);
    assert_eq!(
        b.summary(ts.summary_id)
            .await
            .unwrap()
            .unwrap()
            .summary_text,
        "t1, later"
    );
    assert!(b.vector(ts.summary_id).await.unwrap().is_none());
    assert_eq!(
        b.topics("kairix", Some("mark")).await.unwrap(),
        std::slice::from_ref(&t1)
    );
    assert_eq!(b.topics("kairix", None).await.unwrap().len(), 2);
    assert!(b.topics("nova", None).await.unwrap().is_empty());
    // vectors only for items that exist
    let gone = Uuid::new_v4();
    let stored = b
        .put_vectors(&[(ts.summary_id, vector(0.3)), (gone, vector(0.4))])
        .await
        .unwrap();
    assert_eq!(stored, [ts.summary_id]);
    assert_eq!(b.vector(ts.summary_id).await.unwrap(), Some(vector(0.3)));
    assert!(b.vector(gone).await.unwrap().is_none());
    // turn vectors only for stored turns (one still waiting for its batch
    // counts)
    let rec = opened(7, "kairix", "mark", 0);
    b.open_session(&rec).await.unwrap();
    append(&*b, rec.session_id, 0, "a").await;
    append(&*b, rec.session_id, 2, "c").await;
    let stored = b
        .put_turn_vectors(
            rec.session_id,
            &[(2, vector(0.2)), (1, vector(0.1)), (0, vector(0.0))],
        )
        .await
        .unwrap();
    assert_eq!(stored, [2, 0]);
    let doc = TurnRef {
        session_id: rec.session_id,
        seq: 2,
    }
    .doc_id();
    assert_eq!(b.vector(doc).await.unwrap(), Some(vector(0.2)));
}
