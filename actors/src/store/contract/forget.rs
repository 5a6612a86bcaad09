//! The backend contract on forgetting a user.

use super::*;

pub(super) async fn a_forget_is_scoped_complete_and_idempotent(h: &Harness) {
    let b = h.open().await;
    let mut sessions = Vec::new();
    for (n, agent, user) in [
        (1, "kairix", "zoe"),
        (2, "nova", "zoe"),
        (3, "kairix", "ada"),
    ] {
        let rec = opened(n, agent, user, n as u32);
        b.open_session(&rec).await.unwrap();
        append(&*b, rec.session_id, 0, "I sail to Zanzibar.").await;
        append(&*b, rec.session_id, 1, "In May.").await;
        let rec = ended(rec, 2);
        b.end_session(&rec, at(5, 50)).await.unwrap();
        let mut s = ConversationSummary::session(rec.session_id, agent, user, at(5, 0), "Sailing.");
        s.agent_id = agent.into();
        let mut f = fact(user, "Sails", None, rec.session_id);
        f.agent_id = agent.into();
        b.complete_reflection(&s, &[], std::slice::from_ref(&f))
            .await
            .unwrap();
        b.put_vectors(&[(f.fact_id, vector(0.5))]).await.unwrap();
        b.put_turn_vectors(rec.session_id, &[(0, vector(0.1))])
            .await
            .unwrap();
        sessions.push(rec.session_id);
    }
    let kept = b.agent("kairix").await.unwrap().summary_version;

    let r = b.forget_user("zoe", Some("nova")).await.unwrap();
    assert_eq!(
        (r.sessions, r.turns, r.session_summaries, r.facts, r.vectors),
        (1, 2, 1, 1, 2)
    );
    assert_eq!(r.inbox_rows, 2, "its summary's and its fact's");
    assert_eq!(r.agents, ["nova".to_string()].into());
    assert!(r.removed_ids.contains(&sessions[1]));
    assert!(b.session(sessions[0]).await.unwrap().is_some());
    assert!(b.session(sessions[1]).await.unwrap().is_none());
    assert!(b.turns(sessions[1]).await.unwrap().is_empty());
    assert!(b.user_sessions("nova", "zoe").await.unwrap().is_empty());
    assert_eq!(b.agent("kairix").await.unwrap().summary_version, kept);

    let r = b.forget_user("zoe", None).await.unwrap();
    assert_eq!((r.sessions, r.session_summaries, r.facts), (1, 1, 1));
    assert!(b.forget_user("zoe", None).await.unwrap().is_empty());
    assert!(b.user_sessions("kairix", "zoe").await.unwrap().is_empty());
    assert!(b.user_facts("kairix", "zoe").await.unwrap().is_empty());
    // ada's are all there
    assert!(b.session(sessions[2]).await.unwrap().is_some());
    assert!(b.summary(sessions[2]).await.unwrap().is_some());
    assert_eq!(b.turns(sessions[2]).await.unwrap().len(), 2);
    assert_eq!(b.user_facts("kairix", "ada").await.unwrap().len(), 1);
    assert!(b.pending_forgets().await.unwrap().is_empty());
    let inbox = b.inbox(None, 100).await.unwrap();
    assert_eq!(inbox.len(), 2, "only ada's summary and fact are left");
    assert!(b.agent("kairix").await.unwrap().summary_version > kept);
}
