//! The memory backend passes the whole conformance suite.
#![cfg(feature = "conformance")]
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use lease_core::conformance::{Case, Subject};
use lease_core::{ManualClock, MemoryBackend};

fn harness(_name: &str, case: Case) {
    let clock = Arc::new(ManualClock::new());
    let backend = Arc::new(MemoryBackend::new().with_clock(clock.clone()));
    let subject = Subject::new(backend.clone(), clock)
        .with_listing(backend.clone())
        .with_fenced_values(backend);
    lease_core::block_on(case(&subject));
}

lease_core::conformance_tests!(harness);

#[test]
fn every_case_is_in_the_macro() {
    // The macro and CASES list the same cases; a case added to one but not the other fails here.
    let source = include_str!("../src/conformance.rs");
    let (_, macro_body) = source
        .split_once("macro_rules! conformance_tests")
        .expect("macro present");
    for (name, _) in lease_core::conformance::CASES {
        assert!(
            macro_body.contains(&format!("{name},")),
            "{name} missing from the macro"
        );
    }
    // And the other way: every case the macro writes is in CASES.
    let (_, list) = macro_body
        .split_once("@cases $harness;")
        .expect("the macro's case list");
    let (list, _) = list.split_once(')').expect("end of the case list");
    let in_macro: Vec<&str> = list
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| !word.is_empty())
        .collect();
    assert!(
        in_macro.len() >= 10,
        "parsed the macro's list: {in_macro:?}"
    );
    for name in in_macro {
        assert!(
            lease_core::conformance::CASES
                .iter()
                .any(|(n, _)| *n == name),
            "{name} is in the macro but missing from CASES"
        );
    }
}
