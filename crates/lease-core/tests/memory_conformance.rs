//! The memory backend passes the whole conformance suite.
#![cfg(feature = "conformance")]
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use std::time::Duration;

use lease_core::conformance::{Case, Subject};
use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencingToken, Lease, LeaseBackend, LeaseError, LeaseKey,
    LeaseRecord, LeaseToken, ManualClock, MemoryBackend,
};

fn harness(_name: &str, case: Case) {
    let clock = Arc::new(ManualClock::new());
    let backend = Arc::new(MemoryBackend::builder().with_clock(clock.clone()).build());
    let subject = Subject::new(backend, clock);
    pollster::block_on(case(&subject));
}

lease_core::conformance_tests!(harness);

#[test]
fn every_case_function_is_in_the_one_list() {
    // `CASES` and `conformance_tests!` are both written from one list, so they cannot differ; what
    // can still happen is a case written and never listed, which no backend would then run.
    let sources = [
        include_str!("../src/conformance.rs"),
        include_str!("../src/conformance/counting.rs"),
    ];
    let written: Vec<&str> = sources
        .iter()
        .flat_map(|source| source.lines())
        .filter_map(|line| line.strip_prefix("pub fn "))
        .filter(|rest| rest.contains("(s: &Subject) -> BoxFuture<'_, ()>"))
        .filter_map(|rest| rest.split('(').next())
        .collect();
    assert!(written.len() >= 10, "parsed the cases: {written:?}");
    for name in &written {
        assert!(
            lease_core::conformance::CASES
                .iter()
                .any(|(n, _)| n == name),
            "conformance::{name} is written but not in the case list"
        );
    }
    assert_eq!(written.len(), lease_core::conformance::CASES.len());
}

/// A third-party backend written before `delete` existed: it keeps the default.
#[derive(Debug)]
struct NoDelete(MemoryBackend);

impl LeaseBackend for NoDelete {
    fn name(&self) -> &'static str {
        "no-delete"
    }
    fn clock(&self) -> &dyn Clock {
        self.0.clock()
    }
    fn try_acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
        options: &'a AcquireOptions,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        self.0.try_acquire(key, duration, options)
    }
    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        self.0.renew(lease, duration)
    }
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.0.release(key, token, fencing)
    }
    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        self.0.inspect(key)
    }
}

#[test]
fn a_backend_without_delete_says_unsupported_and_passes_the_delete_cases() {
    let clock = Arc::new(ManualClock::new());
    let backend = Arc::new(NoDelete(
        MemoryBackend::builder().with_clock(clock.clone()).build(),
    ));
    let key = LeaseKey::new("kept").unwrap();
    let lease = pollster::block_on(backend.try_acquire(
        &key,
        Duration::from_secs(10),
        &lease_core::AcquireOptions::default(),
    ))
    .unwrap();
    let dyn_backend: Arc<dyn LeaseBackend> = backend.clone();
    let err = pollster::block_on(dyn_backend.delete(
        &key,
        Some(lease.token()),
        Some(lease.fencing_token()),
    ))
    .unwrap_err();
    assert!(err.is_unsupported(), "{err}");
    assert_eq!(
        err.to_string(),
        "the no-delete backend does not support delete"
    );
    assert!(
        pollster::block_on(backend.inspect(&key)).unwrap().is_some(),
        "nothing deleted"
    );
    let subject = Subject::new(backend, clock);
    for (name, case) in lease_core::conformance::CASES {
        if name.starts_with("delete_") {
            pollster::block_on(case(&subject));
        }
    }
}
