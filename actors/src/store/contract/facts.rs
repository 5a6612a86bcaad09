//! The backend contract on facts: de-duplication, history, conflicts,
//! ownership, and the agent side's own.

use super::*;

pub(super) async fn facts_are_deduplicated_superseded_conflicts_flagged_and_owned(h: &Harness) {
    let b = h.open().await;
    let (c1, s1) = call("mark", 1);
    let (c2, s2) = call("ada", 1);
    let works = fact("mark", "Works at Initech", Some("employer"), c1);
    // one reflection per user, as the reflector stores them
    b.complete_reflection(
        &s1,
        &[],
        &[works.clone(), fact("mark", "Prefers mornings", None, c1)],
    )
    .await
    .unwrap();
    b.complete_reflection(&s2, &[], &[fact("ada", "Lives in Porto", Some("home"), c2)])
        .await
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
    b.complete_reflection(&s3, &[], &second).await.unwrap();
    // two values in one call: a conflict, both current
    let (c4, s4) = call("mark", 3);
    let austin = fact("mark", "Lives in Austin", Some("home"), c4);
    let denver = fact("mark", "Lives in Denver", Some("home"), c4);
    b.complete_reflection(&s4, &[], &[austin.clone(), denver.clone()])
        .await
        .unwrap();

    let mark = b.user_facts("kairix", "mark").await.unwrap();
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
    assert_eq!(b.agent_facts("kairix").await.unwrap().len(), 7);

    // the context holds current facts, and what each replaced
    let ctx = b.stored_sources("kairix", "mark").await.unwrap();
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
    let (gone, moved) = b.delete_fact(globex.fact_id, "mark").await.unwrap();
    assert_eq!(gone.fact_id, globex.fact_id);
    assert_eq!(moved.len(), 1);
    assert!(b.fact(works.fact_id).await.unwrap().unwrap().is_current());
    assert!(b
        .stored_sources("kairix", "mark")
        .await
        .unwrap()
        .facts
        .earlier
        .is_empty());

    facts_change_only_as_their_owner(&b, by("Prefers mornings").fact_id, &works, &s1).await;
}

/// The second half of [`facts_are_deduplicated_superseded_conflicts_flagged_and_owned`]:
/// `id` is mark's private fact, `works` the value of his stated in `s1`.
pub(super) async fn facts_change_only_as_their_owner(
    b: &SharedBackend,
    id: Uuid,
    works: &Fact,
    s1: &ConversationSummary,
) {
    // visibility: ada sees only her own until mark shares one
    let ada_sees = |b: SharedBackend| async move {
        let mut v: Vec<String> = b
            .visible_facts("kairix", "ada")
            .await
            .unwrap()
            .into_iter()
            .map(|f| f.fact.content)
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(ada_sees(b.clone()).await, ["Lives in Porto"]);
    assert!(matches!(
        b.set_fact_visibility(id, "ada", Visibility::Shared).await,
        Err(StoreError::NotFactOwner(_))
    ));
    assert_eq!(ada_sees(b.clone()).await, ["Lives in Porto"]);
    b.set_fact_visibility(id, "mark", Visibility::Shared)
        .await
        .unwrap();
    assert_eq!(
        ada_sees(b.clone()).await,
        ["Lives in Porto", "Prefers mornings"]
    );
    let ada_ctx = b.stored_sources("kairix", "ada").await.unwrap();
    assert_eq!(ada_ctx.facts.len(), 2, "a shared fact is in every context");
    b.set_fact_visibility(id, "mark", Visibility::Private)
        .await
        .unwrap();
    assert_eq!(ada_sees(b.clone()).await, ["Lives in Porto"]);
    assert_eq!(
        b.fact(works.fact_id)
            .await
            .unwrap()
            .unwrap()
            .history
            .stated_at,
        Some(s1.period_start),
        "a change of visibility keeps the history"
    );

    // deleting: only the owner; unknown ids are errors
    assert!(matches!(
        b.delete_fact(id, "ada").await,
        Err(StoreError::NotFactOwner(_))
    ));
    assert!(b.fact(id).await.unwrap().is_some());
    b.delete_fact(id, "mark").await.unwrap();
    assert!(b.fact(id).await.unwrap().is_none());
    assert_eq!(b.user_facts("kairix", "mark").await.unwrap().len(), 4);
    let unknown = Uuid::new_v4();
    assert!(matches!(
        b.delete_fact(unknown, "mark").await,
        Err(StoreError::FactNotFound(_))
    ));
    assert!(matches!(
        b.set_fact_visibility(unknown, "mark", Visibility::Shared)
            .await,
        Err(StoreError::FactNotFound(_))
    ));
    // another agent's facts are another namespace
    assert!(b.visible_facts("other", "mark").await.unwrap().is_empty());
}

pub(super) async fn the_agent_sides_facts_stay_its_own(h: &Harness) {
    let b = h.open().await;
    let (c1, s1) = call("mark", 1);
    let home = fact("mark", "Lives in Austin", Some("home"), c1);
    b.complete_reflection(&s1, &[], std::slice::from_ref(&home))
        .await
        .unwrap();
    // a later call: the agent side tells of its own home, and says what
    // the user said before in the same words
    let (c2, s2) = call("mark", 2);
    let its_home = agent_fact("mark", "Lives in Cork", Some("home"), c2);
    let same_words = agent_fact("mark", "Lives in Austin", None, c2);
    b.complete_reflection(&s2, &[], &[its_home.clone(), same_words.clone()])
        .await
        .unwrap();
    let facts = b.user_facts("kairix", "mark").await.unwrap();
    assert_eq!(facts.len(), 3, "{facts:?}");
    let get = |id: Uuid| facts.iter().find(|f| f.fact_id == id).unwrap();
    // the user's home is not replaced by the agent side's
    assert!(get(home.fact_id).is_current());
    assert_eq!(get(home.fact_id).speaker, Speaker::User);
    assert_eq!(get(its_home.fact_id).speaker, Speaker::Agent);
    assert_eq!(get(its_home.fact_id).subject.as_deref(), Some("agent:home"));
    assert_eq!(get(same_words.fact_id).speaker, Speaker::Agent);
    // and both are read back as whose they are, in the context too
    let ctx = b.stored_sources("kairix", "mark").await.unwrap();
    let agent: Vec<&str> = ctx
        .facts
        .iter()
        .filter(|f| f.speaker == Speaker::Agent)
        .map(|f| f.content.as_str())
        .collect();
    assert_eq!(agent.len(), 2, "{agent:?}");
    // deleting the agent side's fact leaves the user's in the same words
    b.delete_fact(same_words.fact_id, "mark").await.unwrap();
    let facts = b.user_facts("kairix", "mark").await.unwrap();
    assert_eq!(facts.len(), 2);
    assert!(b.fact(home.fact_id).await.unwrap().unwrap().is_current());
    // and is remembered apart from them: the user's are not tombstoned
    assert_ne!(
        spoken_key(&same_words),
        spoken_key(&home),
        "one tombstone key per speaker"
    );
}

pub(super) async fn facts_stated_outside_a_call_are_stored_as_a_calls_are(h: &Harness) {
    let b = h.open().await;
    let (c1, s1) = call("mark", 1);
    let initech = fact("mark", "Works at Initech", Some("employer"), c1);
    let peanuts = fact("mark", "Allergic to peanuts", None, c1);
    b.complete_reflection(&s1, &[], &[initech.clone(), peanuts.clone()])
        .await
        .unwrap();
    b.delete_fact(peanuts.fact_id, "mark").await.unwrap();
    let stated = |content: &str, subject: Option<&str>| Fact {
        source_session_id: None,
        ..fact("mark", content, subject, Uuid::nil())
    };
    let globex = stated("Works at Globex", Some("employer"));
    let again = stated("works at INITECH", Some("employer"));
    let peanuts_again = stated("Allergic to peanuts", None);
    let said = at(2, 0);
    let changes = b
        .put_stated_facts(&[globex.clone(), again, peanuts_again.clone()], said)
        .await
        .unwrap();
    // the employer he has is not stored twice; the one he deleted is,
    // said anew; the new employer replaces the old
    let mut added: Vec<&str> = changes.added.iter().map(|f| f.content.as_str()).collect();
    added.sort_unstable();
    assert_eq!(added, ["Allergic to peanuts", "Works at Globex"]);
    let ids: Vec<Uuid> = changes.updated.iter().map(|f| f.fact_id).collect();
    assert_eq!(ids, [initech.fact_id]);
    let facts = b.user_facts("kairix", "mark").await.unwrap();
    assert_eq!(facts.len(), 3, "{facts:?}");
    let stored = b.fact(globex.fact_id).await.unwrap().unwrap();
    assert!(stored.is_current());
    assert_eq!(stored.history.stated_at, Some(said));
    let old = b.fact(initech.fact_id).await.unwrap().unwrap();
    assert_eq!(old.history.superseded_by, Some(globex.fact_id));
    assert!(b.fact(peanuts_again.fact_id).await.unwrap().is_some());
    // queued for the Rollup actor (their vectors), as a call's facts are
    let queued: Vec<Uuid> = b
        .inbox(None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert!(queued.contains(&globex.fact_id), "{queued:?}");
    assert!(queued.contains(&peanuts_again.fact_id));
    // nothing to store changes nothing
    let none = b.put_stated_facts(&[], said).await.unwrap();
    assert!(none.added.is_empty() && none.updated.is_empty());
    let repeat = [stated("Works at Globex", Some("employer"))];
    let same = b.put_stated_facts(&repeat, said).await.unwrap();
    assert!(same.added.is_empty() && same.updated.is_empty());
    assert_eq!(b.user_facts("kairix", "mark").await.unwrap().len(), 3);
}
