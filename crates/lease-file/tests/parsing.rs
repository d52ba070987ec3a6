//! Property tests: the record parser never panics on arbitrary bytes and round-trips what it
//! writes; key file names round-trip and never escape the directory.
#![allow(clippy::unwrap_used)]

use lease_core::LeaseKey;
use lease_file::{LeaseFileRecord, MAX_FILE_NAME_BYTES, decode_file_name, key_file_name};
use proptest::prelude::*;

fn sample(generation: u64, owner: Option<String>, heartbeat: u64) -> LeaseFileRecord {
    let text = serde_json::json!({
        "version": 1, "owner": owner, "pid": 42, "host": "h", "heartbeat": heartbeat,
        "generation": generation, "tenure": true,
    });
    LeaseFileRecord::parse(text.to_string().as_bytes()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn parser_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = LeaseFileRecord::parse(&bytes);
    }

    #[test]
    fn parser_never_panics_on_mangled_records(
        generation in any::<u64>(),
        cut in 0usize..200,
        flip in 0usize..200,
        byte in any::<u8>(),
    ) {
        let mut bytes = sample(generation, Some("o".into()), 3).to_bytes();
        if flip < bytes.len() { bytes[flip] = byte; }
        bytes.truncate(cut);
        let _ = LeaseFileRecord::parse(&bytes);
    }

    #[test]
    fn records_round_trip(generation in any::<u64>(), owner in proptest::option::of("\\\\PC{0,40}"), heartbeat in any::<u64>()) {
        let record = sample(generation, owner, heartbeat);
        prop_assert_eq!(LeaseFileRecord::parse(&record.to_bytes()).unwrap(), record);
    }

    #[test]
    fn key_names_round_trip_and_stay_in_the_directory(
        partition in "\\\\PC{1,40}",
        sort in proptest::option::of("\\\\PC{1,40}"),
    ) {
        let key = match &sort {
            Some(s) => LeaseKey::with_sort_key(partition.clone(), s.clone()),
            None => LeaseKey::new(partition.clone()),
        };
        let Ok(key) = key else { return Ok(()) };
        match key_file_name(&key) {
            Ok(name) => {
                prop_assert!(!name.contains('/') && !name.starts_with('.'), "{}", name);
                prop_assert!(name.len() <= MAX_FILE_NAME_BYTES);
                prop_assert_eq!(decode_file_name(&name), Some(key));
            }
            Err(e) => prop_assert!(e.is_invalid_input()),
        }
    }

    #[test]
    fn arbitrary_names_decode_only_canonically(name in "[A-Za-z0-9%._-]{0,30}") {
        if let Some(key) = decode_file_name(&name) {
            prop_assert_eq!(key_file_name(&key).unwrap(), name);
        }
    }
}

#[test]
fn oversized_and_wrong_version_records_are_refused() {
    assert!(LeaseFileRecord::parse(&vec![b' '; 70_000]).is_err());
    let err = LeaseFileRecord::parse(br#"{"version":2,"pid":1,"generation":1}"#).unwrap_err();
    assert!(err.to_string().contains("version 2"), "{err}");
    assert!(LeaseFileRecord::parse(b"\n\n").is_err());
}

#[test]
fn long_keys_fail_with_a_clear_error() {
    let key = LeaseKey::new("ü".repeat(100)).unwrap();
    let err = key_file_name(&key).unwrap_err();
    assert!(err.is_invalid_input());
    assert!(err.to_string().contains("file name"), "{err}");
}
