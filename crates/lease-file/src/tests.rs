//! Property tests of the private on-disk encoding: the record parser never panics on arbitrary
//! bytes and round-trips what it writes; key file names round-trip and never escape the
//! directory; fenced-value names are a namespace of their own.
#![allow(clippy::unwrap_used)]

use lease_core::LeaseKey;
use proptest::prelude::*;

use crate::encode::{
    FENCED_PREFIX, MAX_FILE_NAME_BYTES, RECORD_SUFFIX, decode_file_name, fenced_file_name,
    key_file_name,
};
use crate::record::LeaseFileRecord;

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
fn short_and_minimal_records_parse_as_they_should() {
    assert!(LeaseFileRecord::parse(b"").is_err());
    assert!(LeaseFileRecord::parse(b"{\"version\":1").is_err());
    let ok = LeaseFileRecord::parse(br#"{"version":1,"pid":7,"generation":3}"#).unwrap();
    assert_eq!(ok.generation, 3);
    assert!(ok.owner.is_none());
}

#[test]
fn long_keys_fail_with_a_clear_error() {
    let key = LeaseKey::new("ü".repeat(100)).unwrap();
    let err = key_file_name(&key).unwrap_err();
    assert!(err.is_invalid_input());
    assert!(err.to_string().contains("file name"), "{err}");
}

#[test]
fn names_are_percent_encoded_and_fenced_ones_prefixed() {
    let key = LeaseKey::with_sort_key("../etc", "pass wd").unwrap();
    let name = key_file_name(&key).unwrap();
    assert_eq!(name, "%2E%2E%2Fetc.pass%20wd.lease");
    assert!(name.ends_with(RECORD_SUFFIX));
    assert_eq!(decode_file_name(&name), Some(key));
    let name = LeaseKey::with_sort_key("checkpoints", "shard 7").unwrap();
    let file = fenced_file_name(&name).unwrap();
    assert_eq!(file, "fenced~checkpoints.shard%207");
    assert_eq!(decode_file_name(&file), None); // never listed as a lease
}

fn key_strategy() -> impl Strategy<Value = LeaseKey> {
    // Any text, biased towards the characters the encodings use or could be confused by.
    let part = prop_oneof![
        "[a-z~.%_-]{1,12}",
        "fenced~[a-z.~]{0,8}",
        any::<String>().prop_filter("non-empty", |s| !s.is_empty() && s.len() < 40),
    ];
    (part.clone(), proptest::option::of(part)).prop_filter_map("valid key", |(p, s)| match s {
        None => LeaseKey::new(p).ok(),
        Some(s) => LeaseKey::with_sort_key(p, s).ok(),
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// No lease record name (nor the name of a temporary directory, `.lease-init.<16 hex>.<16 hex>`)
    /// contains `~`, and every fenced-value name does; fenced names never decode as lease keys,
    /// nor do the temporaries of either. So the namespaces are disjoint, and the fenced encoding
    /// is injective like the lease one.
    #[test]
    fn fenced_names_are_a_namespace_no_lease_key_reaches(a in key_strategy(), b in key_strategy()) {
        if let (Ok(record), Ok(fenced)) = (key_file_name(&a), fenced_file_name(&a)) {
            prop_assert!(!record.contains('~'), "{record}");
            prop_assert!(fenced.starts_with(FENCED_PREFIX));
            prop_assert!(fenced.contains('~'));
            prop_assert!(!fenced.contains('/'));
            prop_assert_eq!(decode_file_name(&fenced), None);
            for name in [&record, &fenced] {
                prop_assert_eq!(decode_file_name(&format!(".{name}.init.0123456789abcdef")), None);
                prop_assert_eq!(decode_file_name(".lease-init.0123456789abcdef.0123456789abcdef"), None);
            }
            prop_assert!(fenced.len() <= 255 - 23, "room for the temporary directory's name");
            if let (Ok(record_b), Ok(fenced_b)) = (key_file_name(&b), fenced_file_name(&b)) {
                prop_assert_ne!(&fenced, &record_b);
                prop_assert_eq!(fenced == fenced_b, a == b);
                prop_assert_eq!(record == record_b, a == b);
            }
        }
    }
}
