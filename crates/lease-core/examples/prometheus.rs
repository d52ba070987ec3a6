//! The metrics of a few lease operations, exported as Prometheus text:
//! `cargo run -p lease-core --example prometheus --features metrics,conformance`.
//!
//! Any `metrics` recorder works; an application would install
//! `metrics-exporter-prometheus` (`PrometheusBuilder::new().install_recorder()`) and serve
//! `handle.render()`. This example installs the small in-memory recorder of lease-core's test
//! kit, whose `render` writes the same text format, so that it needs no further dependency.
//! docs/metrics.md shows its output.

use std::sync::Arc;
use std::time::Duration;

use lease_core::conformance::recording::CapturedMetrics;
use lease_core::{
    AcquireOptions, LeaseBackend, LeaseError, LeaseGuard, LeaseKey, ManualClock, MemoryBackend,
    WaitOptions,
};
use pollster::block_on;

/// Installs `recording`, runs a few operations on the memory backend with a manual clock, and
/// returns what the recorder exports.
fn run(recording: &CapturedMetrics) -> Result<String, LeaseError> {
    recording
        .install()
        .map_err(|e| LeaseError::runtime(format!("cannot install the recorder: {e}")))?;
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryBackend::builder().with_clock(clock.clone()).build());
    let d = Duration::from_secs(10);
    let once = AcquireOptions::default();
    let key = LeaseKey::new("nightly-report")?;

    let lease = block_on(store.try_acquire(&key, d, &once))?;
    let busy = block_on(store.try_acquire(&key, d, &once));
    assert!(busy.is_err_and(|e| e.is_held()));
    clock.advance(Duration::from_secs(4));
    let lease = block_on(store.renew(&lease, d))?;
    // The holder stalls past its expiry; a contender takes the lease over and the stalled
    // holder's renewal is refused. The taker keeps its lease with a guard.
    clock.advance(Duration::from_secs(11));
    let backend: Arc<dyn LeaseBackend> = store.clone();
    let guard = LeaseGuard::builder(backend, &key, d)
        .with_wait(WaitOptions::new(Duration::ZERO))
        .with_renew_every(Duration::from_secs(1))
        .acquire_blocking()?;
    let _refused = block_on(store.renew(&lease, d));

    // Released behind its keeper's back: the keeper reports the loss.
    let record = block_on(store.inspect(&key))?;
    if let Some(token) = record.as_ref().and_then(|r| r.holder()?.token()) {
        block_on(store.release(&key, token, guard.fencing_token()))?;
    }
    while guard.check().is_ok() {
        clock.advance(Duration::from_millis(100));
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(recording.render())
}

fn main() -> Result<(), LeaseError> {
    print!("{}", run(&CapturedMetrics::new())?);
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_example_exports_the_core_metrics() {
        let text = super::run(&lease_core::conformance::recording::CapturedMetrics::new()).unwrap();
        for line in [
            "# TYPE lease_acquisitions_total counter",
            "lease_acquisitions_total{backend=\"memory\",outcome=\"acquired\"} 2",
            "lease_acquisitions_total{backend=\"memory\",outcome=\"held\"} 1",
            "lease_takeovers_total{backend=\"memory\"} 1",
            "lease_renewal_failures_total{backend=\"memory\",kind=\"not_owned\"} ",
            "lease_losses_total{backend=\"memory\",reason=\"missing\"} 1",
            "# TYPE lease_renewal_time_left_seconds summary",
            "lease_renewal_time_left_seconds_count{backend=\"memory\"} ",
            "lease_renewal_duration_seconds_count{backend=\"memory\"} ",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
