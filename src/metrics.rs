//! Prometheus metrics. The actors record through the `metrics` facade (a
//! no-op in an embedding without a recorder); `recall serve` installs the
//! Prometheus recorder and renders it at `/metrics`, setting the gauges
//! from the runtime's stats at each scrape.

use std::sync::OnceLock;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing::warn;

use crate::runtime::Runtime;

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process's Prometheus recorder, installed on first use. `None` if
/// the embedding application installed another recorder first.
pub fn prometheus() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("recall_reflection_seconds".into()),
                    &[0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0],
                )
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("recall_store_flush_seconds".into()),
                        &[0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5],
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("recall_store_batch_writes".into()),
                        &[1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0, 5000.0],
                    )
                });
            let recorder = match builder {
                Ok(b) => b.build_recorder(),
                Err(err) => {
                    warn!(error = %err, "cannot set up the prometheus recorder");
                    return None;
                }
            };
            let handle = recorder.handle();
            if let Err(err) = metrics::set_global_recorder(recorder) {
                warn!(error = %err, "a metrics recorder is already installed; /metrics stays empty");
                return None;
            }
            describe();
            Some(handle)
        })
        .clone()
}

fn describe() {
    describe_gauge!("recall_live_sessions", "Sessions live now");
    describe_counter!(
        "recall_store_skipped_records_total",
        "Stored records skipped because they did not decode, by tree"
    );
    describe_counter!(
        "recall_turns_recorded_total",
        "Turns recorded by session actors"
    );
    describe_counter!(
        "recall_sessions_ended_total",
        "Sessions ended, by reason (silence_timeout, disconnect, shutdown, recovered, crashed, cleared)"
    );
    describe_gauge!(
        "recall_reflections_queued",
        "Reflections waiting for a slot"
    );
    describe_gauge!("recall_reflections_running", "Reflections running now");
    describe_counter!(
        "recall_reflections_failed_total",
        "Reflections that exhausted their attempts and went to the dead letters"
    );
    describe_histogram!(
        "recall_reflection_seconds",
        Unit::Seconds,
        "Time a Reflect implementation took to answer, per successful attempt"
    );
    describe_counter!(
        "recall_llm_errors_total",
        "Failed reflection attempts, by kind"
    );
    describe_gauge!("recall_dead_letters", "Dead letters stored now");
    describe_counter!(
        "recall_window_summaries_started_total",
        "In-session window summaries started"
    );
    describe_counter!(
        "recall_window_summaries_completed_total",
        "In-session window summaries completed"
    );
    describe_counter!(
        "recall_window_summaries_failed_total",
        "In-session window summaries that failed (the next covers their messages)"
    );
    describe_gauge!(
        "recall_window_summaries_in_flight",
        "In-session summaries (windows and folds) being made now"
    );
    describe_counter!(
        "recall_window_lag_rounds_total",
        "Rounds of live calls past the window threshold, at which the lag is sampled"
    );
    describe_counter!(
        "recall_window_lag_messages_total",
        "Sum over those rounds of the messages not yet in a completed window summary"
    );
    describe_gauge!(
        "recall_window_lag_messages_max",
        "The most messages a live call has had outside a completed window summary"
    );
    describe_gauge!(
        "recall_mirror_pending_targets",
        "Letta agents not yet in step with recall's store (changed, or failing)"
    );
    describe_counter!(
        "recall_mirror_passages_written_total",
        "Summaries written to Letta agents as archival passages"
    );
    describe_counter!(
        "recall_mirror_passages_deleted_total",
        "Summaries whose Letta passages were deleted (replaced, or forgotten)"
    );
    describe_counter!(
        "recall_mirror_blocks_written_total",
        "background_context blocks written to Letta agents"
    );
    describe_counter!(
        "recall_mirror_failed_runs_total",
        "Runs of a Letta agent's mirror that failed (each is tried again with backoff)"
    );
    describe_histogram!(
        "recall_store_batch_writes",
        "Writes made durable by one store flush (the group-commit batch)"
    );
    describe_histogram!(
        "recall_store_flush_seconds",
        Unit::Seconds,
        "Time a store flush to disk took"
    );
}

/// The metrics text for a scrape: gauges set from `runtime`'s stats first.
pub async fn render(handle: &PrometheusHandle, runtime: &Runtime) -> String {
    if let Ok(stats) = runtime.stats().await {
        gauge!("recall_live_sessions").set(stats.supervisor.live_sessions as f64);
        gauge!("recall_reflections_queued").set(stats.supervisor.reflections_queued as f64);
        gauge!("recall_reflections_running").set(stats.supervisor.reflections_running as f64);
        let s = &stats.supervisor;
        counter!("recall_reflections_stored_total").absolute(s.summaries_stored);
        // A reflection whose summary was there already (another instance's,
        // or a replay's).
        counter!("recall_reflections_duplicate_total").absolute(s.duplicates);
        counter!("recall_window_summaries_started_total").absolute(s.windows_started);
        counter!("recall_window_summaries_completed_total").absolute(s.windows_completed);
        counter!("recall_window_summaries_failed_total").absolute(s.windows_failed);
        counter!("recall_window_lag_rounds_total").absolute(s.window_lag_rounds);
        counter!("recall_window_lag_messages_total").absolute(s.window_lag_sum);
        gauge!("recall_window_lag_messages_max").set(s.window_lag_max as f64);
    }
    gauge!("recall_window_summaries_in_flight").set(runtime.windows_in_flight() as f64);
    // Counted by the store, not listed: a scrape reads no letter.
    if let Ok(dead) = runtime.dead_letter_count().await {
        gauge!("recall_dead_letters").set(dead as f64);
    }
    if let Some(m) = runtime.mirror_stats() {
        gauge!("recall_mirror_pending_targets").set(m.pending as f64);
        counter!("recall_mirror_passages_written_total").absolute(m.written.passages_written);
        counter!("recall_mirror_passages_deleted_total").absolute(m.written.passages_deleted);
        counter!("recall_mirror_blocks_written_total").absolute(m.written.blocks_written);
        counter!("recall_mirror_failed_runs_total").absolute(m.failed_runs);
    }
    handle.run_upkeep();
    handle.render()
}
