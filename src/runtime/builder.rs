//! [`RuntimeBuilder`]: the actors started on a data folder, and the
//! recovery of what a stopped process left open.

use super::*;

/// Starts a [`Runtime`].
pub struct RuntimeBuilder {
    data_dir: PathBuf,
    settings: Settings,
    reflect: Option<Arc<dyn Reflect>>,
    embed: Option<Arc<dyn Embed>>,
    clock: Option<Clock>,
    api_key: Option<String>,
    seed: Option<u64>,
    mirror: Option<Arc<dyn recall_actors::mirror::MirrorPort>>,
}

impl RuntimeBuilder {
    /// A runtime storing its data under `data_dir` (created if missing),
    /// with default settings and the reflector they name.
    pub fn new(data_dir: impl AsRef<Path>) -> Self {
        RuntimeBuilder {
            data_dir: data_dir.as_ref().to_path_buf(),
            settings: Settings::default(),
            reflect: None,
            embed: None,
            clock: None,
            api_key: None,
            seed: None,
            mirror: None,
        }
    }

    /// Use this `Embed` implementation instead of the one the settings name.
    pub fn embed(mut self, embed: Arc<dyn Embed>) -> Self {
        self.embed = Some(embed);
        self
    }

    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Use this `Reflect` implementation instead of the one the settings name.
    pub fn reflect(mut self, reflect: Arc<dyn Reflect>) -> Self {
        self.reflect = Some(reflect);
        self
    }

    /// Mirror to this port instead of the Letta server `[letta]` names
    /// (its targets are still `[letta]`'s `agents`).
    pub fn mirror(mut self, port: Arc<dyn recall_actors::mirror::MirrorPort>) -> Self {
        self.mirror = Some(port);
        self
    }

    /// The clock timestamps come from (default: the system clock).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Draw session ids from `seed` instead of at random: with a virtual
    /// clock, the same calls give the same ids every run (`recall
    /// simulate`).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The API key for `reflector.kind = "openai"`; by default it is read
    /// from the environment variable named by `reflector.openai.api_key_env`.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// The API key given to the builder, else the named variable's value.
    pub(super) fn key_from(&self, env: &str) -> Option<String> {
        self.api_key.clone().or_else(|| std::env::var(env).ok())
    }

    pub(super) fn prompts(&self) -> Result<Prompts, StartupError> {
        let mut prompts = Prompts::builtin();
        let file = &self.settings.reflector.prompt_file;
        if !file.is_empty() {
            let path = PathBuf::from(file);
            let text =
                std::fs::read_to_string(&path).map_err(|source| StartupError::PromptFile {
                    path: path.clone(),
                    source,
                })?;
            prompts.session = PromptTemplate::parse(&text, SESSION_VARS)
                .map_err(|source| StartupError::Prompt { path, source })?;
        }
        Ok(prompts)
    }

    /// Opens the data folder, starts the actors and recovers: sessions left
    /// open are ended with reason `recovered` and reflected, and queued
    /// reflections resume.
    pub async fn start(self) -> Result<Runtime, StartupError> {
        self.settings.validate()?;
        let prompts = Arc::new(self.prompts()?);
        let reflect = self.reflector()?;
        let embed = self.embedder().await?;
        // (A tokenizer file is read here, before the store is opened.)
        let counter = crate::tokens::token_counter(&self.settings.context)?;
        // Related words (retrieval) read the built-in word table: parsed
        // now, once per process, not in the first read that asks.
        if self.settings.context.retrieval_related_words > 0 {
            tokio::task::spawn_blocking(StaticEmbed::builtin)
                .await
                .map_err(|e| StartupError::Embedder(EmbedError::Failed(e.to_string())))?
                .map_err(StartupError::Embedder)?;
        }
        let rollup_prompts =
            Arc::new(
                RollupPrompts::builtin().map_err(|source| StartupError::Prompt {
                    path: PathBuf::from("config/prompts"),
                    source,
                })?,
            );
        let mirror = self.mirror_port()?;
        let clock = self.clock.unwrap_or_else(Clock::system);
        let backend = open_store(&self.data_dir, &self.settings).await?;
        // Alive for the other instances sharing the store (if any) before
        // it takes anything over.
        backend.heartbeat().await?;
        let leases = cluster::Leases::for_backend(&backend);
        prepare_store(&backend, self.settings.rollup.enabled).await?;
        let parts = Parts {
            settings: self.settings,
            seed: self.seed,
            reflect,
            embed,
            prompts,
            rollup_prompts,
            clock,
            counter,
        };
        let runtime = Runtime {
            inner: Arc::new(parts.start_actors(backend, &leases).await?),
            recovered: Vec::new(),
        };
        let runtime = runtime.recover().await?;
        let mirror_lease = leases.mirror.clone();
        runtime.join_cluster(leases).await?;
        if let Some(port) = mirror {
            runtime.start_mirror(port, mirror_lease).await?;
        }
        runtime.warm_indexes();
        runtime.start_reembedding();
        Ok(runtime)
    }

    /// The mirror port given to the builder, else the Letta client
    /// `[letta]` names (its token read from `letta.token_env`); `None`
    /// without `[letta]`.
    fn mirror_port(
        &self,
    ) -> Result<Option<Arc<dyn recall_actors::mirror::MirrorPort>>, StartupError> {
        let letta = &self.settings.letta;
        if !letta.enabled() {
            return Ok(None);
        }
        if let Some(p) = &self.mirror {
            return Ok(Some(p.clone()));
        }
        let token = std::env::var(&letta.token_env).ok();
        Ok(Some(Arc::new(crate::letta::LettaMirror::new(
            letta, token,
        )?)))
    }

    /// The `Reflect` given to the builder, else the one the settings name.
    fn reflector(&self) -> Result<Arc<dyn Reflect>, StartupError> {
        Ok(match (&self.reflect, self.settings.reflector.kind) {
            (Some(r), _) => r.clone(),
            (None, ReflectorKind::Extractive) => Arc::new(ExtractiveReflect),
            (None, ReflectorKind::Openai) => {
                let key = self.key_from(&self.settings.reflector.openai.api_key_env);
                Arc::new(
                    OpenAiReflect::new(&self.settings.reflector.openai, key)
                        .map_err(StartupError::Reflector)?,
                )
            }
        })
    }

    /// The `Embed` given to the builder, else the one the settings name.
    async fn embedder(&self) -> Result<Arc<dyn Embed>, StartupError> {
        Ok(match (&self.embed, self.settings.embed.kind) {
            (Some(e), _) => e.clone(),
            (None, EmbedKind::Hashing) => {
                Arc::new(HashingEmbed::new(self.settings.embed.dimensions))
            }
            (None, EmbedKind::Static) => {
                Arc::new(StaticEmbed::builtin().map_err(StartupError::Embedder)?)
            }
            (None, EmbedKind::Openai) => {
                let key = self.key_from(&self.settings.embed.openai.api_key_env);
                Arc::new(
                    OpenAiEmbed::new(&self.settings.embed.openai, key)
                        .map_err(StartupError::Embedder)?,
                )
            }
            (None, EmbedKind::Local) => local_embedder(&self.settings.embed.local).await?,
        })
    }
}

/// Opens the backend the settings name: sled in `dir` (on the blocking
/// pool), or PostgreSQL.
async fn open_store(dir: &Path, settings: &Settings) -> Result<SharedBackend, StartupError> {
    let dir = dir.to_path_buf();
    let store_settings = settings.store.clone();
    let fill_inbox = settings.rollup.enabled;
    Ok(match store_settings.kind {
        StoreKind::Sled => tokio::task::spawn_blocking(move || {
            let mut trees = Trees::open(&dir, &store_settings)?;
            trees.fill_inbox = fill_inbox;
            Ok::<_, StoreError>(Arc::new(trees))
        })
        .await
        .map_err(|e| StartupError::Recovery(format!("opening the store panicked: {e}")))??,
        StoreKind::Postgres => {
            let mut pg = PgBackend::connect(&store_settings.postgres).await?;
            pg.fill_inbox = fill_inbox;
            Arc::new(pg)
        }
    })
}

/// Puts right what the store holds before any actor reads it: forgets a
/// crash cut short, blocks an older version misplaced, and (with rollups)
/// summaries stored before rollups queued for them.
async fn prepare_store(backend: &SharedBackend, fill_inbox: bool) -> Result<(), StartupError> {
    // A forget a crash cut short is finished before any actor starts, so
    // none of them reads (or sends out) what was to be forgotten.
    let finished = read_blocking(backend.clone(), |b| {
        Box::pin(async move {
            let mut n = 0;
            for (user_id, agent_id) in b.pending_forgets().await? {
                b.forget_user(&user_id, agent_id.as_deref()).await?;
                n += 1;
            }
            Ok(n)
        })
    })
    .await?;
    if finished > 0 {
        info!(finished, "finished forgets a crash had cut short");
    }
    // An older version kept the latest reflection's `relationship` and
    // `self_perception` as the agent's, over its operator's: they go
    // back to their users before any context is read.
    let repaired = read_blocking(backend.clone(), |b| Box::pin(repair_agent_blocks(b))).await?;
    if !repaired.is_empty() {
        info!(
            blocks = repaired.len(),
            "moved agent-wide blocks drawn from users' calls to those users"
        );
    }
    if fill_inbox {
        // A folder from before rollups: its summaries join topics too.
        let queued = read_blocking(backend.clone(), |b| Box::pin(b.backfill_inbox())).await?;
        if queued > 0 {
            info!(
                queued,
                "queued stored summaries and facts for rollups and topics"
            );
        }
    }
    Ok(())
}

/// What the actors are started with, made ready before any of them.
struct Parts {
    settings: Settings,
    seed: Option<u64>,
    reflect: Arc<dyn Reflect>,
    embed: Arc<dyn Embed>,
    prompts: Arc<Prompts>,
    rollup_prompts: Arc<RollupPrompts>,
    clock: Clock,
    counter: Arc<dyn TokenCounter>,
}

impl Parts {
    /// Starts the actors on `backend`, in order: the Store, the rollups
    /// (if on), the watchdog, then the session supervisor; the runtime's
    /// state around them.
    async fn start_actors(
        self,
        backend: SharedBackend,
        leases: &cluster::Leases,
    ) -> Result<Inner, StartupError> {
        let Parts {
            settings,
            seed,
            reflect,
            embed,
            prompts,
            rollup_prompts,
            clock,
            counter,
        } = self;
        let generations = Arc::new(Generations::default());
        let search = Arc::new(SearchIndex::new(&embed));
        // Readers that scan (context sources, index builds, retrieved
        // turns) read the backend off the Store actor, after a barrier when
        // they must see its earlier writes.
        let reader = recall_actors::store::Reader::new(backend.clone());
        let backlog = Arc::new(Backlog::new(
            settings.store.max_unwritten_turns,
            retry_after(&settings),
        ));
        let (store, _) = Actor::spawn(
            None,
            StoreActor,
            StoreArgs {
                backend,
                settings: settings.store.clone(),
                generations: generations.clone(),
                search: search.clone(),
                backlog: backlog.clone(),
            },
        )
        .await
        .map_err(|e| StartupError::Spawn("store", e))?;
        let (rollup_stats_tx, rollup_stats) = watch::channel(RollupStats::default());
        let rollup = if settings.rollup.enabled {
            let args = RollupArgs {
                store: store.clone(),
                reader: reader.clone(),
                reflect: reflect.clone(),
                embed: embed.clone(),
                prompts: rollup_prompts,
                settings: settings.rollup.clone(),
                attempt_timeout: Duration::from_secs(settings.reflector.attempt_timeout_secs),
                clock,
                stats: rollup_stats_tx,
                lease: leases.rollup.clone(),
            };
            let (rollup, _) = Actor::spawn(None, RollupActor, args)
                .await
                .map_err(|e| StartupError::Spawn("rollup", e))?;
            Some(rollup)
        } else {
            None
        };
        let live_topics = Arc::new(LiveTopics::default());
        let watchdog_args = WatchdogArgs {
            store: store.clone(),
            settings: settings.watchdog.clone(),
            block_limit: settings.blocks.background_context_limit,
            clock,
            embed: embed.clone(),
            topic_threshold: settings.rollup.topic_threshold_for(embed.closeness()),
            live_topics: live_topics.clone(),
            lease: leases.watchdog.clone(),
        };
        let (watchdog, _) = Actor::spawn(None, WatchdogActor, watchdog_args)
            .await
            .map_err(|e| StartupError::Spawn("watchdog", e))?;
        let registry = match seed {
            Some(seed) => Registry::seeded(seed),
            None => Registry::new(),
        };
        let (stats_tx, stats_rx) = watch::channel(SupervisorStats::default());
        let (windows_tx, windows_in_flight) = watch::channel(0usize);
        let supervisor_args = SupervisorArgs {
            settings: settings.clone(),
            registry: registry.clone(),
            store: store.clone(),
            reflect: reflect.clone(),
            prompts: prompts.clone(),
            clock,
            stats: stats_tx,
            rollup: rollup.clone(),
            watchdog: Some(watchdog.clone()),
            windows_in_flight: windows_tx,
            backlog: backlog.clone(),
        };
        let (supervisor, _) = Actor::spawn(None, SessionSupervisor, supervisor_args)
            .await
            .map_err(|e| StartupError::Spawn("supervisor", e))?;

        let query_vectors = Arc::new(assembly::QueryVectors::new(
            1024,
            settings.embed.max_query_jobs,
        ));
        Ok(Inner {
            reflect,
            prompts,
            source_cache: assembly::SourceCache::new(
                settings.context.cache_entries,
                counter.clone(),
            ),
            settings,
            generations,
            clock,
            registry,
            store,
            backlog,
            supervisor,
            watchdog,
            windows_in_flight,
            rollup,
            search,
            reader,
            embed,
            counter,
            query_vectors,
            tokio: tokio::runtime::Handle::current(),
            reembed: watch::Sender::new(reembed::ReembedProgress::default()),
            live_topics,
            rollup_stats,
            stats: stats_rx,
            cluster: cluster::Cluster::default(),
            mirror: Default::default(),
        })
    }
}

/// How long a refused turn waits before it may try again: until the
/// backend's next write has had its answer (for PostgreSQL, a connection
/// attempt's time).
fn retry_after(settings: &Settings) -> Duration {
    match settings.store.kind {
        StoreKind::Postgres => {
            Duration::from_secs(settings.store.postgres.connect_timeout_secs.max(1))
        }
        StoreKind::Sled => Duration::from_secs(1),
    }
}

impl Runtime {
    pub fn builder(data_dir: impl AsRef<Path>) -> RuntimeBuilder {
        RuntimeBuilder::new(data_dir)
    }

    /// Starts this instance's share of a store others share (see
    /// `cluster`), and the task that takes in the forgets they announce.
    async fn join_cluster(&self, leases: cluster::Leases) -> Result<(), StartupError> {
        let inner = &self.inner;
        let (forgets, mut forgotten) = tokio::sync::mpsc::unbounded_channel();
        let shared = cluster::Shared {
            backend: self
                .reader()
                .map_err(|e| StartupError::Recovery(e.to_string()))?,
            store: inner.store.clone(),
            supervisor: inner.supervisor.clone(),
            stats: inner.stats.clone(),
            generations: inner.generations.clone(),
            search: inner.search.clone(),
            leases,
            clock: inner.clock,
            max_reflections: inner.settings.reflector.max_concurrent,
            refresh: Duration::from_secs(inner.settings.store.postgres.refresh_secs),
            forgets,
        };
        cluster::start(&inner.cluster, shared).await?;
        // Forgets announced by other instances, one at a time (the task
        // stops with the cluster's, at the runtime's stop).
        let here = self.clone();
        inner.cluster.add(tokio::spawn(async move {
            while let Some(forgot) = forgotten.recv().await {
                here.forgot_elsewhere(forgot).await;
            }
        }));
        Ok(())
    }

    pub(super) async fn recover(mut self) -> Result<Self, StartupError> {
        let recovery = |e: RecallError| StartupError::Recovery(e.to_string());
        let backend = self.reader().map_err(recovery)?;
        let inner = &self.inner;
        let at = inner.clock.now();
        self.recovered = cluster::end_orphans(&inner.store, &inner.supervisor, &backend, at)
            .await
            .map_err(recovery)?;
        // Over a shared store, as many as the reflectors have room for (the
        // heartbeat claims more as they finish); over its own, all of them.
        let limit = if backend.shared() {
            inner.settings.reflector.max_concurrent
        } else {
            usize::MAX
        };
        let queued = cluster::claim_reflections(&inner.supervisor, &backend, limit)
            .await
            .map_err(recovery)?;
        if queued > 0 {
            info!(jobs = queued, "resuming queued reflections");
        }
        Ok(self)
    }
}

/// The in-process embedder of `embed.local` (the model is read on the
/// blocking pool).
#[cfg(feature = "local-embed")]
pub(super) async fn local_embedder(
    settings: &recall_actors::settings::LocalEmbedSettings,
) -> Result<Arc<dyn Embed>, StartupError> {
    let settings = settings.clone();
    let started = std::time::Instant::now();
    let embed =
        tokio::task::spawn_blocking(move || crate::local_embed::LocalEmbed::load(&settings))
            .await
            .map_err(|e| StartupError::Recovery(format!("loading the model panicked: {e}")))?
            .map_err(StartupError::LocalModel)?;
    tracing::info!(
        embedder = embed.name(),
        dimensions = embed.dimensions(),
        ms = started.elapsed().as_millis() as u64,
        "local embedding model loaded"
    );
    Ok(Arc::new(embed))
}

#[cfg(not(feature = "local-embed"))]
pub(super) async fn local_embedder(
    _: &recall_actors::settings::LocalEmbedSettings,
) -> Result<Arc<dyn Embed>, StartupError> {
    Err(StartupError::LocalEmbedNotBuilt)
}
