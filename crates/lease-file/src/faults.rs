//! Named fault points before every state rename (and the removal of an ended directory) (feature `failpoints`, tests only).
//!
//! | fault point | the rename it precedes |
//! |---|---|
//! | `lease-file/before-acquire` | `free.<g>` to `held.<g+1>...` |
//! | `lease-file/before-takeover` | `held.<g>...` to `held.<g+1>...` |
//! | `lease-file/before-renew` | `held.<g>.<n>...` to `held.<g>.<n+1>...` (heartbeats too) |
//! | `lease-file/before-release` | `held.<g>...` to `free.<g>` |
//! | `lease-file/before-fence` | a fenced value's entry to a higher fence, same data |
//! | `lease-file/before-put` | a fenced value's entry to a new data file |
//! | `lease-file/before-end` | `free.<g>` or `held.<g>...` to `dead.<g>` (a delete or prune) |
//! | `lease-file/before-open-temp` | not a rename: the `openat` of a new lock directory's temporary, just made by `mkdirat` |
//! | `lease-file/before-create` | the rename that puts a new lock directory in place (its first generation already read) |
//! | `lease-file/before-rmdir` | the `rmdir` that removes an ended lock directory |
//! | `lease-file/before-describe` | not a rename: a new holder's description (owner, value), written just after the rename that made it the holder |
//!
//! Configure them with the `fail` crate: `FAILPOINTS='lease-file/before-takeover=1*sleep(5000)'`
//! in a process that called `fail::FailScenario::setup()`, or `fail::cfg` in-process.

/// Runs the fault point before a new holder's description is written.
pub(crate) fn before_describe() {
    fail::fail_point!("lease-file/before-describe");
}

/// Runs the fault point for the rename `from` to `to`.
pub(crate) fn pause_at(from: &str, to: &str) {
    let same_generation = |a: &str, b: &str| a.split('.').nth(1) == b.split('.').nth(1);
    let same_data = |a: &str, b: &str| a.rsplit('.').next() == b.rsplit('.').next();
    match (from.split('.').next(), to.split('.').next()) {
        (_, Some("dead")) => fail::fail_point!("lease-file/before-end"),
        (Some("free"), _) => fail::fail_point!("lease-file/before-acquire"),
        (Some("held"), Some("free")) => fail::fail_point!("lease-file/before-release"),
        (Some("held"), _) if same_generation(from, to) => {
            fail::fail_point!("lease-file/before-renew")
        }
        (Some("held"), _) => fail::fail_point!("lease-file/before-takeover"),
        (Some("value"), _) if same_data(from, to) => fail::fail_point!("lease-file/before-fence"),
        (Some("value"), _) => fail::fail_point!("lease-file/before-put"),
        _ => {}
    }
}
