//! The backend contract on blocks, the agents' bookkeeping and the parts
//! a context is assembled from.

use super::*;

/// An older version kept the latest reflection's `relationship` and
/// `self_perception` as the agent's too: the repair at start moves each to
/// the user it was drawn from (named in the record, or, for a record from
/// before that, by the summary made at the same instant) and leaves the
/// operator's, marking an unmarked one as theirs.
pub(super) async fn agent_wide_blocks_a_reflection_wrote_are_moved_to_their_user(h: &Harness) {
    let b = h.open().await;
    let block = |agent: &str, label, value: &str, minute, user: Option<&str>| MemoryBlock {
        agent_id: agent.into(),
        label,
        value: value.into(),
        limit: 2000,
        updated_at: at(2, minute),
        source_user_id: user.map(str::to_string),
        written_by: None,
    };
    // kairix: mark's reflection wrote his block and the agent's copy
    let (_, mut s) = call("mark", 1);
    s.created_at = at(2, 1);
    let mark_self = MemoryBlock {
        written_by: Some(BlockWriter::Reflection),
        ..block(
            "kairix",
            BlockLabel::SelfPerception,
            "Mark made me bolder.",
            1,
            Some("mark"),
        )
    };
    b.complete_reflection(&s, std::slice::from_ref(&mark_self), &[])
        .await
        .unwrap();
    b.put_block(&block(
        "kairix",
        BlockLabel::SelfPerception,
        "Mark made me bolder.",
        1,
        Some("mark"),
    ))
    .await
    .unwrap();
    // …and, before blocks named their user, ada's wrote an unmarked one at
    // the instant of her summary
    let (_, mut s) = call("ada", 1);
    s.created_at = at(2, 5);
    b.complete_reflection(&s, &[], &[]).await.unwrap();
    let ada_rel = block(
        "kairix",
        BlockLabel::Relationship,
        "Ada and I talk about Porto.",
        5,
        None,
    );
    b.put_block(&ada_rel).await.unwrap();
    // nova: the operator's, from before blocks said who wrote them
    let (_, mut s) = call("li", 1);
    s.agent_id = "nova".into();
    s.created_at = at(2, 7);
    b.complete_reflection(&s, &[], &[]).await.unwrap();
    let nova_self = block(
        "nova",
        BlockLabel::SelfPerception,
        "I am Nova, calm.",
        9,
        None,
    );
    b.put_block(&nova_self).await.unwrap();
    let nova_rel = MemoryBlock {
        written_by: Some(BlockWriter::Operator),
        ..block(
            "nova",
            BlockLabel::Relationship,
            "I keep it professional.",
            7,
            None,
        )
    };
    b.put_block(&nova_rel).await.unwrap();

    let mut repaired = repair_agent_blocks(&*b).await.unwrap();
    repaired.sort_by(|x, y| x.user_id.cmp(&y.user_id));
    assert_eq!(
        repaired,
        [
            RepairedBlock {
                agent_id: "kairix".into(),
                label: BlockLabel::Relationship,
                user_id: "ada".into(),
                moved: true,
            },
            // his own was there already, as new as the copy
            RepairedBlock {
                agent_id: "kairix".into(),
                label: BlockLabel::SelfPerception,
                user_id: "mark".into(),
                moved: false,
            },
        ]
    );
    assert!(b.blocks("kairix").await.unwrap().is_empty());
    assert_eq!(b.user_blocks("kairix", "mark").await.unwrap(), [mark_self]);
    assert_eq!(
        b.user_blocks("kairix", "ada").await.unwrap(),
        [MemoryBlock {
            source_user_id: Some("ada".into()),
            written_by: Some(BlockWriter::Reflection),
            ..ada_rel
        }]
    );
    let nova = b.blocks("nova").await.unwrap();
    assert_eq!(
        nova,
        [
            MemoryBlock {
                written_by: Some(BlockWriter::Operator),
                ..nova_self
            },
            nova_rel
        ]
    );
    assert!(b.user_blocks("nova", "li").await.unwrap().is_empty());
    // done once: a second start finds nothing and changes nothing
    assert!(repair_agent_blocks(&*b).await.unwrap().is_empty());
    assert_eq!(b.blocks("nova").await.unwrap(), nova);
}

pub(super) async fn blocks_and_agent_bookkeeping(h: &Harness) {
    let b = h.open().await;
    let block = |label: BlockLabel, value: &str, user: Option<&str>| MemoryBlock {
        agent_id: "kairix".into(),
        label,
        value: value.into(),
        limit: 2000,
        updated_at: at(1, 0),
        source_user_id: user.map(str::to_string),
        written_by: Some(match user {
            Some(_) => BlockWriter::Reflection,
            None => BlockWriter::Operator,
        }),
    };
    b.put_block(&block(BlockLabel::Persona, "I am Kairix.", None))
        .await
        .unwrap();
    b.put_block(&block(BlockLabel::Persona, "I am Kairix, still.", None))
        .await
        .unwrap();
    let operators = block(BlockLabel::Relationship, "I keep my distance.", None);
    b.put_block(&operators).await.unwrap();
    let (_, s) = call("mark", 1);
    let rel = block(
        BlockLabel::Relationship,
        "Mark and I go back.",
        Some("mark"),
    );
    b.complete_reflection(&s, std::slice::from_ref(&rel), &[])
        .await
        .unwrap();
    // a reflection's block is its user's; the agent's stay the operator's
    let agent_blocks = b.blocks("kairix").await.unwrap();
    let values: Vec<&str> = agent_blocks.iter().map(|b| b.value.as_str()).collect();
    assert_eq!(values, ["I am Kairix, still.", "I keep my distance."]);
    assert_eq!(
        b.user_blocks("kairix", "mark").await.unwrap(),
        std::slice::from_ref(&rel)
    );
    assert!(b.user_blocks("kairix", "ada").await.unwrap().is_empty());
    assert_eq!(
        b.block("kairix", BlockLabel::Relationship).await.unwrap(),
        Some(operators)
    );
    assert!(b
        .block("kairix", BlockLabel::Human)
        .await
        .unwrap()
        .is_none());

    assert_eq!(b.agent("nova").await.unwrap(), AgentMeta::default());
    b.set_persistent_context("kairix", vec!["Be brief.".into()])
        .await
        .unwrap();
    b.mark_context_built("kairix", 2, Some(at(9, 0)))
        .await
        .unwrap();
    b.mark_context_built("nova", 1, None).await.unwrap();
    let meta = b.agent("kairix").await.unwrap();
    assert_eq!(
        meta,
        AgentMeta {
            summary_version: 2,
            context_version: 2,
            persistent_context: vec!["Be brief.".into()],
            context_expires_at: Some(at(9, 0)),
        }
    );
    let agents: Vec<String> = b
        .agents()
        .await
        .unwrap()
        .into_iter()
        .map(|(a, _)| a)
        .collect();
    assert_eq!(agents, ["kairix", "nova"]);
}

pub(super) async fn the_context_parts_are_those_the_records_give(h: &Harness) {
    let b = h.open().await;
    let rec = ended(opened(1, "kairix", "mark", 0), 1);
    b.end_session(&rec, at(5, 5)).await.unwrap();
    b.open_session(&opened(2, "kairix", "mark", 30))
        .await
        .unwrap();
    let s = ConversationSummary::session(rec.session_id, "kairix", "mark", at(5, 0), "We met.");
    b.complete_reflection(
        &s,
        &[],
        &[fact("mark", "Plays chess", None, rec.session_id)],
    )
    .await
    .unwrap();
    let d = daily("kairix", "mark", 5, &[s.summary_id], "A day.");
    b.put_rollup(&d, None, None).await.unwrap();
    b.put_rollup(&daily("kairix", "ada", 5, &[], "Ada's day."), None, None)
        .await
        .unwrap();
    b.set_persistent_context("kairix", vec!["Be kind.".into()])
        .await
        .unwrap();

    let only = b
        .source_parts("kairix", "mark", Parts::FACTS)
        .await
        .unwrap();
    assert!(only.summaries.is_none() && only.ended.is_none() && only.blocks.is_none());
    assert_eq!(only.facts.unwrap().len(), 1);
    let ctx = b.stored_sources("kairix", "mark").await.unwrap();
    let texts: Vec<&str> = ctx
        .summaries
        .iter()
        .map(|s| s.summary_text.as_str())
        .collect();
    assert_eq!(texts, ["We met.", "A day."], "by period end");
    assert_eq!(ctx.ended.len(), 1, "the open session is not in it");
    assert_eq!(ctx.ended[0].session_id, rec.session_id);
    assert_eq!(ctx.persistent_context, ["Be kind."]);
    assert!(ctx.topics.is_empty());
    let none = b.stored_sources("kairix", "zoe").await.unwrap();
    assert!(none.summaries.is_empty() && none.facts.is_empty() && none.ended.is_empty());
}

/// The mirror's ledger: a remote agent's entries alone (another's, even
/// one whose id begins like it, are apart), replaced by id, removed by id,
/// and kept across a reopen.
pub(super) async fn the_mirror_ledger_keeps_each_remote_agents_entries_apart(h: &Harness) {
    use crate::mirror::MirroredSummary;
    let b = h.open().await;
    let (one, two) = (Uuid::new_v4(), Uuid::new_v4());
    let entry = |id, ids: &[&str]| MirroredSummary {
        summary_id: id,
        remote_ids: ids.iter().map(|s| s.to_string()).collect(),
        text_hash: ids.len() as u64 * 7 + u64::MAX / 3,
        stale_ids: ids.iter().skip(1).map(|s| format!("{s}-old")).collect(),
        pending: ids.len() == 1,
        pending_head: (ids.len() == 1).then(|| "[SUMMARY:SESSION]\n".to_string()),
    };
    assert!(b.mirrored("agent-1").await.unwrap().is_empty());
    b.put_mirrored("agent-1", &entry(one, &["passage-a"]))
        .await
        .unwrap();
    b.put_mirrored("agent-1", &entry(two, &["passage-b", "passage-c"]))
        .await
        .unwrap();
    b.put_mirrored("agent-10", &entry(one, &["passage-d"]))
        .await
        .unwrap();
    // Replaced, not added.
    b.put_mirrored("agent-1", &entry(one, &["passage-e"]))
        .await
        .unwrap();
    let mut want = vec![
        entry(one, &["passage-e"]),
        entry(two, &["passage-b", "passage-c"]),
    ];
    want.sort_by_key(|e| e.summary_id);
    assert_eq!(b.mirrored("agent-1").await.unwrap(), want);
    assert_eq!(
        b.mirrored("agent-10").await.unwrap(),
        vec![entry(one, &["passage-d"])]
    );
    assert_eq!(
        b.mirrored_remotes().await.unwrap(),
        vec![("agent-1".to_string(), 2), ("agent-10".to_string(), 1)]
    );
    b.drop_mirrored("agent-1", one).await.unwrap();
    // Dropping what is not there is no error.
    b.drop_mirrored("agent-1", one).await.unwrap();
    b.flush().await.unwrap();
    drop(b);
    let b = h.open().await;
    assert_eq!(
        b.mirrored("agent-1").await.unwrap(),
        vec![entry(two, &["passage-b", "passage-c"])]
    );
    assert_eq!(b.mirrored("agent-10").await.unwrap().len(), 1);
}
