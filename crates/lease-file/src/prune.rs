//! What [`DirectoryStore::prune`](crate::DirectoryStore::prune) did.

use lease_core::LeaseKey;

/// What [`DirectoryStore::prune`](crate::DirectoryStore::prune) removed, and why it kept the
/// other keys.
///
/// ```
/// use lease_file::DirectoryStore;
/// use std::time::Duration;
///
/// let dir = tempfile::tempdir()?;
/// let report = DirectoryStore::open(dir.path())?.prune(Duration::from_secs(3600))?;
/// assert!(report.removed.is_empty());
/// assert_eq!(report.kept(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PruneReport {
    /// The keys removed (their lock directories are gone), in the order the store directory
    /// listed them.
    pub removed: Vec<LeaseKey>,
    /// Keys kept because they are held (expired holders included: release or take them over
    /// first).
    pub held: usize,
    /// Free keys kept because their lock directory changed less than `idle_for` ago.
    pub recent: usize,
    /// Free keys kept because someone was acquiring, creating (or removing) them at that
    /// moment, or a creator that crashed left its temporary directory beside them.
    pub busy: usize,
    /// Free keys kept because their fencing generation is not below the store's clock in
    /// microseconds: re-created, their tokens would not continue above the old ones.
    pub ahead_of_clock: usize,
    /// Keys kept because they could not be read (damaged, foreign, or an I/O error).
    pub unreadable: usize,
    /// Keys ended (no holder can take them any more) whose directory is still in place, and
    /// so not in `removed`: a creation of the same key was under way (the next acquisition of
    /// the key, or the next prune, removes it), or the directory could not be removed (an entry
    /// that is not the lease's was put in it: see the key's error for what to remove by hand).
    pub left_in_place: usize,
}

impl PruneReport {
    /// How many keys were kept, for any reason ([`left_in_place`](Self::left_in_place)
    /// included: their directories are still there).
    pub fn kept(&self) -> usize {
        self.held
            + self.recent
            + self.busy
            + self.ahead_of_clock
            + self.unreadable
            + self.left_in_place
    }
}
