//! The in-process embedder (`embed.kind = "local"`) against a real
//! all-MiniLM-L6-v2 folder (`scripts/fetch-model` puts one in
//! `target/models/`; `RECALL_TEST_MODEL_DIR` names another): its vectors
//! match an independent numpy forward pass (`scripts/reference_embed.py`,
//! fixtures in `tests/fixtures/embed_reference.json`), paraphrases score
//! above unrelated sentences, batches equal single texts, and a missing or
//! malformed folder is a start-up error naming the file.
//!
//! Without the `local-embed` feature only the last check runs: asking for
//! the local embedder is an error that says what to rebuild with.

use recall::runtime::RuntimeBuilder;
#[cfg(not(feature = "local-embed"))]
use recall::runtime::StartupError;
use recall::{ContextOptions, EndOptions, Settings, Turn};

use crate::common;

#[cfg(feature = "local-embed")]
mod with_model {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use recall::engine::context::{AssembledContext, Tier};
    use recall::engine::embed::{cosine, Embed};
    use recall::engine::reflect::extractive::ExtractiveReflect;
    use recall::engine::settings::EmbedKind;
    use recall::testkit::TestRuntime;

    use super::common::CHATTER;
    use recall::engine::settings::LocalEmbedSettings;
    use recall::local_embed::{LocalEmbed, ModelError};
    use recall::runtime::{RuntimeBuilder, StartupError};
    use recall::{ContextOptions, EndOptions, Settings, Turn};

    fn model_dir() -> PathBuf {
        let dir = std::env::var_os("RECALL_TEST_MODEL_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("target/models/all-MiniLM-L6-v2")
            });
        assert!(
            dir.join("model.safetensors").is_file(),
            "no model in {}: run scripts/fetch-model (or set RECALL_TEST_MODEL_DIR)",
            dir.display()
        );
        dir
    }

    fn settings(dir: &Path) -> LocalEmbedSettings {
        LocalEmbedSettings {
            model_dir: dir.to_string_lossy().into(),
            ..LocalEmbedSettings::default()
        }
    }

    fn load() -> LocalEmbed {
        LocalEmbed::load(&settings(&model_dir())).expect("the model loads")
    }

    #[derive(serde::Deserialize)]
    struct Reference {
        sentences: Vec<RefSentence>,
    }

    #[derive(serde::Deserialize)]
    struct RefSentence {
        text: String,
        vector: Vec<f32>,
    }

    #[tokio::test]
    async fn vectors_match_the_independent_reference() {
        let reference: Reference =
            serde_json::from_str(include_str!("fixtures/embed_reference.json"))
                .expect("the fixture parses");
        let e = load();
        assert_eq!(e.dimensions(), 384);
        assert!(e.name().starts_with("local:"), "{}", e.name());
        let texts: Vec<String> = reference.sentences.iter().map(|s| s.text.clone()).collect();
        let got = e.embed(texts).await.expect("embeds");
        assert_eq!(got.len(), reference.sentences.len());
        for (s, v) in reference.sentences.iter().zip(&got) {
            let distance = 1.0 - cosine(&s.vector, v);
            assert!(
                distance < 1e-4,
                "{:?}: cosine distance {distance} to the reference",
                s.text
            );
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "normalized: {norm}");
        }
    }

    #[tokio::test]
    async fn paraphrases_score_above_unrelated_sentences() {
        let e = load();
        let pairs = [
            ("My dog is called Biscuit.", "We named our puppy Biscuit."),
            (
                "I'm preparing for my job interview at Google.",
                "Google invited me to an onsite interview on Thursday.",
            ),
            (
                "What am I allergic to?",
                "Shellfish gives me hives, I'm allergic to it.",
            ),
            (
                "Which city is my race in?",
                "I signed up for a half marathon in Fort Worth.",
            ),
        ];
        let unrelated = [
            "The quarterly tax filing is due next week.",
            "The kitchen tap has started dripping again.",
            "We watched four episodes of the new series.",
        ];
        let mut texts: Vec<String> = pairs
            .iter()
            .flat_map(|(a, b)| [a.to_string(), b.to_string()])
            .collect();
        texts.extend(unrelated.iter().map(|s| s.to_string()));
        let v = e.embed(texts).await.expect("embeds");
        let other = &v[2 * pairs.len()..];
        for (i, (a, b)) in pairs.iter().enumerate() {
            let (va, vb) = (&v[2 * i], &v[2 * i + 1]);
            let para = cosine(va, vb);
            let worst = other
                .iter()
                .map(|u| cosine(va, u).max(cosine(vb, u)))
                .fold(f32::MIN, f32::max);
            assert!(
                para > worst + 0.15,
                "{a:?} ~ {b:?}: {para} against unrelated {worst}"
            );
        }
    }

    #[tokio::test]
    async fn a_batch_gives_what_single_texts_give() {
        let e = load();
        let texts: Vec<String> = [
            "short",
            "A much longer sentence, so that the short ones in the batch are padded.",
            "",
            "Mochi, my rabbit, chewed through my laptop charger again.",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let batch = e.embed(texts.clone()).await.expect("embeds");
        for (t, b) in texts.iter().zip(&batch) {
            let single = e.embed(vec![t.clone()]).await.expect("embeds");
            assert!(1.0 - cosine(&single[0], b) < 1e-5, "{t:?}");
        }
        assert!(e.embed(Vec::new()).await.expect("nothing").is_empty());
    }

    /// A copy of the model folder whose big file is a link, to break.
    fn copy_of_model() -> tempfile::TempDir {
        let src = model_dir();
        let dir = tempfile::tempdir().expect("tempdir");
        for f in [
            "config.json",
            "tokenizer.json",
            "modules.json",
            "sentence_bert_config.json",
        ] {
            std::fs::copy(src.join(f), dir.path().join(f)).expect("copy");
        }
        std::fs::create_dir(dir.path().join("1_Pooling")).expect("mkdir");
        std::fs::copy(
            src.join("1_Pooling/config.json"),
            dir.path().join("1_Pooling/config.json"),
        )
        .expect("copy");
        std::os::unix::fs::symlink(
            src.join("model.safetensors"),
            dir.path().join("model.safetensors"),
        )
        .expect("link");
        dir
    }

    #[test]
    fn a_missing_or_malformed_folder_names_the_file() {
        let ok = copy_of_model();
        LocalEmbed::load(&settings(ok.path())).expect("the copy loads");

        let err = |dir: &Path| LocalEmbed::load(&settings(dir)).expect_err("must fail");

        let d = copy_of_model();
        std::fs::remove_file(d.path().join("tokenizer.json")).unwrap();
        let e = err(d.path());
        assert!(
            matches!(&e, ModelError::Missing { file, .. } if *file == "tokenizer.json"),
            "{e}"
        );
        assert!(e.to_string().contains("tokenizer.json is missing"), "{e}");

        let d = copy_of_model();
        std::fs::remove_dir_all(d.path().join("1_Pooling")).unwrap();
        assert!(err(d.path()).to_string().contains("1_Pooling/config.json"));

        let d = copy_of_model();
        std::fs::write(d.path().join("config.json"), "{ not json").unwrap();
        let e = err(d.path());
        assert!(
            matches!(&e, ModelError::Malformed { path, .. } if path.ends_with("config.json")),
            "{e}"
        );

        let d = copy_of_model();
        std::fs::write(
            d.path().join("1_Pooling/config.json"),
            r#"{"pooling_mode_mean_tokens": true, "pooling_mode_cls_token": true}"#,
        )
        .unwrap();
        assert!(err(d.path())
            .to_string()
            .contains("exactly one pooling mode"));

        // A module path that leaves the model's folder is refused, whether
        // or not a pooling config waits where it points.
        for outside in ["../1_Pooling", "/tmp", "1_Pooling/../../x"] {
            let d = copy_of_model();
            let modules = std::fs::read_to_string(d.path().join("modules.json")).unwrap();
            std::fs::write(
                d.path().join("modules.json"),
                modules.replace("\"1_Pooling\"", &format!("{outside:?}")),
            )
            .unwrap();
            let e = err(d.path());
            assert!(
                e.to_string().contains("not a folder inside the model's"),
                "{outside}: {e}"
            );
        }

        let d = copy_of_model();
        std::fs::remove_file(d.path().join("model.safetensors")).unwrap();
        std::fs::write(d.path().join("model.safetensors"), b"nonsense").unwrap();
        let e = err(d.path());
        assert!(e.to_string().contains("model.safetensors"), "{e}");

        // Weights of another shape than config.json says.
        let d = copy_of_model();
        let cfg = std::fs::read_to_string(d.path().join("config.json")).unwrap();
        std::fs::write(
            d.path().join("config.json"),
            cfg.replace("\"hidden_size\": 384", "\"hidden_size\": 512"),
        )
        .unwrap();
        let e = err(d.path());
        assert!(
            e.to_string()
                .contains("not the weights config.json describes"),
            "{e}"
        );

        let e = err(Path::new("/nonexistent/model"));
        assert!(e.to_string().contains("is not a folder"), "{e}");
    }

    /// Thirty calls of small talk after one that says, once, a detail that
    /// shares no word with the question asked about it later.
    async fn memory_of(settings: Settings) -> anyhow::Result<TestRuntime> {
        let rt = TestRuntime::start_full(settings, Arc::new(ExtractiveReflect)).await?;
        let calls = std::iter::once(vec![
            "Busy morning before work.",
            // Said so that no fact rule reads it: only meaning links
            // "dachshund" to the dog asked about.
            "Pickles dug up the whole tulip bed again, that dachshund is a menace.",
            "Anyway, I should get going.",
        ])
        .chain((1..=30).map(|i| vec![CHATTER[i % 8], CHATTER[(i * 3 + 1) % 8]]));
        for (i, lines) in calls.enumerate() {
            let conn = format!("c{i}");
            rt.start_session("kairix", "mark", &conn).await?;
            for l in lines {
                rt.record_turn(&conn, Turn::new(l, "That sounds like quite a day."))?;
            }
            rt.end_session(&conn, EndOptions::default())?;
            rt.wait_idle().await?;
            tokio::time::advance(std::time::Duration::from_secs(86_400)).await;
        }
        Ok(rt)
    }

    fn retrieved(c: &AssembledContext) -> String {
        c.tiers
            .iter()
            .filter(|t| t.tier == Tier::Retrieved)
            .flat_map(|t| &t.items)
            .map(|i| i.text.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[tokio::test(start_paused = true)]
    async fn retrieval_finds_by_meaning_what_shares_no_word_with_the_question() -> anyhow::Result<()>
    {
        let question = "What's the name of my dog?";
        let mut local = Settings::for_test();
        local.embed.kind = EmbedKind::Local;
        local.embed.local.model_dir = model_dir().to_string_lossy().into();
        let rt = memory_of(local).await?;
        let c = rt
            .context("kairix", "mark", question, 2000, ContextOptions::default())
            .await?;
        let found = retrieved(&c);
        assert!(found.contains("that dachshund is a menace"), "{found}");
        // The same memory on the hashing embedder, by the question's own
        // words alone: no word is shared, so they do not find it (what the
        // model adds). (The related words of the static table do: "dog"
        // brings "dachshund".)
        let mut words_only = Settings::for_test();
        words_only.context.retrieval_related_words = 0;
        let hashing = memory_of(words_only).await?;
        let c = hashing
            .context("kairix", "mark", question, 2000, ContextOptions::default())
            .await?;
        assert!(!retrieved(&c).contains("Pickles"), "{}", retrieved(&c));

        // The turns have vectors, and a forget takes them with the turns.
        let report = rt.forget_user("mark", None).await?;
        assert!(
            report.vectors >= report.turns + report.session_summaries,
            "{report:?}"
        );
        let c = rt
            .context("kairix", "mark", question, 2000, ContextOptions::default())
            .await?;
        assert!(!recall::engine::context::AssembledContext::to_messages(&c)
            .iter()
            .any(|m| m.content.contains("Pickles")));
        Ok(())
    }

    /// Waits (in paused time) until the start's re-embedding is over.
    async fn reembedded(rt: &TestRuntime) -> recall::runtime::ReembedProgress {
        for _ in 0..100_000 {
            let p = rt.reembed_progress();
            if !p.running && (p.found > 0 || p.done == 0) {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                let q = rt.reembed_progress();
                if !q.running {
                    return q;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("re-embedding never ended: {:?}", rt.reembed_progress());
    }

    #[tokio::test(start_paused = true)]
    async fn switching_to_the_model_re_embeds_what_is_stored() -> anyhow::Result<()> {
        let question = "What's the name of my dog?";
        let rt = memory_of(Settings::for_test()).await?;
        let turns: usize = rt
            .sessions(Some("kairix"))
            .await?
            .iter()
            .map(|s| s.turn_count as usize)
            .sum();
        let mut local = Settings::for_test();
        local.embed.kind = EmbedKind::Local;
        local.embed.local.model_dir = model_dir().to_string_lossy().into();
        let rt = rt.restart_with(local.clone()).await?;
        let p = reembedded(&rt).await;
        // every summary and fact (hashing vectors), and every turn (none)
        assert!(p.found as usize > turns, "{p:?} for {turns} turns");
        assert_eq!((p.done, p.failed), (p.found, 0), "{p:?}");
        let c = rt
            .context("kairix", "mark", question, 2000, ContextOptions::default())
            .await?;
        assert!(
            retrieved(&c).contains("that dachshund is a menace"),
            "{}",
            retrieved(&c)
        );
        // Nothing is left for the next start.
        let rt = rt.restart_with(local).await?;
        let p = reembedded(&rt).await;
        assert_eq!(p.found, 0, "{p:?}");
        Ok(())
    }

    #[tokio::test]
    async fn the_runtime_starts_on_the_local_embedder_or_says_why_not() {
        let data = tempfile::tempdir().unwrap();
        let mut s = Settings::default();
        s.embed.kind = recall::engine::settings::EmbedKind::Local;
        s.embed.local.model_dir = model_dir().to_string_lossy().into();
        let rt = RuntimeBuilder::new(data.path())
            .settings(s.clone())
            .start()
            .await
            .expect("starts");
        rt.shutdown().await.expect("stops");

        let empty = tempfile::tempdir().unwrap();
        s.embed.local.model_dir = empty.path().to_string_lossy().into();
        let Err(err) = RuntimeBuilder::new(data.path()).settings(s).start().await else {
            panic!("started without a model");
        };
        assert!(matches!(err, StartupError::LocalModel(_)), "{err}");
        let chain = format!("{:#}", anyhow::Error::from(err));
        assert!(chain.contains("modules.json is missing"), "{chain}");
    }
}

#[tokio::test]
async fn an_empty_model_dir_is_a_settings_error() {
    let data = tempfile::tempdir().unwrap();
    let mut s = Settings::default();
    s.embed.kind = recall::engine::settings::EmbedKind::Local;
    let Err(err) = RuntimeBuilder::new(data.path()).settings(s).start().await else {
        panic!("started without a model folder");
    };
    assert!(err.to_string().contains("embed.local.model_dir"), "{err}");
}

#[cfg(not(feature = "local-embed"))]
#[tokio::test]
async fn without_the_feature_the_error_says_what_to_rebuild_with() {
    let data = tempfile::tempdir().unwrap();
    let mut s = Settings::default();
    s.embed.kind = recall::engine::settings::EmbedKind::Local;
    s.embed.local.model_dir = data.path().to_string_lossy().into();
    let Err(err) = RuntimeBuilder::new(data.path()).settings(s).start().await else {
        panic!("started without the feature");
    };
    assert!(matches!(err, StartupError::LocalEmbedNotBuilt), "{err}");
    assert!(err.to_string().contains("--features local-embed"), "{err}");
}

/// Re-embedding on an embedder that fails (an OpenAI-compatible address on
/// loopback where nothing listens): the pass stops, counts what is left as
/// failed, and the runtime goes on ranking by words.
#[tokio::test(start_paused = true)]
async fn reembedding_stops_when_the_embedder_fails() -> anyhow::Result<()> {
    use recall::engine::reflect::extractive::ExtractiveReflect;
    use recall::testkit::TestRuntime;
    let rt = TestRuntime::start_full(Settings::for_test(), std::sync::Arc::new(ExtractiveReflect))
        .await?;
    rt.start_session("kairix", "mark", "c1").await?;
    rt.record_turn(
        "c1",
        Turn::new("We adopted a greyhound called Juniper.", "Lovely."),
    )?;
    rt.end_session("c1", EndOptions::default())?;
    common::settle(&rt).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut s = Settings::for_test();
    s.embed.kind = recall::engine::settings::EmbedKind::Openai;
    s.embed.openai.base_url = format!("http://127.0.0.1:{closed}/v1");
    let rt = rt.restart_with(s).await?;
    let mut p = rt.reembed_progress();
    for _ in 0..10_000 {
        p = rt.reembed_progress();
        if !p.running && p.found > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(p.found >= 1, "{p:?}");
    assert_eq!((p.done, p.failed, p.running), (0, p.found, false), "{p:?}");
    let c = rt
        .context(
            "kairix",
            "mark",
            "what is the greyhound called?",
            2000,
            ContextOptions::default(),
        )
        .await?;
    let all: String = c.to_messages().iter().map(|m| m.content.clone()).collect();
    assert!(all.contains("Juniper"), "{all}");
    Ok(())
}
