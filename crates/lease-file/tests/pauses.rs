//! Pause injection: the fault points of `src/faults.rs` are live.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::{AcquireOptions, block_on, FencedValues, LeaseBackend, LeaseBackendExt, LeaseKey};
use lease_file::{DirectoryStore, ModePreference};

const POINTS: [&str; 6] = [
    "lease-file/before-acquire",
    "lease-file/before-takeover",
    "lease-file/before-renew",
    "lease-file/before-release",
    "lease-file/before-fence",
    "lease-file/before-put",
];

/// Every fault point fires, once per rename of its kind, in both modes: without the `fail`
/// crate's own `failpoints` feature the points compile to nothing and every pause test would
/// pass without pausing anything.
#[test]
fn every_fault_point_fires_before_its_rename() {
    let scenario = fail::FailScenario::setup();
    let hits: Arc<Mutex<HashMap<&str, u32>>> = Arc::default();
    for point in POINTS {
        let hits = hits.clone();
        fail::cfg_callback(point, move || *hits.lock().unwrap().entry(point).or_default() += 1)
            .unwrap();
    }
    for mode in [ModePreference::Kernel, ModePreference::HeartbeatOnly] {
        hits.lock().unwrap().clear();
        let dir = tempfile::tempdir().unwrap();
        let store = DirectoryStore::open_with_mode(dir.path(), mode).unwrap();
        let key = LeaseKey::new("k").unwrap();
        let first = block_on(store.acquire(&key, Duration::from_millis(10))).unwrap();
        let renewed = block_on(store.renew(&first, Duration::from_millis(10))).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let options = AcquireOptions::default();
        let second = block_on(store.try_acquire(&key, Duration::from_secs(5), &options)).unwrap();
        assert!(second.fencing_token() > renewed.fencing_token());
        block_on(store.release_lease(&second)).unwrap();
        let name = LeaseKey::new("resource").unwrap();
        block_on(store.fence_and_read(&name, second.fencing_token())).unwrap();
        block_on(store.put_fenced(&name, second.fencing_token(), b"v")).unwrap();
        let hits = hits.lock().unwrap().clone();
        for point in POINTS {
            assert_eq!(hits.get(point), Some(&1), "{mode:?}: {point} in {hits:?}");
        }
    }
    scenario.teardown();
}
