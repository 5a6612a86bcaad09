//! A sled folder holding every record kind, exported, imported into
//! PostgreSQL, exported from there and imported into a new sled folder:
//! the same records each time, read back the same way; and the ways an
//! export or an import is refused, none of which changes anything.

use super::*;
use crate::model::{BlockLabel, BlockWriter, EndReason};
use crate::search::TurnRef;
use crate::store::contract::{append, at, call, daily, ended, fact, opened, vector, TestSchema};
use crate::store::import_folder;

/// What [`fill`] stored, to read back.
struct Filled {
    live: Uuid,
    summary: Uuid,
    kept_fact: Uuid,
    daily: Uuid,
    topic: Uuid,
}

/// Stores every record kind, through the backend's own writes.
async fn fill(b: &dyn Backend) -> Filled {
    // As a runtime with rollups does at its first start (a marker).
    b.backfill_inbox().await.unwrap();
    let live = fill_calls(b).await;
    let (summary, kept_fact) = fill_reflected(b).await;
    let (daily, topic) = fill_hierarchy(b, &summary).await;
    // The agent's bookkeeping.
    b.set_persistent_context("kairix", vec!["Be brief.".into()])
        .await
        .unwrap();
    b.mark_context_built("kairix", 3, Some(at(20, 0)))
        .await
        .unwrap();
    // A forget of a user with nothing stored: an entry in the forget log.
    b.forget_user("gone", Some("kairix")).await.unwrap();
    b.flush().await.unwrap();
    Filled {
        live,
        summary: summary.summary_id,
        kept_fact,
        daily,
        topic,
    }
}

/// Calls not reflected: one still open, one queued, one dead-lettered.
/// Returns the open one.
async fn fill_calls(b: &dyn Backend) -> Uuid {
    // A call still open (its process died): its turns.
    let live = opened(1, "kairix", "mark", 0);
    b.open_session(&live).await.unwrap();
    append(b, live.session_id, 0, "hello").await;
    append(b, live.session_id, 1, "still there?").await;
    // A call ended, its reflection queued.
    let waiting = ended(opened(2, "kairix", "ada", 5), 1);
    b.open_session(&opened(2, "kairix", "ada", 5))
        .await
        .unwrap();
    append(b, waiting.session_id, 0, "the weather").await;
    b.end_session(&waiting, waiting.ended_at.unwrap())
        .await
        .unwrap();
    // A call whose reflection failed for good.
    let failed = ended(opened(3, "kairix", "ada", 20), 1);
    b.open_session(&opened(3, "kairix", "ada", 20))
        .await
        .unwrap();
    append(b, failed.session_id, 0, "a question").await;
    b.end_session(&failed, failed.ended_at.unwrap())
        .await
        .unwrap();
    b.dead_letter(&DeadLetter {
        session_id: failed.session_id,
        agent_id: "kairix".into(),
        user_id: "ada".into(),
        attempts: 3,
        error: "the summarizer failed".into(),
        error_kind: "llm".into(),
        failed_at: at(5, 40),
    })
    .await
    .unwrap();
    live.session_id
}

/// A reflected call with its blocks, facts and vectors. Returns its
/// summary and the fact kept current.
async fn fill_reflected(b: &dyn Backend) -> (ConversationSummary, Uuid) {
    // A call reflected: its summary, a block drawn from it, facts (one
    // shared, one deleted: a tombstone).
    let (call_id, mut summary) = call("mark", 6);
    let mut done = opened(0, "kairix", "mark", 0);
    done.session_id = call_id;
    done.started_at = summary.period_start;
    b.open_session(&done).await.unwrap();
    append(b, call_id, 0, "I sail on Sundays, not tea").await;
    let mut done_ended = done.clone();
    done_ended.ended_at = Some(summary.period_end);
    done_ended.end_reason = Some(EndReason::SilenceTimeout);
    done_ended.turn_count = 1;
    b.end_session(&done_ended, summary.period_end)
        .await
        .unwrap();
    summary.topics = vec!["sailing".into()];
    let rel = MemoryBlock {
        agent_id: "kairix".into(),
        label: BlockLabel::Relationship,
        value: "Mark sails.".into(),
        limit: 2000,
        updated_at: at(6, 10),
        source_user_id: Some("mark".into()),
        written_by: Some(BlockWriter::Reflection),
    };
    let facts = [
        fact("mark", "Mark sails on Sundays", Some("hobby"), call_id),
        fact("mark", "Mark's boat is the Osprey", Some("boat"), call_id),
        fact("mark", "Mark dislikes tea", Some("drinks"), call_id),
    ];
    b.store_reflection(&summary, std::slice::from_ref(&rel), &facts)
        .await
        .unwrap();
    b.put_block(&MemoryBlock {
        agent_id: "kairix".into(),
        label: BlockLabel::Persona,
        value: "I am Kairix.".into(),
        limit: 2000,
        updated_at: at(1, 0),
        source_user_id: None,
        written_by: Some(BlockWriter::Operator),
    })
    .await
    .unwrap();
    let stored = b.user_facts("kairix", "mark").await.unwrap();
    let id_of = |content: &str| {
        stored
            .iter()
            .find(|f| f.content == content)
            .map(|f| f.fact_id)
            .unwrap()
    };
    b.set_fact_visibility(
        id_of("Mark's boat is the Osprey"),
        "mark",
        Visibility::Shared,
    )
    .await
    .unwrap();
    b.delete_fact(id_of("Mark dislikes tea"), "mark")
        .await
        .unwrap();
    let kept_fact = id_of("Mark sails on Sundays");
    // Vectors of a summary, a fact and a turn.
    b.put_vectors(&[(summary.summary_id, vector(0.25)), (kept_fact, vector(0.5))])
        .await
        .unwrap();
    b.put_turn_vectors(call_id, &[(0, vector(0.75))])
        .await
        .unwrap();
    (summary, kept_fact)
}

/// Rollups of `summary`, the cursors and a topic. Returns the current
/// rollup's id and the topic's.
async fn fill_hierarchy(b: &dyn Backend, summary: &ConversationSummary) -> (Uuid, Uuid) {
    // A rollup that replaced an earlier one, its cursor; a topic.
    let d1 = daily("kairix", "mark", 6, &[summary.summary_id], "Sailing day.");
    b.put_rollup(&d1, None, Some(&vector(0.125))).await.unwrap();
    let mut d1b = daily(
        "kairix",
        "mark",
        6,
        &[summary.summary_id],
        "Sailing day, again.",
    );
    d1b.supersedes = Some(d1.summary_id);
    b.put_rollup(&d1b, Some(d1.summary_id), None).await.unwrap();
    b.set_rollup_cursor(
        "kairix",
        Level::Daily,
        NaiveDate::from_ymd_opt(2026, 3, 6).unwrap(),
    )
    .await
    .unwrap();
    b.set_rollup_cursor(
        "kairix",
        Level::Weekly,
        NaiveDate::from_ymd_opt(2026, 3, 2).unwrap(),
    )
    .await
    .unwrap();
    let topic = Topic {
        topic_id: Uuid::from_u128(77),
        agent_id: "kairix".into(),
        user_id: "mark".into(),
        label: "sailing".into(),
        keywords: vec![("sailing".into(), 2)],
        centroid: vec![0.1, 0.2],
        embedder: "test".into(),
        member_ids: vec![summary.summary_id],
        created_at: at(6, 30),
        updated_at: at(6, 30),
        last_active: at(6, 30),
    };
    let mut ts = ConversationSummary::session(topic.topic_id, "kairix", "mark", at(6, 0), "Sails.");
    ts.summary_type = SummaryType::Topic;
    b.put_topic(&topic, &ts, Some(&vector(0.0625)))
        .await
        .unwrap();
    (d1b.summary_id, topic.topic_id)
}

/// An export of `export`'s records, as bytes.
fn export_bytes(
    source: &str,
    export: impl FnOnce(&mut Sink<'_>) -> Result<(), TransferError>,
) -> Vec<u8> {
    let mut w = ExportWriter::new(Vec::new(), source).unwrap();
    export(&mut |r| w.write(&r)).unwrap();
    w.finish().unwrap().1
}

async fn export_pg(pg: &PgBackend) -> Vec<u8> {
    let mut w = ExportWriter::new(Vec::new(), "postgres").unwrap();
    pg.export_records(None, &mut |r| w.write(&r)).await.unwrap();
    w.finish().unwrap().1
}

/// An export's record lines, sorted (backends list each kind in an order
/// of their own).
fn records_of(bytes: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(bytes).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut records: Vec<String> = lines[1..lines.len() - 1]
        .iter()
        .map(|s| s.to_string())
        .collect();
    records.sort();
    records
}

fn reader(bytes: &[u8]) -> ExportReader<&[u8]> {
    ExportReader::new(bytes).unwrap()
}

/// What the backend's reads give of the filled records, as text: the
/// same on every backend the records were moved to.
async fn reads(b: &dyn Backend, f: &Filled) -> String {
    let sources = b.stored_sources("kairix", "mark").await.unwrap();
    let ada = b.stored_sources("kairix", "ada").await.unwrap();
    let mut inbox = b.inbox(None, 100).await.unwrap();
    inbox.sort_by_key(|e| e.key);
    // a session summary's id is its session's
    let doc = TurnRef {
        session_id: f.summary,
        seq: 0,
    }
    .doc_id();
    // The listings read the indexes an import builds, and the count of
    // dead letters its own.
    let newest = SessionListing {
        limit: 100,
        ..SessionListing::default()
    };
    let summaries = SummaryListing {
        limit: 100,
        ..SummaryListing::default()
    };
    let listed = (
        b.list_sessions(&newest).await.unwrap(),
        b.list_summaries("kairix", &summaries).await.unwrap(),
        b.agent_dead_letters("kairix", None, 100).await.unwrap(),
        b.dead_letter_count().await.unwrap(),
    );
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        listed,
        b.open_sessions().await.unwrap(),
        b.user_sessions("kairix", "ada").await.unwrap(),
        b.turns(f.live).await.unwrap(),
        b.queued().await.unwrap(),
        b.dead_letters().await.unwrap(),
        b.summary(f.summary).await.unwrap(),
        b.summary(f.daily).await.unwrap(),
        b.fact(f.kept_fact).await.unwrap(),
        b.vector(f.kept_fact).await.unwrap(),
        b.vector(doc).await.unwrap(),
        b.topics("kairix", None).await.unwrap(),
        b.rollup_cursor("kairix", Level::Weekly).await.unwrap(),
        b.agents().await.unwrap(),
        inbox
            .iter()
            .map(|e| (e.kind, e.id, e.agent_id.clone()))
            .collect::<Vec<_>>(),
        (sources.agent_blocks, sources.user_blocks, sources.persistent_context),
        (sources.facts, sources.summaries, sources.ended, sources.topics),
        (ada.facts, ada.ended),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_kind_moves_from_sled_to_postgres_and_back() {
    // sled
    let dir = tempfile::tempdir().unwrap();
    let first = Trees::open(&dir.path().join("first"), &StoreSettings::default()).unwrap();
    let filled = fill(&first).await;
    let from_sled = export_bytes("sled", |sink| first.export_records(None, sink));
    let records = records_of(&from_sled);
    let kinds: std::collections::BTreeSet<String> = ExportReader::new(&from_sled[..])
        .unwrap()
        .map(|r| r.unwrap().kind().to_string())
        .collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "agent",
            "block",
            "dead_letter",
            "fact",
            "forget",
            "inbox",
            "job",
            "meta",
            "rollup_cursor",
            "session",
            "summary",
            "tombstone",
            "topic",
            "turn",
            "vector"
        ],
        "the folder holds every record kind"
    );
    let sled_reads = reads(&first, &filled).await;

    // into PostgreSQL
    let schema = TestSchema::new();
    let pg = PgBackend::connect(&schema.settings).await.unwrap();
    assert!(pg.is_empty().await.unwrap());
    let counts = pg.import_records(&mut reader(&from_sled)).await.unwrap();
    assert_eq!(counts.values().sum::<u64>() as usize, records.len());
    let from_pg = export_pg(&pg).await;
    assert_eq!(records_of(&from_pg), records, "the same records");
    assert_eq!(reads(&pg, &filled).await, sled_reads, "read the same way");
    // the inbox came with the records, and its marker
    assert_eq!(pg.backfill_inbox().await.unwrap(), 0);

    // and back, into a new sled folder
    let back = dir.path().join("nested").join("back");
    let counts_back =
        import_folder(&back, &StoreSettings::default(), &mut reader(&from_pg)).unwrap();
    assert_eq!(counts_back, counts);
    let again = Trees::open(&back, &StoreSettings::default()).unwrap();
    let from_back = export_bytes("sled", |sink| again.export_records(None, sink));
    assert_eq!(records_of(&from_back), records);
    assert_eq!(reads(&again, &filled).await, sled_reads);
    assert_eq!(again.backfill_inbox().unwrap(), 0);
    assert!(again.caches_match().await.unwrap());
    // nothing left beside the folder
    let beside: Vec<_> = std::fs::read_dir(back.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(beside, ["back"]);
}

/// An export's record lines but the agents' (a forget bumps their
/// versions; an import of an older export cannot).
fn records_but_agents(bytes: &[u8]) -> Vec<String> {
    let mut records = records_of(bytes);
    records.retain(|r| !r.starts_with("{\"agent\""));
    records
}

/// A backup taken before two forgets, imported with the forget log of a
/// later export, holds what that later export holds: nothing of either
/// user (one forgotten with one agent, one with every agent), everything
/// of the others, and both forgets in its log. Imported with only its own
/// (older) log, it is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_honours_the_forgets_made_after_its_export() {
    let dir = tempfile::tempdir().unwrap();
    let first = Trees::open(&dir.path().join("first"), &StoreSettings::default()).unwrap();
    fill(&first).await;
    let backup = export_bytes("sled", |sink| first.export_records(None, sink));
    let before = reader(&backup).header().exported_at;
    // (a forget's time is kept to the microsecond)
    while Utc::now() <= before + chrono::Duration::milliseconds(1) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    first.forget_user("mark", Some("kairix")).unwrap();
    first.forget_user("ada", None).unwrap();
    let later = export_bytes("sled", |sink| first.export_records(None, sink));
    let log: Vec<ForgetEntry> = reader(&later)
        .filter_map(|r| match r.unwrap() {
            Record::Forget(e) => Some(e),
            _ => None,
        })
        .collect();
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(records_of(&later)
        .iter()
        .all(|r| !r.contains("\"mark\"") && !r.contains("\"ada\"")));

    // Into a new sled folder, and into PostgreSQL.
    let header = reader(&backup).header().clone();
    let mut honour = Honour::new(reader(&backup), &header, log.clone());
    let restored = dir.path().join("restored");
    import_folder(&restored, &StoreSettings::default(), &mut honour).unwrap();
    assert_eq!(
        honour.forgets().len(),
        2,
        "the forget older than the backup is its own"
    );
    let left = honour.left_out();
    for kind in [
        "session",
        "turn",
        "summary",
        "fact",
        "tombstone",
        "topic",
        "vector",
        "job",
        "dead_letter",
        "inbox",
        "block",
    ] {
        assert!(
            left.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} left out: {left:?}"
        );
    }
    let again = Trees::open(&restored, &StoreSettings::default()).unwrap();
    let from_restored = export_bytes("sled", |sink| again.export_records(None, sink));
    assert_eq!(
        records_but_agents(&from_restored),
        records_but_agents(&later)
    );

    let schema = TestSchema::new();
    let pg = PgBackend::connect(&schema.settings).await.unwrap();
    pg.import_records(&mut Honour::new(reader(&backup), &header, log.clone()))
        .await
        .unwrap();
    assert_eq!(
        records_but_agents(&export_pg(&pg).await),
        records_but_agents(&later)
    );
    // The log it holds goes on: its export carries all three forgets.
    assert_eq!(pg.forget_log().await.unwrap(), log);

    // Forgets its own log holds leave an export whole, whatever their
    // time; an export without a log (version 2) goes by its header's time.
    let own: Vec<ForgetEntry> = reader(&backup)
        .filter_map(|r| match r.unwrap() {
            Record::Forget(e) => Some(e),
            _ => None,
        })
        .collect();
    assert_eq!(own.len(), 1);
    let mut v2 = header.clone();
    v2.version = 2;
    let older: Vec<ForgetEntry> = log
        .iter()
        .cloned()
        .map(|mut e| {
            e.at = before - chrono::Duration::seconds(1);
            e
        })
        .collect();
    for (header, later) in [(&header, own), (&v2, older)] {
        let mut honour = Honour::new(reader(&backup), header, later);
        let whole = dir.path().join(format!("whole-{}", header.version));
        import_folder(&whole, &StoreSettings::default(), &mut honour).unwrap();
        assert!(honour.left_out().is_empty(), "{:?}", honour.left_out());
        let whole = Trees::open(&whole, &StoreSettings::default()).unwrap();
        let from_whole = export_bytes("sled", |sink| whole.export_records(None, sink));
        assert_eq!(records_of(&from_whole), records_of(&backup));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_into_postgres_is_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
    fill(&trees).await;
    let bytes = export_bytes("sled", |sink| trees.export_records(None, sink));
    let text = String::from_utf8(bytes.clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let schema = TestSchema::new();
    let pg = PgBackend::connect(&schema.settings).await.unwrap();

    // cut short: every record but the end line
    let cut = lines[..lines.len() - 1].join("\n");
    let err = pg
        .import_records(&mut reader(cut.as_bytes()))
        .await
        .unwrap_err();
    assert!(matches!(err, TransferError::Truncated { .. }), "{err}");
    assert!(pg.is_empty().await.unwrap(), "nothing imported");

    // a record twice (its count too)
    let all: Vec<Record> = reader(&bytes).map(Result::unwrap).collect();
    let mut w = ExportWriter::new(Vec::new(), "sled").unwrap();
    for r in all.iter().chain(all.last()) {
        w.write(r).unwrap();
    }
    let twice = w.finish().unwrap().1;
    let err = pg.import_records(&mut reader(&twice)).await.unwrap_err();
    assert!(
        matches!(&err, TransferError::Duplicate { what } if what.contains("already exists")),
        "{err}"
    );
    assert!(pg.is_empty().await.unwrap(), "nothing imported");

    // while an instance serves the schema
    pg.heartbeat().await.unwrap();
    let err = pg.import_records(&mut reader(&bytes)).await.unwrap_err();
    assert!(
        matches!(err, TransferError::InUse { instances: 1, .. }),
        "{err}"
    );
    pg.retire().await.unwrap();
    assert!(pg.is_empty().await.unwrap());

    // once whole, into a schema that then holds records: refused
    pg.import_records(&mut reader(&bytes)).await.unwrap();
    let before = records_of(&export_pg(&pg).await);
    let err = pg.import_records(&mut reader(&bytes)).await.unwrap_err();
    assert!(matches!(err, TransferError::NotEmpty { .. }), "{err}");
    let err = pg.prepare_import().await.unwrap_err();
    assert!(matches!(err, TransferError::NotEmpty { .. }), "{err}");
    assert_eq!(records_of(&export_pg(&pg).await), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_never_filled_its_inbox_moves_without_the_marker() {
    // Served with rollups off: the inbox was never filled from what was
    // stored before it, and must still be where the records go.
    let dir = tempfile::tempdir().unwrap();
    let mut trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
    trees.fill_inbox = false;
    let (call_id, summary) = call("mark", 6);
    let facts = [fact(
        "mark",
        "Mark sails on Sundays",
        Some("hobby"),
        call_id,
    )];
    trees.complete_reflection(&summary, &[], &facts).unwrap();
    let bytes = export_bytes("sled", |sink| trees.export_records(None, sink));
    assert!(!String::from_utf8_lossy(&bytes)
        .lines()
        .any(|l| l.starts_with("{\"meta\":")));
    let schema = TestSchema::new();
    let pg = PgBackend::connect(&schema.settings).await.unwrap();
    pg.import_records(&mut reader(&bytes)).await.unwrap();
    assert_eq!(
        pg.backfill_inbox().await.unwrap(),
        2,
        "the summary and the fact"
    );
    assert_eq!(trees.backfill_inbox().unwrap(), 2);
}

#[tokio::test]
async fn an_import_into_a_sled_folder_is_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let trees = Trees::open(&dir.path().join("source"), &StoreSettings::default()).unwrap();
    fill(&trees).await;
    let bytes = export_bytes("sled", |sink| trees.export_records(None, sink));
    let text = String::from_utf8(bytes.clone()).unwrap();
    let cut = text.lines().take(5).collect::<Vec<_>>().join("\n");
    let target = dir.path().join("target");
    let err = import_folder(
        &target,
        &StoreSettings::default(),
        &mut reader(cut.as_bytes()),
    )
    .unwrap_err();
    assert!(matches!(err, TransferError::Truncated { .. }), "{err}");
    assert!(!target.exists(), "no folder");
    let mut beside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    beside.sort();
    assert_eq!(beside, ["source"], "nothing left aside");

    // a record twice
    let all: Vec<Record> = reader(&bytes).map(Result::unwrap).collect();
    let mut w = ExportWriter::new(Vec::new(), "sled").unwrap();
    for r in all.iter().chain(all.iter().find(|r| r.kind() == "fact")) {
        w.write(r).unwrap();
    }
    let twice = w.finish().unwrap().1;
    let err = import_folder(&target, &StoreSettings::default(), &mut reader(&twice)).unwrap_err();
    assert!(
        matches!(&err, TransferError::Duplicate { what } if what.starts_with("fact record")),
        "{err}"
    );
    assert!(!target.exists(), "no folder");

    // an empty folder is taken; one holding anything is not
    std::fs::create_dir(&target).unwrap();
    import_folder(&target, &StoreSettings::default(), &mut reader(&bytes)).unwrap();
    let err = import_folder(&target, &StoreSettings::default(), &mut reader(&bytes)).unwrap_err();
    assert!(matches!(err, TransferError::NotEmpty { .. }), "{err}");
    let imported = Trees::open(&target, &StoreSettings::default()).unwrap();
    assert_eq!(
        records_of(&export_bytes("sled", |sink| imported.export_records(None, sink))),
        records_of(&bytes)
    );
    // a file where the folder would be
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let err = import_folder(&file, &StoreSettings::default(), &mut reader(&bytes)).unwrap_err();
    assert!(
        matches!(err, TransferError::Store(StoreError::NotADirectory { .. })),
        "{err}"
    );
    // and into a folder of the records already: refused by the folder's
    // own check as well
    let err = imported.import_records(&mut reader(&bytes)).unwrap_err();
    assert!(matches!(err, TransferError::NotEmpty { .. }), "{err}");
}

#[tokio::test]
async fn a_damaged_record_stops_an_export_unless_it_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
    let filled = fill(&trees).await;
    trees
        .summaries
        .insert(b"kairix\0\x00garbage", &b"{not json"[..])
        .unwrap();
    // a vector JSON cannot hold
    let nan = StoredVector {
        embedder: "test".into(),
        values: vec![f32::NAN, 1.0],
    };
    trees.put_vectors(&[(filled.kept_fact, nan)]).unwrap();
    let mut w = ExportWriter::new(Vec::new(), "sled").unwrap();
    let err = trees
        .export_records(None, &mut |r| w.write(&r))
        .unwrap_err();
    assert!(
        matches!(&err, TransferError::Damaged { table, .. } if table == "summaries"),
        "{err}"
    );
    let mut damaged = Damaged::default();
    let bytes = export_bytes("sled", |sink| {
        trees.export_records(Some(&mut damaged), sink)
    });
    let tables: Vec<&str> = damaged.0.iter().map(|(t, _, _)| t.as_str()).collect();
    assert_eq!(tables, ["summaries", "embeddings"]);
    // the rest moved
    let target = dir.path().join("moved");
    import_folder(&target, &StoreSettings::default(), &mut reader(&bytes)).unwrap();
    let moved = Trees::open(&target, &StoreSettings::default()).unwrap();
    assert_eq!(
        moved.summary(filled.summary).unwrap(),
        trees.summary(filled.summary).unwrap()
    );
    assert!(moved.summary(filled.topic).unwrap().is_some());
}

#[tokio::test]
async fn an_unfinished_forget_stops_an_export() {
    let dir = tempfile::tempdir().unwrap();
    let trees = Trees::open(dir.path(), &StoreSettings::default()).unwrap();
    fill(&trees).await;
    trees.begin_forget("mark", Some("kairix")).unwrap();
    let mut w = ExportWriter::new(Vec::new(), "sled").unwrap();
    let err = trees
        .export_records(None, &mut |r| w.write(&r))
        .unwrap_err();
    assert!(
        matches!(&err, TransferError::PendingForget { user_id } if user_id == "mark"),
        "{err}"
    );
}
