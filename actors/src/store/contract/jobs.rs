//! The backend contract on the reflection queue and dead letters.

use super::*;

pub(super) async fn dead_letters_move_back_to_the_queue_and_not_for_a_summarized_session(
    h: &Harness,
) {
    let b = h.open().await;
    let rec = ended(opened(1, "kairix", "mark", 0), 2);
    b.end_session(&rec, at(5, 10)).await.unwrap();
    let letter = DeadLetter {
        session_id: rec.session_id,
        agent_id: "kairix".into(),
        user_id: "mark".into(),
        attempts: 3,
        error: "timed out".into(),
        error_kind: "timeout".into(),
        failed_at: at(5, 20),
    };
    b.dead_letter(&letter).await.unwrap();
    assert!(b.queued().await.unwrap().is_empty());
    assert_eq!(
        b.dead_letters().await.unwrap(),
        std::slice::from_ref(&letter)
    );
    let job = b.requeue(rec.session_id, at(5, 30)).await.unwrap();
    assert_eq!(
        (job.session_id, job.enqueued_at),
        (rec.session_id, at(5, 30))
    );
    assert!(b.dead_letters().await.unwrap().is_empty());
    assert_eq!(b.queued().await.unwrap(), [job]);
    assert!(matches!(
        b.requeue(rec.session_id, at(5, 40)).await,
        Err(StoreError::DeadLetterNotFound(_))
    ));
    // the session has its summary by now: no dead letter, and storing it
    // clears the job
    let s = ConversationSummary::session(rec.session_id, "kairix", "mark", at(5, 0), "done");
    assert!(b.complete_reflection(&s, &[], &[]).await.unwrap());
    assert!(b.queued().await.unwrap().is_empty());
    b.dead_letter(&letter).await.unwrap();
    assert!(b.dead_letters().await.unwrap().is_empty());
}

fn letter(id: u128, agent: &str, user: &str, minute: u32) -> DeadLetter {
    DeadLetter {
        session_id: Uuid::from_u128(id),
        agent_id: agent.into(),
        user_id: user.into(),
        attempts: 3,
        error: "timed out".into(),
        error_kind: "timeout".into(),
        failed_at: at(5, minute),
    }
}

/// The count of dead letters, checked against the listing of them all.
async fn counted(b: &dyn Backend) -> u64 {
    let n = b.dead_letter_count().await.unwrap();
    assert_eq!(n as usize, b.dead_letters().await.unwrap().len());
    n
}

pub(super) async fn dead_letters_are_counted_on_every_change_and_listed_by_agent_a_page_at_a_time(
    h: &Harness,
) {
    let b = h.open().await;
    let of = |agent: &'static str, limit| {
        let b = b.clone();
        async move {
            let v = b.agent_dead_letters(agent, None, limit).await.unwrap();
            v.into_iter()
                .map(|d| (d.session_id.as_u128(), d.failed_at))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(counted(&*b).await, 0);
    b.dead_letter(&letter(1, "kairix", "mark", 30))
        .await
        .unwrap();
    assert_eq!(counted(&*b).await, 1);
    // the same session's letter again (its failure time moved): one letter,
    // listed once, at its new time
    b.dead_letter(&letter(1, "kairix", "mark", 35))
        .await
        .unwrap();
    assert_eq!(counted(&*b).await, 1);
    assert_eq!(of("kairix", 10).await, [(1, at(5, 35))]);
    b.dead_letter(&letter(2, "kairix", "ada", 20))
        .await
        .unwrap();
    b.dead_letter(&letter(3, "nova", "mark", 10)).await.unwrap();
    assert_eq!(counted(&*b).await, 3);
    // an agent's, oldest first, up to the limit
    assert_eq!(of("kairix", 10).await, [(2, at(5, 20)), (1, at(5, 35))]);
    assert_eq!(of("kairix", 1).await, [(2, at(5, 20))]);
    // the next page: after the last one listed
    let next = b
        .agent_dead_letters("kairix", Some((at(5, 20), Uuid::from_u128(2))), 10)
        .await
        .unwrap();
    assert_eq!(next, [letter(1, "kairix", "mark", 35)]);
    let past = b
        .agent_dead_letters("kairix", Some((at(5, 35), Uuid::from_u128(1))), 10)
        .await
        .unwrap();
    assert!(past.is_empty(), "{past:?}");
    assert_eq!(of("nova", 10).await, [(3, at(5, 10))]);
    assert!(of("kairi", 10).await.is_empty());
    assert!(of("kairix", 0).await.is_empty());
    assert_eq!(
        b.find_dead_letter(Uuid::from_u128(2)).await.unwrap(),
        Some(letter(2, "kairix", "ada", 20))
    );
    assert!(b
        .find_dead_letter(Uuid::from_u128(9))
        .await
        .unwrap()
        .is_none());
    // a retry takes it off
    b.requeue(Uuid::from_u128(2), at(5, 40)).await.unwrap();
    assert_eq!(counted(&*b).await, 2);
    assert_eq!(of("kairix", 10).await, [(1, at(5, 35))]);
    // so does its summary, stored; and a summarized session gets none
    let s = ConversationSummary::session(Uuid::from_u128(1), "kairix", "mark", at(5, 0), "done");
    assert!(b.complete_reflection(&s, &[], &[]).await.unwrap());
    assert_eq!(counted(&*b).await, 1);
    assert!(of("kairix", 10).await.is_empty());
    b.dead_letter(&letter(1, "kairix", "mark", 50))
        .await
        .unwrap();
    assert_eq!(counted(&*b).await, 1);
    b.dead_letter(&letter(4, "kairix", "mark", 40))
        .await
        .unwrap();
    b.dead_letter(&letter(5, "kairix", "ada", 50))
        .await
        .unwrap();
    assert_eq!(counted(&*b).await, 3);

    // Counted again at open, damaged letters too (they are stored); a page
    // reads no letter past it.
    drop(b);
    h.damage("dead_letters", Uuid::from_u128(5)).await;
    let b = h.open().await;
    assert_eq!(b.dead_letter_count().await.unwrap(), 3);
    let page = b.agent_dead_letters("kairix", None, 1).await.unwrap();
    assert_eq!(page, [letter(4, "kairix", "mark", 40)]);
    assert_eq!(b.skipped_records(), 0, "read past its page");
    assert_eq!(
        b.agent_dead_letters("kairix", None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(b.skipped_records(), 1);
    // a forget takes the user's letters, every agent's
    let r = b.forget_user("mark", None).await.unwrap();
    assert_eq!(r.dead_letters, 2);
    assert_eq!(b.dead_letter_count().await.unwrap(), 1);
    assert!(b
        .agent_dead_letters("nova", None, 10)
        .await
        .unwrap()
        .is_empty());
}
