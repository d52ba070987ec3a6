//! Leases on DynamoDB conditional writes: one round trip per operation, fencing tokens that
//! survive release and TTL, holders learned from the failed write itself, and lost replies
//! reconciled instead of dropping a lease that is still held.
//!
//! ```no_run
//! use lease_dynamo::{AcquireOptions, DynamoLeases, LeaseBackend, LeaseBackendExt, LeaseKey};
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), lease_core::LeaseError> {
//! // The default AWS chain; `Some("http://127.0.0.1:8000")` for DynamoDB Local.
//! let client = lease_dynamo::sdk_client(None, None).await;
//! let leases = DynamoLeases::new(client, "leases")?;
//! leases.ensure_table().await?; // once: on-demand table with TTL
//!
//! let key = LeaseKey::new("regenerate-sitemap")?;
//! // One attempt; `leases.acquire(&key, d)` would wait until the lease is free.
//! let once = AcquireOptions::default();
//! match leases.try_acquire(&key, Duration::from_secs(30), &once).await {
//!     Ok(lease) => {
//!         // Pass lease.fencing_token() with every write to the protected resource.
//!         let lease = leases.renew(&lease, Duration::from_secs(30)).await?;
//!         leases.release_lease(&lease).await?;
//!     }
//!     Err(e) if e.is_held() => println!("busy: {e}"), // names the holder and its expiry
//!     Err(e) => return Err(e),
//! }
//! # Ok(()) }
//! ```
//!
//! [`DynamoLeases`] implements [`lease_core::LeaseBackend`], [`lease_core::LeaseListing`] and
//! the optional [`lease_core::FencedValues`] (checkpoints only the newest fencing token writes:
//! see *Fenced values* below), so
//! [`lease_core::LeaseGuard`] keeps its leases alive and everything in `lease-core` works on it;
//! its only lease methods are the trait's. It offers everything the Go `lease` package does
//! (the same options and defaults, errors that branch with [`LeaseError::is_held`] and
//! [`is_not_owned`](lease_core::LeaseError::is_not_owned)); code ported from Go can keep Go's
//! method names and argument shapes through [`go::Manager`].
//!
//! # Item layout
//!
//! One item per lease, key `(pk, sk)`; a key without a sort key is stored under `sk = "LOCK"`
//! (so `LeaseKey::new("a")` and `LeaseKey::with_sort_key("a", "LOCK")` are the same lease).
//! The layout is the Go package's, extended: a Go service and this crate can share a table,
//! key by key, during a migration (see *Sharing a table with the Go package*).
//!
//! | attribute (default name) | type | meaning |
//! |---|---|---|
//! | `pk`, `sk` | S | the key |
//! | `lease_token` | S | the holder's owner token; absent when released |
//! | `lease_expires_at` | N | expiry in Unix **seconds**, rounded up (Go's attribute and unit); 0 when released |
//! | `lease_expires_at_ms` | N | the same expiry in Unix **milliseconds**; absent on items Go wrote, and when released |
//! | `lease_acquired_at` | N | acquisition time, Unix milliseconds |
//! | `lease_owner` | S | optional human description of the holder |
//! | `lease_fence` | N | fencing counter: incremented by every acquisition, kept by release |
//! | `lease_request` | S | id of the acquire or release call that last changed the holder |
//! | `ttl` | N | Unix seconds: expiry + TTL buffer (1 h), or release time + buffer; not written with a zero buffer |
//! | `fenced_value` | B | a [`FencedValues`] value (up to 64 KiB) |
//! | `value_fence` | N | the highest fencing token that wrote or read `fenced_value` |
//!
//! # One request per operation
//!
//! | operation | request | condition | cost |
//! |---|---|---|---|
//! | acquire, takeover included | `UpdateItem` `SET token, expires, expires_ms, acquired, owner, value, request, ttl, fence = if_not_exists(fence, :seed) + 1`, `ReturnValues=UPDATED_OLD` (the counter before the increment, and the token of a holder replaced: a takeover) | the counter is usable (absent, or a number in `[0, 2^63-1)`) **and** the key is free: `attribute_not_exists(#token) OR #expires <= :cutoff_s OR (#expires_ms <= :cutoff_ms AND #expires <= :cutoff_s_up)`, with `cutoff = now - max_clock_skew` and `cutoff_s` its whole second minus one (Go's items carry only a rounded-down second) | 1 request, 1 WCU |
//! | renew | `UpdateItem` `SET expires, expires_ms, ttl` | `#token = :token AND #fence = :fence AND #expires_ms > :now` | 1 request, 1 WCU |
//! | release | `UpdateItem` `SET expires = 0, request, ttl REMOVE token, expires_ms, owner, value, acquired` | `#token = :token AND #fence = :fence` (for a record with no counter: the token, and no usable counter) | 1 request, 1 WCU |
//! | delete | `DeleteItem` | the state named, as release names a tenure (`#token = :token AND #fence = :fence`), or for a free record `attribute_not_exists(#token) AND #fence = :fence`; **and** `attribute_not_exists(value_fence)` | 1 request, 1 WCU; 2 when a fenced value shares the item (see *Delete*) |
//! | inspect | `GetItem`, strongly consistent | | 1 request, 1 RCU |
//! | list a partition | `Query` on `pk`, strongly consistent | | 1 request per 1 MB page, 1 RCU per 4 KB |
//! | put_fenced | `UpdateItem` `SET #val = :v, #vfence = :t` | `attribute_not_exists(#vfence) OR #vfence <= :t` | 1 request, 1 WCU per KB of the item |
//! | fence_and_read | `UpdateItem` `SET #vfence = :t`, `ReturnValues=ALL_NEW` | the same | 1 request, 1 WCU per KB of the item |
//!
//! Write units are for items up to 1 KB (a lease item is about 250 bytes plus key and owner
//! lengths); a write whose condition fails still consumes its write units. A fenced value makes
//! its item bigger: every write to it, `fence_and_read` included, consumes 1 WCU per KB of the
//! larger of the item's sizes before and after (about 60 WCU for a 60 KiB checkpoint). Every
//! conditional write sets `ReturnValuesOnConditionCheckFailure=ALL_OLD`, which costs no extra
//! request: a refused acquire reports the holder (owner, expiry, fencing token) from the reply
//! itself. The one exception to "one request": an acquisition that finds a fractional fencing
//! counter (which only a hand-edited item holds; DynamoDB conditions cannot test that a number
//! is whole) is undone by a second `UpdateItem` and reported as an error; and, with a
//! [recreation grace](DynamoLeasesBuilder::with_recreation_grace), an acquisition that seeds a
//! new fencing counter reads the table's creation time (`DescribeTable`) and, in a table younger
//! than the grace, is undone the same way.
//!
//! # Transient failures and lost replies
//!
//! The SDK's own retries are turned off for the client the manager keeps; the manager retries
//! throttling (`ProvisionedThroughputExceededException`, `ThrottlingException`,
//! `RequestLimitExceeded`), `InternalServerError`/5xx, timeouts and transport failures itself,
//! with full-jitter exponential backoff ([`RetryPolicy`]), never past the time the lease could
//! still be trusted, nor past the caller's deadline
//! ([`AcquireOptions::with_deadline`](lease_core::AcquireOptions::with_deadline), which a
//! waiting acquire sets to the end of its wait): no retry starts at or after it, and a retry's
//! attempt timeout is capped by the time left, so an acquire given a deadline returns within it
//! plus one attempt timeout. Missing credentials are permanent in every form the AWS chain
//! reports them, instance metadata refusing us (401/403/404) or the whole chain timing out
//! included. Missing tables, validation and access errors are permanent and come back at
//! once as [`LeaseError::Backend`] naming the table. So does a
//! client that cannot send at all: no credentials, no region, an endpoint that is not a URL or
//! whose host name does not exist; the message says which and what to set
//! ([`DynamoError::is_table_missing`] tells a missing table apart). The one exception is a
//! renewal: a table missing under a held lease (deleted, or DynamoDB Local restarted in memory)
//! took the lease item with it, so the renewal fails with `NotOwned` (reason `Missing`) and a
//! guard stops trusting at once. A failed condition is an answer, never retried.
//!
//! A retry sends the *same* request (same token, timestamps and request id). If an earlier
//! attempt was applied but its reply lost, the retry fails its condition and the `ALL_OLD` item
//! tells what happened. A write counts as this call's own only when the item proves it:
//!
//! * acquire and release: `lease_request` holds **this call's** request id, which nothing else
//!   writes; then the acquisition (with the counter and expiry in the item) or the release
//!   landed. Anything else is the truth of the item: `Held` for another holder (even one whose
//!   token equals ours: a token names a tenure, not a caller), `NotOwned` for a release that
//!   finds another tenure or none. A release that landed and was followed by another
//!   acquisition before the retry reports `NotOwned(TakenOver)`: the lease is gone either way.
//! * renew: our token, our fencing counter and an expiry **at or after the one we wrote**.
//! * delete: never. A deleted item keeps no trace of who deleted it, so a retry that finds the
//!   item gone reports `NotOwned(Missing)`, as a delete of a key with no record does: the record
//!   is gone either way, perhaps not by this call. A retry that finds a record created since
//!   (acquired afresh) refuses it and leaves it alone.
//!
//! Items that no writer of this crate or of the Go package leaves are reported, never acted on
//! halfway: a fencing counter that is not a whole number in `[0, 2^63 - 1]` (or has run out),
//! and a holder with no numeric expiry (held forever by both packages), each fail with
//! [`LeaseError::Corrupt`] naming the table, the attribute and its value. A holder token that breaks this
//! crate's token rules (a Go token generator may return anything) is kept as stored
//! ([`LeaseToken::from_store`]), so the holder is shown and
//! a forced release can break it.
//!
//! # Fenced values
//!
//! [`FencedValues`] stores small values (up to 64 KiB, checked before
//! sending) that only the newest fencing token may write: a new lease holder calls
//! `fence_and_read(name, its_token)` first, after which every older holder's
//! `put_fenced(name, old_token, ..)` is refused with
//! [`NotOwnedReason::Fenced`], learned from the `ALL_OLD`
//! item of the same request. Each operation is one conditional `UpdateItem` on the item keyed
//! like a lease (`pk` = partition, `sk` = sort key or the lock sort key) and touches only
//! `fenced_value` and `value_fence` (renamed with
//! [`with_fenced_value_attributes`](DynamoLeasesBuilder::with_fenced_value_attributes)).
//!
//! * Retries are safe: both writes are idempotent for the same `(token, value)`. A retry after a
//!   lost reply passes its condition (the fence equals its token) and writes the same again; a
//!   retried put whose `ALL_OLD` item shows our token and value is reported as stored.
//! * The TTL attribute is never written by fenced operations, so a checkpoint item is never
//!   deleted by TTL.
//! * Names share the table's key space with leases: put them in a partition of their own (for
//!   example `LeaseKey::with_sort_key("checkpoints", "shard-7")`). A name equal to a lease key
//!   shares the lease's item; each side keeps to its own attributes (an item holding only a
//!   fenced value is not a lease for `inspect` and listing), but the lease's TTL then deletes
//!   the value with the item one TTL buffer after the lease ends.
//!
//! # Delete
//!
//! [`LeaseBackend::delete`] removes a lease item with one
//! conditional `DeleteItem` naming the exact state the caller read, so an item that changed
//! since is never deleted; the `ALL_OLD` item of a refusal tells why (`NotOwned`, with
//! `Missing` or `TakenOver` as for release). A lease that shares its item with a fenced value
//! (a name equal to the lease's key) must not take the value with it: a stale writer would then
//! find no fence to refuse it. So the `DeleteItem` also requires that no `value_fence` exists;
//! when the refusal shows the named state and a fenced value, a second `UpdateItem`, conditioned
//! on the same state, removes only the lease attributes and the TTL, leaving an item that is not
//! a lease (absent from `inspect` and listing) and that TTL never deletes. Deleting the item
//! deletes its fencing counter: the next acquisition seeds a new one from its clock with no TTL
//! buffer waited out, so its tokens may fall below earlier ones (see *Fencing*). Delete only keys
//! that nobody acquires again.
//!
//! # Time
//!
//! DynamoDB has no server-side clock in conditions, so expiry is a **wall-clock** timestamp
//! written by the acquirer and compared by contenders against *their* wall clock. This is the
//! Go package's model, at millisecond instead of second granularity. It is safe if every host's
//! wall clock is within `max_clock_skew` of every other's:
//!
//! * contenders take over only once `expires_at + max_clock_skew <= now` (set
//!   [`with_max_clock_skew`](DynamoLeasesBuilder::with_max_clock_skew) to the bound your clock
//!   sync guarantees, e.g. 500 ms with NTP in one region; default 0, as in Go);
//! * holders stop trusting the lease at their **monotonic** deadline: the instant the request was
//!   sent plus the duration minus a safety margin ([`lease_core::backend::holder_deadline`]), which covers
//!   clock-rate drift during one lease;
//! * a clock that jumps forward by more than the skew allowance lets its host take over early;
//!   only fencing tokens protect the resource then.
//!
//! # Sharing a table with the Go package
//!
//! The Go `lease` package writes `lease_expires_at` in whole Unix seconds (`time.Time.Unix()`,
//! rounded down) and frees a key when `lease_expires_at <= now` in seconds. This crate writes
//! the same attribute in seconds **rounded up**, so Go never sees a lease of ours expire before
//! it does, and keeps its millisecond precision in `lease_expires_at_ms`, an attribute Go never
//! reads. Judged from either side:
//!
//! * a Go item (no `lease_expires_at_ms`, no counter) is held until the **end** of its whole
//!   second, one second longer than Go's own rule: Go rounds its expiry down, so its caller may
//!   still hold the lease during that second (`:cutoff_s` in the acquire condition is the
//!   contender's second minus one). Taking it over seeds a fencing counter from the clock (see
//!   *Fencing*);
//! * an item of ours is free for Go at the first whole second at or after its expiry, at most
//!   one second after it is free for us; a release sets `lease_expires_at` to 0, so Go takes the
//!   key at once (main before 0.2 removed the attribute, which blocked Go until TTL);
//! * Go's `Acquire` is a `PutItem`: it replaces the whole item, fencing counter included, and
//!   its `Release` deletes the item. Our next acquisition reseeds the counter from the clock,
//!   under the same condition as after a TTL deletion.
//!
//! Tokens name one tenure: handing a token this crate issued to a Go `Manager.Refresh` is not
//! supported (a Go refresh of our item would move `lease_expires_at` but not
//! `lease_expires_at_ms`, and our contenders could take over up to one second before Go's
//! rule would). `tests/go_interop.rs` sends Go's three requests and conditions verbatim
//! against items in every state.
//!
//! # Fencing
//!
//! The counter is incremented inside the acquiring write and never reset while the item exists
//! (release keeps the item). When the item is missing (deleted by TTL, or replaced by a Go
//! writer) it is seeded from the acquirer's wall clock in **microseconds since the epoch**. The
//! new token is above every earlier one under two assumptions: (1) the key saw fewer
//! acquisitions than microseconds passed since its counter was first seeded (DynamoDB
//! serialises writes to one item at well under one per microsecond), so the old counter is at
//! most the seeding clock's reading at the last write, `t_w + δ` in true time, where `δ` bounds
//! every writer's clock error; and (2) for a TTL deletion: the `ttl` attribute was written on
//! the **last writer's** clock, at least `t_w - δ + buffer`, and DynamoDB deletes no earlier
//! than that, so the new acquirer's clock reads at least `t_w - 2δ + buffer`. The new seed is
//! above the old counter when `buffer > 3δ`, which [`build`](DynamoLeasesBuilder::build)
//! checks against `max_clock_skew` (a buffer of at least one second, more than three times the
//! skew allowance; or zero, which writes no TTL). A Go writer replacing the item has no buffer
//! to wait out: the order holds only when the Go writer's tenure lasted longer than the
//! writers' clock disagreement, so give keys shared with Go a fenced resource that tolerates it,
//! or finish the migration before relying on fencing across both. A
//! [`delete`](lease_core::LeaseBackend::delete) removes the counter with no buffer to wait out,
//! so neither assumption covers the next acquisition: the order is not promised across a
//! delete. With TTL off, no Go writer and no delete, the counter is never reset at all.
//!
//! # IAM
//!
//! The least privilege for leases, listing and the table helpers (delete: see below):
//!
//! ```json
//! {
//!   "Version": "2012-10-17",
//!   "Statement": [
//!     {
//!       "Effect": "Allow",
//!       "Action": ["dynamodb:UpdateItem", "dynamodb:GetItem", "dynamodb:Query"],
//!       "Resource": "arn:aws:dynamodb:REGION:ACCOUNT:table/TABLE"
//!     },
//!     {
//!       "Sid": "OnlyForCreateTableAndEnableTtl",
//!       "Effect": "Allow",
//!       "Action": ["dynamodb:CreateTable", "dynamodb:DescribeTable", "dynamodb:UpdateTimeToLive"],
//!       "Resource": "arn:aws:dynamodb:REGION:ACCOUNT:table/TABLE"
//!     }
//!   ]
//! }
//! ```
//!
//! `GetItem` is needed only by `inspect`, `Query` only by listing; acquire, renew, release,
//! `put_fenced` and `fence_and_read` need `UpdateItem` alone. Delete needs `dynamodb:DeleteItem`
//! (add it to the first statement where records are deleted), and `UpdateItem` when a fenced
//! value shares the item. To confine a principal that only
//! keeps checkpoints to its partition, add the condition key `dynamodb:LeadingKeys` (for example
//! `"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["checkpoints"]}`).
//!
//! # Metrics
//!
//! With the feature `metrics`, every `try_acquire` and `renew` reports through the `metrics`
//! facade (lease-core's [`metrics`](lease_core::metrics) module has the names): acquisitions by
//! outcome, takeovers (an acquire whose reply shows the expired holder it replaced), renewals
//! with their latency and the time they had left, failed renewals, and this crate's retries:
//! requests sent again, throttled requests and lost replies reconciled, by operation. An acquire
//! reconciled after a lost reply counts no takeover: the reply that would tell was lost. Off, there is no dependency and nothing is recorded; the table of
//! every series is `docs/metrics.md` in the repository.
//!
//! # Benchmarks and stress
//!
//! Each operation's requests and capacity units are in *One request per operation* above: one request per
//! operation (a delete two when a fenced value shares the item, a listing one per page), counted
//! by the tests and by the `dynamo_lease` bench. The bench measures
//! each operation beside the raw SDK `UpdateItem` with the same update, condition, names and
//! values, after warming DynamoDB Local until its medians settle; `cargo xtask bench` writes the
//! figures, with the machine and its load, to [docs/benchmarks.md](https://github.com/lease-rs/lease/blob/main/docs/benchmarks.md).
//!
//! The stress test (32 contenders, 8 keys, 3,000 acquisitions; and 1,000 more with a lost reply
//! or a throttled write injected every 10 ms) found no overlapping holders and no fencing token
//! out of order.
//!
//! # Testing against DynamoDB Local
//!
//! The test suites read the endpoint from `LEASE_DYNAMO_ENDPOINT` ([`ENDPOINT_ENV`]); without
//! it they print `SKIPPED: ...` (or fail, when `LEASE_REQUIRE_DYNAMO=1`). `cargo xtask itest`
//! provides the endpoint, starting DynamoDB Local in Docker or from its jar; the crate has no
//! test-only feature.
#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: feature-gated items then show their feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// This backend's [`name`](lease_core::LeaseBackend::name), in errors, traces and metrics.
pub(crate) const BACKEND: &str = "dynamodb";

mod acquire;
mod client;
mod delete;
mod error;
mod expr;
mod fenced;
mod grace;
mod item;
mod leases;
mod names;
mod ops;
mod retry;
mod table;
mod tenure;

pub use client::client_for_endpoint;
pub use error::{DynamoError, DynamoErrorKind};
pub use leases::{DynamoLeases, DynamoLeasesBuilder};
pub use names::AttributeNames;
pub use retry::RetryPolicy;
