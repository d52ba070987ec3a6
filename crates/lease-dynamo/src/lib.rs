//! Leases on DynamoDB conditional writes: one round trip per operation, fencing tokens that
//! survive release and TTL, holders learned from the failed write itself, and lost replies
//! reconciled instead of dropping a lease that is still held.
//!
//! ```no_run
//! use lease_dynamo::DynamoLeases;
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), lease_core::LeaseError> {
//! // The default AWS chain; `Some("http://127.0.0.1:8000")` for DynamoDB Local.
//! let client = lease_dynamo::sdk_client(None, None).await;
//! let leases = DynamoLeases::new(client, "leases")?;
//! leases.ensure_table().await?; // once: on-demand table with TTL
//!
//! match leases.acquire("regenerate-sitemap", Duration::from_secs(30)).await {
//!     Ok(lease) => {
//!         // Pass lease.fencing_token() with every write to the protected resource.
//!         let lease = leases.refresh(&lease, Duration::from_secs(30)).await?;
//!         leases.release(&lease).await?;
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
//! [`lease_core::LeaseGuard`] keeps its leases alive and everything in `lease-core` works on it.
//! It offers everything the Go `lease` package does ([`acquire`](DynamoLeases::acquire),
//! [`acquire_key`](DynamoLeases::acquire_key), [`refresh`](DynamoLeases::refresh),
//! [`release`](DynamoLeases::release), the same options and defaults; errors branch with
//! [`LeaseError::is_held`](lease_core::LeaseError::is_held) and
//! [`is_not_owned`](lease_core::LeaseError::is_not_owned)). The trait methods of the same names
//! take a [`LeaseKey`](lease_core::LeaseKey); call them as `LeaseBackend::release(&leases, ..)`
//! when the inherent Go-style method is in the way.
//!
//! # Item layout
//!
//! One item per lease, key `(pk, sk)`; a key without a sort key is stored under `sk = "LOCK"`
//! (so `LeaseKey::new("a")` and `LeaseKey::with_sort_key("a", "LOCK")` are the same lease).
//!
//! | attribute (default name) | type | meaning |
//! |---|---|---|
//! | `pk`, `sk` | S | the key |
//! | `lease_token` | S | the holder's owner token; absent when released |
//! | `lease_expires_at` | N | expiry, epoch **milliseconds**, by the acquirer's wall clock |
//! | `lease_acquired_at` | N | acquisition time, epoch milliseconds |
//! | `lease_owner` | S | optional human description of the holder |
//! | `lease_fence` | N | fencing counter: incremented by every acquisition, kept by release |
//! | `ttl` | N | epoch **seconds**: expiry + TTL buffer (1 h), or release time + buffer |
//! | `fenced_value` | B | a [`FencedValues`](lease_core::FencedValues) value (up to 64 KiB) |
//! | `value_fence` | N | the highest fencing token that wrote or read `fenced_value` |
//!
//! # One request per operation
//!
//! | operation | request | condition | cost |
//! |---|---|---|---|
//! | acquire, takeover included | `UpdateItem` `SET token, expires, acquired, owner, ttl, fence = if_not_exists(fence, :seed) + 1`, `ReturnValues=ALL_NEW` | `attribute_not_exists(#token) OR #expires <= :now - max_clock_skew` | 1 request, 1 WCU |
//! | renew | `UpdateItem` `SET expires, ttl` | `#token = :token AND #expires > :now` | 1 request, 1 WCU |
//! | release | `UpdateItem` `REMOVE token, expires, owner, acquired SET ttl` | `#token = :token` | 1 request, 1 WCU |
//! | inspect | `GetItem`, strongly consistent | | 1 request, 1 RCU |
//! | list a partition | `Query` on `pk`, strongly consistent | | 1 request per 1 MB page, 1 RCU per 4 KB |
//! | put_fenced | `UpdateItem` `SET #val = :v, #vfence = :t` | `attribute_not_exists(#vfence) OR #vfence <= :t` | 1 request, 1 WCU per KB of the item |
//! | fence_and_read | `UpdateItem` `SET #vfence = :t`, `ReturnValues=ALL_NEW` | the same | 1 request, 1 WCU per KB of the item |
//!
//! Write units are for items up to 1 KB (a lease item is about 200 bytes plus key and owner
//! lengths); a write whose condition fails still consumes its write units. A fenced value makes
//! its item bigger: every write to it, `fence_and_read` included, consumes 1 WCU per KB of the
//! larger of the item's sizes before and after (about 60 WCU for a 60 KiB checkpoint). Every conditional
//! write sets `ReturnValuesOnConditionCheckFailure=ALL_OLD`, which costs no extra request: a
//! refused acquire reports the holder (owner, expiry, fencing token) from the reply itself.
//!
//! # Transient failures and lost replies
//!
//! The SDK's own retries are turned off for the client the manager keeps; the manager retries
//! throttling (`ProvisionedThroughputExceededException`, `ThrottlingException`,
//! `RequestLimitExceeded`), `InternalServerError`/5xx, timeouts and transport failures itself,
//! with full-jitter exponential backoff ([`RetryPolicy`]), never past the time the lease could
//! still be trusted. Missing tables, validation and access errors are permanent and come back at
//! once as [`LeaseError::Backend`](lease_core::LeaseError::Backend) naming the table. A failed
//! condition is an answer, never retried.
//!
//! A retry sends the *same* request (same token and timestamps). If an earlier attempt was
//! applied but its reply lost, the retry fails its condition and the `ALL_OLD` item tells what
//! happened:
//!
//! * acquire: the item holds **our token**: we hold the lease (with the fencing token and expiry
//!   in the item). This also recognises a caller retrying with
//!   [`AcquireOptions::with_token`](lease_core::AcquireOptions::with_token).
//! * renew: our token and an expiry **at or after the one we wrote**: renewed.
//! * release (after an attempt whose outcome is unknown): **no holder**, and the fencing counter
//!   still equal to our lease's (when the caller passed the lease, as
//!   [`DynamoLeases::release`] does; the trait's `release(key, token)` has no fencing token and
//!   accepts any free item).
//!
//! # Fenced values
//!
//! [`FencedValues`](lease_core::FencedValues) stores small values (up to 64 KiB, checked before
//! sending) that only the newest fencing token may write: a new lease holder calls
//! `fence_and_read(name, its_token)` first, after which every older holder's
//! `put_fenced(name, old_token, ..)` is refused with
//! [`NotOwnedReason::Fenced`](lease_core::NotOwnedReason::Fenced), learned from the `ALL_OLD`
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
//!   sent plus the duration minus a safety margin ([`lease_core::holder_deadline`]), which covers
//!   clock-rate drift during one lease;
//! * a clock that jumps forward by more than the skew allowance lets its host take over early;
//!   only fencing tokens protect the resource then.
//!
//! # Fencing
//!
//! The counter is incremented inside the acquiring write and never reset while the item exists
//! (release keeps the item). When the item is missing it is seeded from the acquirer's wall
//! clock in **microseconds since the epoch**, so tokens keep growing even after TTL deleted an
//! expired item, under two conditions: (1) the deleted counter was below the new seed — true when
//! the key saw fewer acquisitions than microseconds elapsed since it was first seeded (DynamoDB
//! serialises writes to one item at well under one per microsecond), and (2) the new acquirer's
//! clock is behind the clock that seeded the old item by less than the TTL buffer (default 1 h),
//! since TTL deletes an item no earlier than one buffer after its last expiry or release. With
//! TTL off, or items deleted only by this crate (never), the counter is never reset at all.
//!
//! # IAM
//!
//! The least privilege for leases, listing and the table helpers:
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
//! `put_fenced` and `fence_and_read` need `UpdateItem` alone. To confine a principal that only
//! keeps checkpoints to its partition, add the condition key `dynamodb:LeadingKeys` (for example
//! `"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["checkpoints"]}`).
//!
//! # Measured
//!
//! On DynamoDB Local over loopback (`cargo xtask bench`, 400 iterations, release build), every
//! operation sent exactly 1 request, and its median latency was within 3–5 % of the raw SDK
//! `UpdateItem` carrying the same update and condition (about 0.45–0.5 ms each): the cost of
//! validation, tokens, spans and decoding is noise next to one round trip. The stress test (32
//! contenders, 8 keys, 3,000 acquisitions; and 1,000 more with a lost reply or a throttled write
//! injected every 10 ms) found no overlapping holders and no fencing token out of order.
//!
//! # Testing against DynamoDB Local
//!
//! The test suites read the endpoint from `LEASE_DYNAMO_ENDPOINT` ([`ENDPOINT_ENV`]); without
//! it, with the `testcontainers` feature and a Docker daemon, they start `amazon/dynamodb-local`;
//! otherwise they print `SKIPPED: ...` (or fail, when `LEASE_REQUIRE_DYNAMO=1`). `cargo xtask
//! itest` provides the endpoint.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod client;
mod error;
mod fenced;
mod item;
mod leases;
mod names;
mod ops;
mod retry;
mod table;

pub use client::{ENDPOINT_ENV, sdk_client, sdk_client_from_env};
pub use error::DynamoError;
pub use leases::{
    DEFAULT_LOCK_SORT_KEY, DEFAULT_TTL_BUFFER, DynamoLeases, DynamoLeasesBuilder, MAX_OWNER_BYTES,
    MAX_PARTITION_KEY_BYTES, MAX_SORT_KEY_BYTES,
};
pub use names::AttributeNames;
pub use retry::RetryPolicy;
