//! The backend contract on session summaries: revisions, idempotence
//! and the listing.

use super::*;

pub(super) async fn a_revision_replaces_the_current_version_and_never_brings_back_a_deleted_fact(
    h: &Harness,
) {
    let b = h.open().await;
    let (c1, s1) = call("mark", 1);
    let tea = fact("mark", "Prefers tea", None, c1);
    b.complete_reflection(&s1, &[], std::slice::from_ref(&tea))
        .await
        .unwrap();
    b.delete_fact(tea.fact_id, "mark").await.unwrap();
    let mut v2 = ConversationSummary::session(Uuid::new_v4(), "kairix", "mark", at(1, 0), "v2");
    v2.supersedes = Some(s1.summary_id);
    let facts = [
        fact("mark", "prefers tea", None, c1),
        fact("mark", "Plays chess", None, c1),
    ];
    let r = b.revise_session(&v2, &facts).await.unwrap();
    assert!(r.stored);
    assert_eq!(r.old.as_ref().unwrap().superseded_by, Some(v2.summary_id));
    let added: Vec<&str> = r.facts_added.iter().map(|f| f.content.as_str()).collect();
    assert_eq!(added, ["Plays chess"], "the deleted fact stays deleted");
    // again: a no-op
    assert!(!b.revise_session(&v2, &facts).await.unwrap().stored);
    // the old version is replaced already: no fork
    let mut fork = ConversationSummary::session(Uuid::new_v4(), "kairix", "mark", at(1, 0), "x");
    fork.supersedes = Some(s1.summary_id);
    assert!(matches!(
        b.revise_session(&fork, &[]).await,
        Err(StoreError::InvalidRevision(..))
    ));
    let mut orphan = fork.clone();
    orphan.supersedes = Some(Uuid::new_v4());
    assert!(matches!(
        b.revise_session(&orphan, &[]).await,
        Err(StoreError::SummaryNotFound(_))
    ));
    orphan.supersedes = None;
    assert!(matches!(
        b.revise_session(&orphan, &[]).await,
        Err(StoreError::InvalidRevision(..))
    ));
    let latest = b
        .latest_summary("kairix", SummaryType::Session)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest.summary_id, v2.summary_id);
    assert!(!b
        .summary(s1.summary_id)
        .await
        .unwrap()
        .unwrap()
        .is_current());
    b.stamp_derivation(v2.summary_id, "offline-1")
        .await
        .unwrap();
    assert_eq!(
        b.summary(v2.summary_id)
            .await
            .unwrap()
            .unwrap()
            .derivation
            .as_deref(),
        Some("offline-1")
    );
    assert!(matches!(
        b.stamp_derivation(Uuid::new_v4(), "x").await,
        Err(StoreError::SummaryNotFound(_))
    ));
    let ctx = b.stored_sources("kairix", "mark").await.unwrap();
    let texts: Vec<&str> = ctx
        .summaries
        .iter()
        .map(|s| s.summary_text.as_str())
        .collect();
    assert_eq!(texts, ["v2"], "only the current version");
}

pub(super) async fn storing_a_session_summary_twice_is_a_no_op(h: &Harness) {
    let b = h.open().await;
    let id = Uuid::new_v4();
    let first = ConversationSummary::session(id, "kairix", "mark", at(5, 0), "first");
    let second = ConversationSummary::session(id, "kairix", "mark", at(5, 0), "second");
    assert!(b.complete_reflection(&first, &[], &[]).await.unwrap());
    assert!(!b.complete_reflection(&second, &[], &[]).await.unwrap());
    let all = b
        .summaries("kairix", SummaryType::Session, None)
        .await
        .unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].summary_text, "first");
    assert_eq!(b.agent("kairix").await.unwrap().summary_version, 1);
}

fn summaries_of(v: Vec<ConversationSummary>) -> Vec<Uuid> {
    v.into_iter().map(|s| s.summary_id).collect()
}

pub(super) async fn summaries_are_listed_newest_first_across_types_and_read_no_further_than_the_limit(
    h: &Harness,
) {
    let b = h.open().await;
    let session = |user: &str, agent: &str, day, minute| {
        ConversationSummary::session(Uuid::new_v4(), agent, user, at(day, minute), "a call")
    };
    // By period end: m1 (day 1), d1 (day 1 to 2), a2 (day 2, later), m3.
    let m1 = session("mark", "kairix", 1, 0);
    let a2 = session("ada", "kairix", 2, 30);
    let m3 = session("mark", "kairix", 3, 0);
    let n3 = session("mark", "nova", 3, 10);
    for s in [&m1, &a2, &m3, &n3] {
        assert!(b.complete_reflection(s, &[], &[]).await.unwrap());
    }
    let d1 = daily("kairix", "mark", 1, &[m1.summary_id], "day one");
    assert!(b.put_rollup(&d1, None, None).await.unwrap());
    let (m1, d1, a2, m3) = (m1.summary_id, d1.summary_id, a2.summary_id, m3.summary_id);

    let page = |limit| SummaryListing {
        limit,
        ..SummaryListing::default()
    };
    let list = |agent: &'static str, q: SummaryListing| {
        let b = b.clone();
        async move { summaries_of(b.list_summaries(agent, &q).await.unwrap()) }
    };
    assert_eq!(list("kairix", page(10)).await, [m3, a2, d1, m1]);
    assert_eq!(list("kairix", page(2)).await, [m3, a2]);
    assert!(list("kairix", page(0)).await.is_empty());
    assert_eq!(list("nova", page(10)).await, [n3.summary_id]);
    let of_kind = |kind| SummaryListing {
        kind: Some(kind),
        ..page(10)
    };
    assert_eq!(
        list("kairix", of_kind(SummaryType::Session)).await,
        [m3, a2, m1]
    );
    assert_eq!(list("kairix", of_kind(SummaryType::Daily)).await, [d1]);
    assert!(list("kairix", of_kind(SummaryType::Weekly))
        .await
        .is_empty());
    let marks = |limit| SummaryListing {
        user_id: Some("mark".into()),
        ..page(limit)
    };
    assert_eq!(list("kairix", marks(10)).await, [m3, d1, m1]);
    let since = SummaryListing {
        since: Some(at(2, 0)),
        ..page(10)
    };
    assert_eq!(list("kairix", since).await, [m3, a2, d1]);
    let until = SummaryListing {
        until: Some(at(1, 30)),
        ..page(10)
    };
    assert_eq!(list("kairix", until).await, [d1, m1]);
    // the next page starts after the last summary of the one before
    let next = SummaryListing {
        before: Some((at(2, 30), a2)),
        ..page(2)
    };
    assert_eq!(list("kairix", next).await, [d1, m1]);
    let next = SummaryListing {
        before: Some((at(3, 0), m3)),
        ..marks(1)
    };
    assert_eq!(list("kairix", next).await, [d1]);

    // A page reads the summaries it passes and no older one.
    drop(b);
    h.damage("summaries", m1).await;
    let b = h.open().await;
    for q in [page(3), marks(2), of_kind(SummaryType::Daily)] {
        assert!(!b.list_summaries("kairix", &q).await.unwrap().is_empty());
        assert_eq!(b.skipped_records(), 0, "{q:?} read past its page");
    }
    assert_eq!(
        summaries_of(b.list_summaries("kairix", &page(10)).await.unwrap()),
        [m3, a2, d1]
    );
    assert_eq!(b.skipped_records(), 1);
}
