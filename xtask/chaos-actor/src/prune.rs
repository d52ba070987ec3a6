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
        .with_shared_directory(true)
        .build()
        .map_err(|e| format!("open {}: {e}", args.dir.display()))?;
    let mut removed = 0usize;
    while actor.sleep(Duration::from_millis(args.every_ms)) {
        match store.prune(Duration::ZERO) {
            Ok(report) => removed += report.removed.len(),
            Err(error) => eprintln!("prune {}: {error}", args.dir.display()),
        }
    }
    println!("pruned {removed} keys");
    Ok(())
}
