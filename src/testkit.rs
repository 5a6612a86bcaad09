//! A test kit for voice servers that embed recall: a scripted `Reflect`, a
//! runtime on a temporary folder under tokio's paused time, and a way to
//! wait until it is idle ([`Runtime::wait_idle`]).
//!
//! ```no_run
//! # async fn t() -> anyhow::Result<()> {
//! use recall::testkit::{Step, ScriptedReflect, TestRuntime};
//! use recall::{EndOptions, Turn};
//! // inside #[tokio::test(start_paused = true)]
//! let reflect = ScriptedReflect::new([Step::ServerError(503)]);
//! let rt = TestRuntime::start_with(reflect.clone()).await?;
//! rt.start_session("kairix", "mark", "c1").await?;
//! rt.record_turn("c1", Turn::new("I got the job!", "Congratulations!"))?;
//! rt.end_session("c1", EndOptions::default())?;
//! rt.wait_idle().await?;
//! assert_eq!(reflect.calls(), 2);
//! # Ok(()) }
//! ```

use std::collections::VecDeque;
use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use recall_actors::clock::Clock;
use recall_actors::reflect::extractive::ExtractiveReflect;
use recall_actors::reflect::{BoxFuture, Reflect, ReflectError, ReflectRequest};
use recall_actors::settings::Settings;
use tempfile::TempDir;

use crate::runtime::{Runtime, RuntimeBuilder, StartupError};

/// What a [`ScriptedReflect`] does on one call.
#[derive(Debug, Clone)]
pub enum Step {
    /// Answer with this text.
    Reply(String),
    /// Fail as a timeout.
    Timeout,
    /// Fail with 429 and this `Retry-After`.
    RateLimited(Option<Duration>),
    /// Fail with this 5xx status.
    ServerError(u16),
    /// Fail with this 4xx status (not retried).
    Rejected(u16),
    /// Never answer (the reflector's attempt timeout ends it).
    Hang,
}

/// A `Reflect` that plays its steps in order, one per call on turns
/// (session reflections, window summaries), then answers like the offline
/// extractive summarizer. Calls that combine summaries (folds, rollups,
/// topic summaries) are answered by the extractive summarizer, outside the
/// script, and counted apart ([`combined_calls`](Self::combined_calls)).
/// Clones share the script.
#[derive(Clone, Default)]
pub struct ScriptedReflect {
    steps: Arc<Mutex<VecDeque<Step>>>,
    calls: Arc<AtomicUsize>,
    combined: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<ReflectRequest>>>,
}

impl ScriptedReflect {
    pub fn new(steps: impl IntoIterator<Item = Step>) -> Self {
        ScriptedReflect {
            steps: Arc::new(Mutex::new(steps.into_iter().collect())),
            ..Default::default()
        }
    }

    /// Appends steps.
    pub fn push(&self, steps: impl IntoIterator<Item = Step>) {
        self.steps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(steps);
    }

    /// Calls on turns so far.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Calls combining summaries so far.
    pub fn combined_calls(&self) -> usize {
        self.combined.load(Ordering::SeqCst)
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<ReflectRequest> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Reflect for ScriptedReflect {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn reflect(&self, request: ReflectRequest) -> BoxFuture<'static, Result<String, ReflectError>> {
        if !request.sources.is_empty() {
            self.combined.fetch_add(1, Ordering::SeqCst);
            return ExtractiveReflect.reflect(request);
        }
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(request.clone());
        let step = self
            .steps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front();
        Box::pin(async move {
            match step {
                None => ExtractiveReflect.reflect(request).await,
                Some(Step::Reply(text)) => Ok(text),
                Some(Step::Timeout) => Err(ReflectError::Timeout(Duration::from_secs(60))),
                Some(Step::RateLimited(retry_after)) => {
                    Err(ReflectError::RateLimited { retry_after })
                }
                Some(Step::ServerError(status)) => Err(ReflectError::Server {
                    status,
                    body: "scripted server error".into(),
                }),
                Some(Step::Rejected(status)) => Err(ReflectError::Rejected {
                    status,
                    body: "scripted rejection".into(),
                }),
                Some(Step::Hang) => std::future::pending().await,
            }
        })
    }
}

/// The instant test runtimes' clocks start at: Monday 5 January 2026, 09:00 UTC.
pub fn test_epoch() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0)
        .single()
        .unwrap_or_default()
}

/// A runtime on a temporary folder; derefs to [`Runtime`]. Use under
/// paused time (`#[tokio::test(start_paused = true)]`): its clock follows
/// tokio's, starting at [`test_epoch`].
pub struct TestRuntime {
    runtime: Runtime,
    dir: Arc<TempDir>,
    settings: Settings,
    reflect: Arc<dyn Reflect>,
    clock: Clock,
}

impl TestRuntime {
    /// Test settings ([`Settings::for_test`]) and the extractive summarizer.
    pub async fn start() -> Result<Self, StartupError> {
        Self::start_full(Settings::for_test(), Arc::new(ExtractiveReflect)).await
    }

    pub async fn start_with(reflect: impl Reflect) -> Result<Self, StartupError> {
        Self::start_full(Settings::for_test(), Arc::new(reflect)).await
    }

    pub async fn start_full(
        settings: Settings,
        reflect: Arc<dyn Reflect>,
    ) -> Result<Self, StartupError> {
        Self::start_at(settings, reflect, test_epoch()).await
    }

    /// A runtime whose clock starts at `epoch`.
    pub async fn start_at(
        settings: Settings,
        reflect: Arc<dyn Reflect>,
        epoch: DateTime<Utc>,
    ) -> Result<Self, StartupError> {
        let dir = tempfile::tempdir().map_err(|e| {
            StartupError::Recovery(format!("cannot create a temporary folder: {e}"))
        })?;
        let clock = Clock::starting_at(epoch);
        let runtime = RuntimeBuilder::new(dir.path())
            .settings(settings.clone())
            .reflect(reflect.clone())
            .clock(clock)
            .start()
            .await?;
        Ok(TestRuntime {
            runtime,
            dir: Arc::new(dir),
            settings,
            reflect,
            clock,
        })
    }

    pub fn data_dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Kills every actor without ending sessions or draining (a crash), then
    /// starts a new runtime on the same folder, which recovers.
    pub async fn crash_and_restart(self) -> Result<Self, StartupError> {
        self.crash_and_restart_with(|_| Ok(())).await
    }

    /// Like [`crash_and_restart`](Self::crash_and_restart), running
    /// `between` on the data folder while no runtime has it open (to leave
    /// it as a crash at a chosen moment would).
    pub async fn crash_and_restart_with(
        self,
        between: impl FnOnce(&std::path::Path) -> Result<(), StartupError>,
    ) -> Result<Self, StartupError> {
        self.runtime.clone().abort().await;
        between(self.dir.path())?;
        let runtime = RuntimeBuilder::new(self.dir.path())
            .settings(self.settings.clone())
            .reflect(self.reflect.clone())
            .clock(self.clock)
            .start()
            .await?;
        Ok(TestRuntime { runtime, ..self })
    }
}

impl TestRuntime {
    /// Stops cleanly, then starts again on the same folder with other
    /// settings (another embedder, say).
    pub async fn restart_with(self, settings: Settings) -> Result<Self, StartupError> {
        self.runtime
            .shutdown()
            .await
            .map_err(|e| StartupError::Recovery(format!("the stop before the restart: {e}")))?;
        let runtime = RuntimeBuilder::new(self.dir.path())
            .settings(settings.clone())
            .reflect(self.reflect.clone())
            .clock(self.clock)
            .start()
            .await?;
        Ok(TestRuntime {
            runtime,
            settings,
            ..self
        })
    }
}

impl Deref for TestRuntime {
    type Target = Runtime;
    fn deref(&self) -> &Runtime {
        &self.runtime
    }
}
