//! Errors are said once: rendered as an anyhow/eyre-style report (`{error}`, then `caused by:
//! {source}` for each source), no sentence appears twice, and durations read in human units.

use std::error::Error;
use std::time::{Duration, SystemTime};

use lease_core::backend::fencing_token;
use lease_core::{Holder, LeaseError, LeaseKey, LeaseToken, LossReason, NotOwnedReason};

/// Each level of `error`'s report: its own message, then each source's.
fn levels(error: &(dyn Error + 'static)) -> Vec<String> {
    let mut out = vec![error.to_string()];
    let mut next = error.source();
    while let Some(source) = next {
        out.push(source.to_string());
        next = source.source();
    }
    out
}

/// The report as anyhow prints it with `{:?}`.
fn report(error: &(dyn Error + 'static)) -> String {
    levels(error).join("\ncaused by: ")
}

/// The sentences of one level: its text cut at `: `, `; ` and parentheses, trimmed.
fn sentences(level: &str) -> Vec<String> {
    level
        .split([';', '(', ')'])
        .flat_map(|part| part.split(": "))
        .map(str::trim)
        .filter(|s| s.len() >= 8)
        .map(str::to_owned)
        .collect()
}

/// Fails when a sentence of one level appears again in another level.
fn assert_said_once(error: &(dyn Error + 'static)) {
    let levels = levels(error);
    for (i, level) in levels.iter().enumerate() {
        for sentence in sentences(level) {
            for (j, other) in levels.iter().enumerate() {
                assert!(
                    i == j || !other.contains(&sentence),
                    "{sentence:?} is said twice:\n{}",
                    report(error)
                );
            }
        }
    }
}

/// Fails when a duration in the report has more than three significant digits (`203.684605ms`).
fn assert_durations_readable(text: &str) {
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let starts_number = chars[i].is_ascii_digit()
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '.'));
        if !starts_number {
            i += 1;
            continue;
        }
        let end = (i..chars.len())
            .find(|&j| !(chars[j].is_ascii_digit() || chars[j] == '.'))
            .unwrap_or(chars.len());
        let number: String = chars[i..end].iter().collect();
        let unit: String = chars[end..]
            .iter()
            .take_while(|c| c.is_alphabetic())
            .collect();
        if matches!(
            unit.as_str(),
            "ns" | "µs" | "us" | "ms" | "s" | "m" | "h" | "d"
        ) {
            let digits = number.trim_start_matches(['0', '.']).replace('.', "");
            assert!(
                digits.trim_end_matches('0').len() <= 3 || !number.contains('.'),
                "{number}{unit} has more than three significant digits in {text:?}"
            );
        }
        i = end;
    }
}

fn check(error: &LeaseError) {
    assert_said_once(error);
    assert_durations_readable(&report(error));
}

fn key() -> LeaseKey {
    LeaseKey::new("/tmp/jobs/nightly.lease").unwrap_or_else(|_| unreachable!())
}

fn holder() -> Holder {
    Holder::new()
        .with_owner("report-cron")
        .with_process(4242, "build-7")
        .with_token(LeaseToken::new("0123456789abcdef").unwrap_or_else(|_| unreachable!()))
        .with_fencing(fencing_token(7))
        .with_expires_at(SystemTime::UNIX_EPOCH + Duration::from_secs(1_893_456_000))
}

/// An OS error with a cause of its own, like a wrapped `ENAMETOOLONG`.
#[derive(Debug)]
struct Opening(std::io::Error);

impl std::fmt::Display for Opening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("open /tmp/jobs")
    }
}

impl Error for Opening {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.0)
    }
}

fn name_too_long() -> std::io::Error {
    std::io::Error::from_raw_os_error(36)
}

/// One of every variant (and of every reason a variant carries).
fn every_variant() -> Vec<LeaseError> {
    let mut out = vec![
        LeaseError::held(key(), Some(holder())),
        LeaseError::held(key(), None),
        LeaseError::invalid("duration", "must be greater than zero"),
        LeaseError::backend("file", false, Opening(name_too_long())),
        LeaseError::backend("file", true, name_too_long()),
        LeaseError::timeout(
            key(),
            Duration::from_nanos(203_684_605),
            LeaseError::held(key(), Some(holder())),
        ),
        LeaseError::timeout(
            key(),
            Duration::from_nanos(5_284_000_123),
            LeaseError::backend("dynamodb", true, Opening(name_too_long())),
        ),
        LeaseError::corrupt(key(), "it is a symbolic link; links are never followed"),
        LeaseError::foreign(key(), "a Go kit/lockfile PIDLock of pid 12"),
        LeaseError::runtime("no tokio runtime on this thread"),
        LeaseError::unsupported("file", "delete"),
    ];
    for reason in [
        NotOwnedReason::Expired,
        NotOwnedReason::TakenOver,
        NotOwnedReason::Missing,
        NotOwnedReason::Fenced,
    ] {
        out.push(LeaseError::not_owned(key(), reason));
        out.push(LeaseError::lost(key(), LossReason::NotOwned(reason)));
    }
    for reason in [
        LossReason::BackendFailing(std::sync::Arc::new(LeaseError::backend(
            "dynamodb",
            true,
            Opening(name_too_long()),
        ))),
        LossReason::DeadlinePassed,
    ] {
        out.push(LeaseError::lost(key(), reason));
    }
    out
}

#[test]
fn every_variant_says_each_sentence_once_in_a_report() {
    for error in every_variant() {
        check(&error);
    }
}

#[test]
fn the_cause_is_the_source_not_part_of_the_message() {
    let error = LeaseError::backend("file", false, Opening(name_too_long()));
    let shown = report(&error);
    // The system's own text for error 36 ("File name too long (os error 36)" on Linux; on
    // Windows 36 is ERROR_SHARING_BUFFER_EXCEEDED, with a text of its own).
    let cause = name_too_long().to_string();
    assert_eq!(shown.matches(&cause).count(), 1, "{shown}");
    assert_eq!(levels(&error).len(), 3, "{shown}");
    assert_eq!(error.to_string(), "file backend failed");
}

#[test]
fn a_timeout_reads_in_human_units_and_names_the_holder_once() {
    let error = LeaseError::timeout(
        key(),
        Duration::from_nanos(203_684_605),
        LeaseError::held(key(), Some(holder())),
    );
    let shown = report(&error);
    assert!(
        shown.starts_with("timed out after 204ms waiting for lease /tmp/jobs/nightly.lease"),
        "{shown}"
    );
    assert_eq!(shown.matches("pid 4242 on build-7").count(), 1, "{shown}");
}

#[test]
fn a_caller_that_never_acquired_is_not_told_the_lease_is_free() {
    let shown = LeaseError::not_owned(key(), NotOwnedReason::Missing).to_string();
    assert!(!shown.contains("not held"), "{shown}");
    assert!(shown.contains("never acquired"), "{shown}");
}

#[test]
fn the_checks_catch_what_they_look_for() {
    // A message that repeats its source, as `Backend` did.
    #[derive(Debug)]
    struct Repeating(std::io::Error);
    impl std::fmt::Display for Repeating {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "open /tmp/jobs: {}", self.0)
        }
    }
    impl Error for Repeating {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }
    let repeating = Repeating(name_too_long());
    assert!(
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            assert_said_once(&repeating)
        }))
        .is_err()
    );
    let debug_duration = format!("waited {:?}", Duration::from_nanos(203_684_605));
    assert!(std::panic::catch_unwind(|| assert_durations_readable(&debug_duration)).is_err());
    assert_durations_readable("waited 1m 30s, then 5.28s, then 204ms");
}
