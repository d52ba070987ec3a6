//! `prune`: keeps a shared store's keys coming and going.

use std::time::Duration;

use lease_file::DirectoryStore;

use crate::actor::Actor;
use crate::cli::PruneArgs;

/// Prunes every free key of the store at `args.dir` every `args.every_ms` until the run stops.
/// A failed prune (the attacker at work, a fault) is printed and tried again next time.
///
/// # Errors
/// The store cannot be opened at all.
pub(crate) fn run(args: &PruneArgs, actor: &Actor) -> Result<(), String> {
    let store = DirectoryStore::builder(&args.dir)
        .with_shared_directory()
        .build()
        .map_err(|e| format!("open {}: {e}", args.dir.display()))?;
    // Removed, held, busy (a creation under way), ahead of the clock, left in place, failed.
    let mut totals = [0usize; 6];
    while actor.sleep(Duration::from_millis(args.every_ms)) {
        match store.prune(Duration::ZERO) {
            Ok(report) => {
                for (total, n) in totals.iter_mut().zip([
                    report.removed.len(),
                    report.held,
                    report.busy,
                    report.ahead_of_clock,
                    report.left_in_place,
                    0,
                ]) {
                    *total += n;
                }
            }
            Err(error) => {
                totals[5] += 1;
                eprintln!("prune {}: {error}", args.dir.display());
            }
        }
    }
    let [removed, held, busy, ahead, left, failed] = totals;
    println!(
        "pruned {removed} keys (kept: {held} held, {busy} busy, {ahead} ahead of the clock, \
         {left} left in place; {failed} prunes failed)"
    );
    Ok(())
}
