//! The directory store passes the whole lease-core conformance suite, in both modes, and answers
//! as the reference model does. (Windows has heartbeat-only mode alone: the kernel mode's
//! suite and model run on Unix.)
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use lease_core::ManualClock;
use lease_core::conformance::model::{check_against_model, ops};
use lease_core::conformance::{Case, Subject};
use lease_file::{DirectoryStore, ModePreference};
use proptest::prelude::*;

fn subject(dir: &std::path::Path, mode: ModePreference) -> Subject {
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(
        DirectoryStore::builder(dir)
            .with_mode(mode)
            .with_clock(clock.clone())
            .build()
            .unwrap(),
    );
    Subject::new(store, clock)
}

#[cfg(unix)]
fn harness(_name: &str, case: Case) {
    let dir = tempfile::tempdir().unwrap();
    pollster::block_on(case(&subject(dir.path(), ModePreference::Kernel)));
}

#[cfg(unix)]
lease_core::conformance_tests!(harness);

mod heartbeat_only {
    use super::*;

    fn harness(_name: &str, case: Case) {
        let dir = tempfile::tempdir().unwrap();
        pollster::block_on(case(&subject(dir.path(), ModePreference::HeartbeatOnly)));
    }

    lease_core::conformance_tests!(harness);
}

const DURATION: Duration = Duration::from_millis(300);

proptest! {
    // 32 cases under Wine, where a case's file operations take 65 ms (256 took 17 s there).
    #![proptest_config(ProptestConfig {
        cases: if cfg!(windows) { 32 } else { 256 },
        ..ProptestConfig::default()
    })]

    #[cfg(unix)]
    #[test]
    fn directory_store_matches_the_model(ops in ops(3, 2, DURATION, 60)) {
        let dir = tempfile::tempdir().unwrap();
        let subject = subject(dir.path(), ModePreference::Kernel);
        let result = pollster::block_on(check_against_model(&subject, DURATION, &ops));
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }

    #[test]
    fn directory_store_matches_the_model_heartbeat_only(ops in ops(3, 2, DURATION, 60)) {
        let dir = tempfile::tempdir().unwrap();
        let subject = subject(dir.path(), ModePreference::HeartbeatOnly);
        let result = pollster::block_on(check_against_model(&subject, DURATION, &ops));
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}
