//! Items no writer of this crate leaves, planted on purpose: every one gets a clear error or is
//! shown and breakable; none makes a write succeed halfway. Plus the configuration edges: the
//! TTL buffer, and durations at their limits. Each test failed on main before issue 11's fixes.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use lease_core::AcquireOptions;
use lease_core::{Clock, LeaseBackend, LeaseKey, LeaseListing, ManualClock, WaitOptions};
use lease_dynamo::DynamoLeases;
use support::Wiring;

const D: Duration = Duration::from_secs(10);

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: &str) -> AttributeValue {
    AttributeValue::N(v.to_owned())
}

/// Writes an item under `pk` (sort key `LOCK`) with exactly `attributes`.
async fn plant(client: &Client, table: &str, pk: &str, attributes: &[(&str, AttributeValue)]) {
    let mut item: HashMap<String, AttributeValue> =
        HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s("LOCK"))]);
    for (name, value) in attributes {
        item.insert((*name).to_owned(), value.clone());
    }
    client
        .put_item()
        .table_name(table)
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
}

async fn raw(client: &Client, table: &str, pk: &str) -> HashMap<String, AttributeValue> {
    support::raw_item(client, table, ("pk", "sk"), (pk, "LOCK"))
        .await
        .unwrap_or_default()
}

fn future_seconds(clock: &ManualClock) -> String {
    let now = clock.now().duration_since(SystemTime::UNIX_EPOCH).unwrap();
    (now.as_secs() + 3600).to_string()
}

async fn rig(endpoint: &str) -> (DynamoLeases, Client, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let (leases, client) = support::leases(endpoint, &Wiring::default(), |b| {
        b.with_clock(clock.clone())
    })
    .await;
    (leases, client, clock)
}

/// Tokens a Go token generator may produce that break this crate's token rules: shown, held,
/// and breakable with a forced release.
#[test]
fn foreign_tokens_are_shown_held_and_breakable() {
    support::run(
        "foreign_tokens_are_shown_held_and_breakable",
        |endpoint| async move {
            let (leases, client, clock) = rig(&endpoint).await;
            let long = "t".repeat(300);
            for (pk, token) in [("long", long.as_str()), ("newline", "a\nb"), ("empty", "")] {
                plant(
                    &client,
                    leases.table(),
                    pk,
                    &[
                        ("lease_token", s(token)),
                        ("lease_expires_at", n(&future_seconds(&clock))),
                    ],
                )
                .await;
                let key = LeaseKey::new(pk).unwrap();
                let err = leases
                    .try_acquire(&key, D, &AcquireOptions::default())
                    .await
                    .unwrap_err();
                assert!(err.is_held(), "{pk}: {err}");
                let record = LeaseBackend::inspect(&leases, &key).await.unwrap().unwrap();
                let holder = record
                    .holder()
                    .unwrap_or_else(|| panic!("{pk}: status must show the holder"));
                assert_eq!(holder.token().unwrap().as_str(), token, "{pk}");
                assert!(record.is_held_at(clock.now()), "{pk}");
                assert!(!report(&err).contains(&long), "{pk}: tokens stay redacted");
                // An operator breaks it, naming the tenure as the record shows it.
                LeaseBackend::release(
                    &leases,
                    &key,
                    holder.token().unwrap(),
                    support::tenure_fencing(&record),
                )
                .await
                .unwrap_or_else(|e| panic!("{pk}: cannot break: {e}"));
                leases
                    .try_acquire(&key, D, &AcquireOptions::default())
                    .await
                    .unwrap();
            }
        },
    );
}

/// A holder token with no usable expiry is held forever by every writer: the error says why
/// and names the attribute, and the lease can be broken.
#[test]
fn a_holder_without_a_usable_expiry_is_explained_and_breakable() {
    support::run(
        "a_holder_without_a_usable_expiry_is_explained_and_breakable",
        |endpoint| async move {
            let (leases, client, _clock) = rig(&endpoint).await;
            let later = n("99999999999999");
            for (pk, expiry) in [
                ("missing", None),
                ("text", Some(s("tomorrow"))),
                ("ms-only", None),
            ] {
                let mut attributes = vec![("lease_token", s("go-token"))];
                if let Some(expiry) = expiry {
                    attributes.push(("lease_expires_at", expiry));
                }
                if pk == "ms-only" {
                    attributes.push(("lease_expires_at_ms", later.clone()));
                }
                plant(&client, leases.table(), pk, &attributes).await;
                let key = LeaseKey::new(pk).unwrap();
                let wait = WaitOptions::new(Duration::from_secs(30));
                let started = std::time::Instant::now();
                let err = support::guard(&leases, &key, D, wait)
                    .await
                    .map(|_| ())
                    .unwrap_err();
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "{pk}: not retried until the timeout"
                );
                assert!(err.is_corrupt() && !err.is_transient(), "{pk}: {err}");
                let text = report(&err);
                assert!(text.contains("`lease_expires_at`"), "{pk}: {text}");
                assert!(text.contains("never expires"), "{pk}: {text}");
                // Every reader says the same (issue 37, item 7): corrupt, never a record that
                // reads free or expired.
                let read = LeaseBackend::inspect(&leases, &key).await.unwrap_err();
                assert!(read.is_corrupt(), "{pk}: {read}");
                assert!(report(&read).contains("never expires"), "{pk}: {read}");
                // Its holder (who knows its token) still breaks it, naming a tenure without a
                // counter.
                let token = lease_core::LeaseToken::new("go-token").unwrap();
                LeaseBackend::release(&leases, &key, &token, lease_core::backend::fencing_token(0))
                    .await
                    .unwrap();
                leases
                    .try_acquire(&key, D, &AcquireOptions::default())
                    .await
                    .unwrap();
            }
        },
    );
}

/// A counter that is not a fencing token never lets an acquisition through halfway: the key is
/// not left held by a token nobody has, and the error names the attribute and the value.
#[test]
fn a_malformed_fencing_counter_never_half_acquires() {
    support::run(
        "a_malformed_fencing_counter_never_half_acquires",
        |endpoint| async move {
            let (leases, client, _clock) = rig(&endpoint).await;
            let cases = [
                ("negative", n("-5"), "-5"),
                ("fraction", n("1.5"), "1.5"),
                ("u64-max", n("18446744073709551615"), "18446744073709551615"),
                (
                    "huge",
                    n("12345678901234567890123456789012345678"),
                    "12345678901234567890123456789012345678",
                ),
                ("text", s("7"), "\"7\""),
            ];
            for (pk, counter, shown) in cases {
                plant(
                    &client,
                    leases.table(),
                    pk,
                    &[("lease_fence", counter.clone())],
                )
                .await;
                let key = LeaseKey::new(pk).unwrap();
                let err = leases
                    .try_acquire(&key, D, &AcquireOptions::default())
                    .await
                    .unwrap_err();
                assert!(err.is_corrupt() && !err.is_transient(), "{pk}: {err}");
                let text = report(&err);
                assert!(
                    text.contains("`lease_fence`") && text.contains(shown),
                    "{pk}: {text}"
                );
                let item = raw(&client, leases.table(), pk).await;
                assert!(
                    !item.contains_key("lease_token"),
                    "{pk}: nobody holds the key: {item:?}"
                );
                // Again: the same clear error, never a lease.
                assert!(
                    leases
                        .try_acquire(&key, D, &AcquireOptions::default())
                        .await
                        .is_err(),
                    "{pk}"
                );
                // Refused acquisitions leave the counter as they found it (issue 37, item 7:
                // each one used to add 1 to a fractional counter).
                let item = raw(&client, leases.table(), pk).await;
                assert_eq!(item.get("lease_fence"), Some(&counter), "{pk}: {item:?}");
            }
            // The largest valid counter: the next token would not fit a signed 64-bit column.
            plant(
                &client,
                leases.table(),
                "exhausted",
                &[("lease_fence", n("9223372036854775807"))],
            )
            .await;
            let err = leases
                .try_acquire(
                    &LeaseKey::new("exhausted").unwrap(),
                    D,
                    &AcquireOptions::default(),
                )
                .await
                .unwrap_err();
            assert!(err.is_corrupt(), "{err}");
            assert!(report(&err).contains("exhausted"), "{err}");
        },
    );
}

/// One verdict for a corrupt item (issue 37, item 7): acquire, inspect, `inspect_strict`, an
/// election's leader and a waiting guard all say corrupt, never free and never held: a holder
/// token that is a number (expiry in the future or past: before, inspect said free, acquire held
/// or took it over), and counters that are negative, fractional or too large (before, inspect
/// read them free).
#[test]
fn a_corrupt_item_has_one_verdict_everywhere() {
    support::run(
        "a_corrupt_item_has_one_verdict_everywhere",
        |endpoint| async move {
            let (leases, client, clock) = rig(&endpoint).await;
            let later = future_seconds(&clock);
            let cases: Vec<(&str, Vec<(&str, AttributeValue)>)> = vec![
                (
                    "number-token",
                    vec![("lease_token", n("42")), ("lease_expires_at", n(&later))],
                ),
                (
                    "number-token-expired",
                    vec![
                        ("lease_token", n("42")),
                        ("lease_expires_at", n("5")),
                        ("lease_fence", n("7")),
                    ],
                ),
                ("negative", vec![("lease_fence", n("-5"))]),
                ("fraction", vec![("lease_fence", n("1.5"))]),
                (
                    "too-large",
                    vec![("lease_fence", n("18446744073709551615"))],
                ),
            ];
            let store: Arc<dyn LeaseBackend> = Arc::new(leases.clone());
            for (pk, attributes) in cases {
                plant(&client, leases.table(), pk, &attributes).await;
                let key = LeaseKey::new(pk).unwrap();
                let acquire = leases
                    .try_acquire(&key, D, &AcquireOptions::default())
                    .await
                    .unwrap_err();
                assert!(acquire.is_corrupt(), "{pk}: acquire: {acquire}");
                let inspect = LeaseBackend::inspect(&leases, &key).await.unwrap_err();
                assert!(inspect.is_corrupt(), "{pk}: inspect: {inspect}");
                let strict = leases.inspect_strict(&key).await.unwrap_err();
                assert_eq!(report(&strict), report(&inspect), "{pk}");
                let leader = lease_core::Election::new(store.clone(), &key, D)
                    .leader()
                    .await
                    .map(|l| l.is_some());
                assert!(
                    leader
                        .as_ref()
                        .is_err_and(lease_core::LeaseError::is_corrupt),
                    "{pk}: leader: {leader:?}"
                );
                let wait = WaitOptions::new(Duration::from_secs(5));
                let guard = support::guard(&leases, &key, D, wait).await.map(|_| ());
                assert!(
                    guard
                        .as_ref()
                        .is_err_and(lease_core::LeaseError::is_corrupt),
                    "{pk}: guard: {guard:?}"
                );
                // Nothing was taken over or changed.
                let item = raw(&client, leases.table(), pk).await;
                for (name, value) in &attributes {
                    assert_eq!(item.get(*name), Some(value), "{pk}: {item:?}");
                }
                assert!(
                    !item.get("lease_token").is_some_and(|t| t.is_s()),
                    "{pk}: {item:?}"
                );
            }
        },
    );
}

/// An expiry that is a negative or fractional number of seconds: every reader gives it the
/// verdict the acquire condition gives it (long expired, or held until the second after), never
/// "corrupt" beside an acquisition that takes the key over.
#[test]
fn odd_numeric_expiries_read_as_acquisitions_read_them() {
    support::run(
        "odd_numeric_expiries_read_as_acquisitions_read_them",
        |endpoint| async move {
            let (leases, client, clock) = rig(&endpoint).await;
            let past = clock
                .now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                - 60;
            for (pk, expiry) in [
                ("negative", "-5".to_owned()),
                ("fraction", format!("{past}.5")),
            ] {
                plant(
                    &client,
                    leases.table(),
                    pk,
                    &[
                        ("lease_token", s("odd-holder")),
                        ("lease_expires_at", n(&expiry)),
                    ],
                )
                .await;
                let key = LeaseKey::new(pk).unwrap();
                let record = LeaseBackend::inspect(&leases, &key)
                    .await
                    .unwrap_or_else(|e| panic!("{pk}: {e}"))
                    .unwrap();
                assert!(!record.is_held_at(clock.now()), "{pk}: {record:?}");
                leases
                    .try_acquire(&key, D, &AcquireOptions::default())
                    .await
                    .unwrap_or_else(|e| panic!("{pk}: {e}"));
            }
        },
    );
}

/// A `Held` error shows a huge owner description short.
#[test]
fn a_huge_owner_makes_a_short_message() {
    support::run(
        "a_huge_owner_makes_a_short_message",
        |endpoint| async move {
            let (leases, client, clock) = rig(&endpoint).await;
            plant(
                &client,
                leases.table(),
                "big",
                &[
                    ("lease_token", s("go-token")),
                    ("lease_expires_at", n(&future_seconds(&clock))),
                    ("lease_owner", s(&"o".repeat(300_000))),
                ],
            )
            .await;
            let err = leases
                .try_acquire(
                    &LeaseKey::new("big").unwrap(),
                    D,
                    &AcquireOptions::default(),
                )
                .await
                .unwrap_err();
            assert!(err.is_held());
            assert!(
                err.to_string().len() < 500,
                "{} bytes",
                err.to_string().len()
            );
        },
    );
}

/// `without_ttl()` writes no TTL attribute (Go's `WithIncludeTTL(false)`, or its zero buffer),
/// and removes one left behind; a buffer is checked against the fencing re-seed argument.
#[test]
fn without_ttl_writes_no_ttl() {
    support::run("without_ttl_writes_no_ttl", |endpoint| async move {
        let (leases, client, clock) = rig(&endpoint).await;
        let table = leases.table().to_owned();
        let lease = leases
            .try_acquire(&LeaseKey::new("k").unwrap(), D, &AcquireOptions::default())
            .await
            .unwrap();
        assert!(raw(&client, &table, "k").await.contains_key("ttl"));
        support::release(&leases, &lease).await.unwrap();
        let zero = DynamoLeases::builder(client.clone(), table.clone())
            .with_clock(clock.clone())
            .without_ttl()
            .build()
            .unwrap();
        let lease = zero
            .try_acquire(&LeaseKey::new("k").unwrap(), D, &AcquireOptions::default())
            .await
            .unwrap();
        assert!(
            !raw(&client, &table, "k").await.contains_key("ttl"),
            "acquire removed the old ttl"
        );
        let lease = zero.renew(&lease, D).await.unwrap();
        assert!(!raw(&client, &table, "k").await.contains_key("ttl"));
        support::release(&zero, &lease).await.unwrap();
        assert!(!raw(&client, &table, "k").await.contains_key("ttl"));

        let build = |buffer: Duration, skew: Duration| {
            DynamoLeases::builder(client.clone(), table.clone())
                .with_ttl_buffer(buffer)
                .with_max_clock_skew(skew)
                .build()
        };
        assert!(
            build(Duration::from_millis(500), Duration::ZERO)
                .unwrap_err()
                .is_invalid_input()
        );
        let err = build(Duration::from_secs(3), Duration::from_secs(1)).unwrap_err();
        assert!(report(&err).contains("three times"), "{err}");
        assert!(build(Duration::from_secs(4), Duration::from_secs(1)).is_ok());
        // A zero buffer would write a TTL at the lease's end: refused, naming the way to none.
        let err = build(Duration::ZERO, Duration::ZERO).unwrap_err();
        assert!(
            err.is_invalid_input() && err.to_string().contains("without_ttl()"),
            "{err}"
        );
    });
}

/// No duration panics: the longest lease with validation off, and waiting forever.
#[test]
fn extreme_durations_never_panic() {
    support::run("extreme_durations_never_panic", |endpoint| async move {
        let (leases, client, clock) = rig(&endpoint).await;
        let unvalidated = DynamoLeases::builder(client.clone(), leases.table())
            .with_clock(clock.clone())
            .without_input_validation()
            .build()
            .unwrap();
        let lease = unvalidated
            .try_acquire(
                &LeaseKey::new("max").unwrap(),
                Duration::MAX,
                &AcquireOptions::default(),
            )
            .await
            .unwrap();
        assert!(support::trusted(&lease, clock.as_ref()));
        let renewed = unvalidated.renew(&lease, Duration::MAX).await.unwrap();
        support::release(&unvalidated, &renewed).await.unwrap();
        let err = leases
            .try_acquire(
                &LeaseKey::new("max").unwrap(),
                Duration::MAX,
                &AcquireOptions::default(),
            )
            .await
            .unwrap_err();
        assert!(err.is_invalid_input(), "validation on: {err}");

        let key = LeaseKey::new("forever").unwrap();
        let guard = support::guard(&leases, &key, D, WaitOptions::new(Duration::MAX))
            .await
            .unwrap();
        guard.release().await.unwrap();
        let listed = leases.list_partition("forever").await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].holder(), None);
        assert!(listed[0].fencing_token().is_some());
        let _ = lease_core::backend::stored_token("");
    });
}

/// The error and its sources, joined by `: ` as a report shows them.
fn report(error: &lease_core::LeaseError) -> String {
    let mut text = error.to_string();
    let mut next = std::error::Error::source(error);
    while let Some(source) = next {
        text.push_str(": ");
        text.push_str(&source.to_string());
        next = source.source();
    }
    text
}
