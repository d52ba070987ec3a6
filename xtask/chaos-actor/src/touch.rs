//! `touch`: the command `lease run` runs.

use std::time::Duration;

use crate::actor::Actor;
use crate::cli::{RunSurface, TouchArgs};
use crate::history::{Surface, mono_ns};

/// The variable `lease run` passes the fencing token in.
const FENCING_ENV: &str = "LEASE_FENCING_TOKEN";

/// Writes `acq` (its first instant as both sent and acquired: it does not see the call), then
/// a `claim` every `every_ms`, `ticks` times, and a `rel` when done (after its last claim;
/// `lease run` releases after the command exits). Its check is being alive: `lease run` kills
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
    };
    let history = &actor.history;
    history.acq(surface, &args.key, token, first, first, actor.wall_ms());
    let mut last = first;
    for _ in 0..args.ticks {
        if !actor.sleep(Duration::from_millis(args.every_ms)) {
            break;
        }
        last = mono_ns();
        history.claim(surface, &args.key, token, last);
    }
    history.rel(surface, &args.key, token, mono_ns().max(last));
    Ok(())
}
