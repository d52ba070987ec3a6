//! `touch`: the command `lease run` runs.

use std::time::Duration;

use crate::actor::Actor;
use crate::cli::{RunSurface, TouchArgs};
use crate::history::{Surface, mono_ns};

/// The variable `lease run` passes the fencing token in.
const FENCING_ENV: &str = "LEASE_FENCING_TOKEN";
/// The variable `lease run` passes the slot in (`--holders`): slot `i >= 1` of `<NSKEY>` is
/// logged as the key `<NSKEY>#slot-<i>`, slot 0 as `<NSKEY>` itself, as lease-core names them.
const SLOT_ENV: &str = "LEASE_SLOT";

/// Writes `acq` (its first instant as both sent and acquired: it does not see the call), then
/// a `claim` every `every_ms`, `ticks` times, and a `rel` when done (after its last claim;
/// `lease run` releases after the command exits). Under `lease run --holders`, the key is the
/// slot's. Its check is being alive: `lease run` kills
/// the command by the holder's deadline, so an instant at which it runs is inside the tenure.
///
/// # Errors
/// No usable fencing token in the environment.
pub(crate) fn run(args: &TouchArgs, actor: &Actor) -> Result<(), String> {
    let first = mono_ns();
    let token: u64 = std::env::var(FENCING_ENV)
        .map_err(|_| format!("${FENCING_ENV} is not set: run me under `lease run`"))?
        .parse()
        .map_err(|_| format!("${FENCING_ENV} is not a number"))?;
    let surface = match args.surface {
        RunSurface::RunFile => Surface::RunFile,
        RunSurface::RunDynamo => Surface::RunDynamo,
        RunSurface::RunPostgres => Surface::RunPostgres,
        RunSurface::RunRedis => Surface::RunRedis,
    };
    let key = match std::env::var(SLOT_ENV)
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
    {
        Some(slot) if slot > 0 => format!("{}#slot-{slot}", args.key),
        _ => args.key.clone(),
    };
    let history = &actor.history;
    history.acq(surface, &key, token, first, first, actor.wall_ms());
    let mut last = first;
    for _ in 0..args.ticks {
        if !actor.sleep(Duration::from_millis(args.every_ms)) {
            break;
        }
        last = mono_ns();
        history.claim(surface, &key, token, last);
    }
    history.rel(surface, &key, token, mono_ns().max(last));
    Ok(())
}
