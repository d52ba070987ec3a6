//! How the locks work and what they guarantee: the protocol both faces run ([`FileLock`] and
//! [`DirectoryStore`], one code path), why it is safe whatever the pauses, its modes, the
//! other lock protocols it meets on a path, forks, shared directories, pruning and what each
//! operation costs. Nothing here is needed to use the crate; it is what to read before trusting
//! it.
//!
//! # The protocol
//!
//! A lock is a **directory** `P` (a `FileLock`'s path, or a store key's entry in the store's
//! directory) holding exactly one **state entry** whose *name* is the whole lease state:
//!
//! * `free.<g>`: released, or never acquired (`free.0`); `g` is the last fencing generation.
//! * `held.<g>.<n>.<token>.<kernel>.<scale>.<deadline>.<duration>`: held by the tenure with
//!   fencing generation `g`, renewed `n` times; `token` is a hash of the holder's token;
//!   `kernel` identifies the directory (device and inode) whose kernel lock the holder holds,
//!   or `n`; `scale` names the holder's monotonic clock (this boot and time namespace of this
//!   host, or a test clock) and `deadline` is when the lease ends on it; `duration` is the
//!   length granted.
//!
//! **Every change of state is one `rename(2)` from the exact name observed to the next**:
//! acquire `free.<g>` → `held.<g+1>.0...`, takeover `held.<g>...` → `held.<g+1>.0...`, renew and
//! heartbeat `held.<g>.<n>...` → `held.<g>.<n+1>...`, release `held.<g>...` → `free.<g>`. The
//! holder's description (pid, host, label, times, owner token) is written into the entry right
//! after, for display. `P` is created atomically: a private temporary directory already holding
//! `free.0` is renamed into place (a rename never replaces a non-empty directory).
//!
//! ## Why a generation can never be issued twice, whatever the pauses
//!
//! 1. There is exactly one state entry: the directory is created with one, and a rename moves it
//!    without adding one.
//! 2. Names never repeat: the generation only grows, within a generation the renewal counter only
//!    grows, and `free.<g>` is made only from `held.<g>...`, which is made only once.
//! 3. So `rename(observed, next)` succeeds iff the state is still exactly `observed`: if it
//!    changed, the source name is gone (`ENOENT`) and nothing happens. It is a compare-and-swap,
//!    carried out by the kernel (or the NFS server) in one step.
//! 4. Generation `g+1` is issued only by a rename whose source carries generation `g`, and only
//!    one rename can consume that source. A process paused *anywhere*, for *any* length of time,
//!    that resumes and renames an old name fails: there is no read-decide-write sequence to
//!    replay. Generations are therefore issued once each, in increasing order. No timing
//!    assumption is involved; `tests/model_check.rs` explores every interleaving of three
//!    processes with pauses and crashes at every step and finds no violation (and finds the old
//!    protocol's duplicate).
//!
//! **On Windows** point 3 does not hold of the rename alone: `MoveFileExW` opens its source by
//! name, then renames the file through the handle, so two renames of one observed name can both
//! succeed, the second moving the file on from the first one's new name. Every writer there
//! takes a `LockFileEx` lock on the lock directory's `cas` file around the rename (and checks
//! that the observed name is still there), which makes the rename one step again for every
//! other writer. `tests/model_check.rs` models that two-step rename: without the lock it finds a
//! generation issued twice in six steps; under the lock, none (see the
//! [platforms](crate::platforms) page, *Windows*).
//!
//! Fenced values use the same construction: one chain entry `value.<fence>.<n>.<nonce>` naming a
//! data file `data.<nonce>` that was written in full, with `O_EXCL`, *before* the rename that
//! publishes it. A writer whose fence is below the current one is refused; a paused writer's
//! rename from an old entry fails. So no value is ever replaced by an older writer's, in either
//! mode. [`FencedValues::fence_and_read`] opens the
//! data file before the rename that raises the fence, so it returns the value that was current
//! when the fence went up even if a newer writer replaces it right after.
//!
//! ## Why two holders never both trust a lease
//!
//! A takeover needs the holder's lease to have ended, judged one of three ways, from the name
//! the takeover's rename will consume:
//!
//! * **Same clock** (the holder's `scale` is ours: same host, same boot, same time namespace, or
//!   the same test clock): the holder's `deadline` has passed on the shared monotonic clock. The
//!   holder trusts its lease only until `start + duration - margin` on the same clock, where
//!   `start` was read *before* the rename that made the name, and `deadline = start + duration`.
//! * **Another clock** (another host over NFS): the name has stood unchanged for its `duration`
//!   on *our* monotonic clock since we first saw it. We first saw it after the holder's `start`,
//!   so with clocks running at the same rate the holder's trust (`duration - margin` from
//!   `start`) has ended by then. *Assumption:* monotonic clock rates differ by less than
//!   `margin / duration` (10 % by default); wall clocks are never compared.
//! * **Death** (kernel mode): the holder took the kernel lock (`flock`) on the directory
//!   *before* its rename and holds it for its tenure; the state names that directory's device and
//!   inode. A contender that takes the lock on that very directory, on the same host (same
//!   scale), knows every process holding it has exited. The kernel lock speaks for nothing else:
//!   never across hosts or mounts (device and inode differ), never for a holder that did not take
//!   it (`n`).
//!
//! If the holder renewed meanwhile, the name changed and the takeover's rename fails. A process
//! paused between judging and renaming only renames later, which keeps the judgement true.
//!
//! ## Modes
//!
//! [`LockMode::Kernel`] (local file systems) adds the kernel lock: a crashed holder's lease is
//! free at once, and waiters block in `flock` and are woken by the kernel. Where `flock` does not
//! work or is not trusted (NFS, SMB/CIFS, FUSE, 9p, AFS, detected with `statfs`, or `flock`
//! failing), [`LockMode::HeartbeatOnly`] runs the same protocol without it: a crashed holder's
//! lease ends after its duration. Safety never rests on the kernel lock, so processes in
//! different modes on one path (an NFS client and a process on the server) exclude each other
//! correctly; they only lose the fast path. [`ModePreference::Kernel`] turns the fallback into an
//! error instead.
//!
//! ## Other lock protocols on the same path
//!
//! * **Go `kit/lockfile` `PIDLock`** keeps its lock as a *file* at the path. While it is there,
//!   this crate reports the lock [`LeaseError::Held`] by it (pid and owner named) and never
//!   takes it over or deletes it; once the Go process releases (removes the file), this crate
//!   creates its directory. Go's `Acquire` cannot read a directory as a record and fails with an
//!   error while this crate's directory exists. The two never both hold the path. How Go's
//!   names map to this crate's: [`FileLock`], [*Coming from Go*](crate::FileLock#coming-from-gos-kitlockfile).
//! * **lease-file 0.1** records (a file at the path, `.lock` and `.owner` companions) are refused
//!   as [`LeaseError::Foreign`]: stop the old processes, then remove them.
//!
//! # Guarantees and limits
//!
//! * No two holders (`FileLock`s or store leases, in any processes on the host, or across hosts
//!   sharing an NFS directory) trust one lease at once, under the clock-rate assumption above,
//!   whatever the pauses. A holder paused past its deadline learns it on its first
//!   [`FileLockGuard::check`] / [`LeaseGuard::check`] after resuming;
//!   only fencing protects the resource from a paused holder's in-flight writes.
//! * Fencing generations are issued once each, increasing, in both modes, assuming nothing about
//!   time.
//! * Transient I/O errors are tolerated until the tenure's deadline, then reported as
//!   [`LossReason::BackendFailing`] carrying the last error (and a paused holder's check as
//!   [`LossReason::DeadlinePassed`]).
//! * Symlinks are never followed, and no path is trusted twice: the store's directory (a
//!   `FileLock`'s parent) is opened once, and every lock directory is created, opened, checked
//!   and renamed relative to that descriptor; the lock directory is opened with
//!   `O_DIRECTORY|O_NOFOLLOW` and every operation goes through its descriptor (so the state
//!   read, the kernel lock and the rename are all in one directory even if the path is
//!   replaced; a holder whose directory was moved or replaced loses its tenure at the next
//!   heartbeat). See [*Shared directories and other users*](#shared-directories-and-other-users).
//! * Planted files of any name, size or number give a typed error or are ignored, never a panic
//!   or a spin: only canonical state names count (`free.007` is not one), two state entries or a
//!   missing one are [`LeaseError::Corrupt`] (never guessed or repaired), a directory with more
//!   than 4096 entries is refused.
//! * Created files and directories get the configured mode less the umask, never writable by
//!   group or others, and a lease's state entry (whose description holds the owner token) is
//!   readable by its owner only; in a directory explicitly shared they get exactly the
//!   configured mode. Temporary names carry a random nonce and nothing is ever deleted by
//!   prefix.
//! * A lock name longer than 255 bytes (the file system's limit) is
//!   [`LeaseError::InvalidInput`] naming the limit, refused before anything is created.
//! * No option value panics: out-of-range options are [`LeaseError::InvalidInput`] naming
//!   the option, and so is a [`DirectoryStore`] safety margin that leaves nothing of a lease to
//!   trust.
//! * Deleting a lock directory by hand (or by a `/tmp` cleaner, after it sat idle long enough)
//!   restarts its fencing generation at 1 (or at the clock, in a store that pruned), and
//!   deleting it *while held* lets a contender in at once while the holder trusts its lease
//!   until its next heartbeat notices (at most its deadline): keep locks out of directories
//!   that are cleaned, and remove a store's keys with [`DirectoryStore::prune`] instead.
//! * A value published with an acquisition ([`AcquireOptions::with_value`], for leader
//!   election) lives in the holder's description, written right after the rename that made it
//!   the holder (an optional `value` field older readers ignore): a reader sees either this
//!   tenure's value or "a holder still writing its description", never another tenure's.
//! * Observers of a key ([`LeaseBackend::watch_record`],
//!   used by [`Observer`]) are woken by inotify on the key's lock directory, on Linux:
//!   one inotify instance and one blocked thread per watch, one wake-up per change (a
//!   heartbeat's rename included); elsewhere, or out of inotify instances, they poll.
//!
//! # Deleting and pruning keys
//!
//! Every key of a [`DirectoryStore`] (and every [`FileLock`] path) costs a lock directory and
//! its state entry. A held key's entry holds its holder's description (at most 1,024 bytes,
//! one block); a released one's holds nothing: a holder whose tenure lasted 10 ms or more
//! truncates it before the rename that releases (one `ftruncate`, see [`FileLock`]'s costs),
//! since only a held state's description is ever read. So an idle key costs **2 inodes and
//! the directory's one block**:
//!
//! | file system | per idle key: apparent size (`du --apparent-size`) | blocks (`du`) | inodes |
//! |---|---:|---:|---:|
//! | ext4, 4 KiB blocks | 4,096 bytes (was 5,120) | 4,096 bytes (was 8,192) | 2 |
//! | tmpfs | 60 bytes (was 1,084) | 0 (was 4,096) | 2 |
//!
//! (300 keys, each run by `lease run --file DIR --key job-N -- sleep 0.02`, less the store
//! directory itself; a `lease run` whose command returns at once may release within 10 ms;
//! "was": before released entries were emptied, when each kept a description padded to 1,024
//! bytes.) `tests/idle_cost.rs` holds every such released key to an empty entry and at most
//! 4,096 bytes. The directory and its entry are the protocol's floor (the state is the name of
//! an entry in a directory of its own). Two kinds of key keep their last description (one
//! block more, 8 KiB on ext4) until they are next acquired and released, or pruned: a key
//! released within 10 ms of its acquisition or renewal (a hot key, likely taken again at once:
//! the truncation and the next description's fresh block would be a large share of such a
//! cycle, to free a block needed again), and a key whose last holder crashed or lost its
//! tenure by expiry (its successor's description must not be erased: only a holder that still
//! provably holds truncates). `tests/prune.rs` counts a store of keys released at once (2,000
//! keys: 16,384,000 bytes and 4,000 inodes on ext4; with `LEASE_LONG=1`, 100,000 keys).
//! [`DirectoryStore::prune`] (and `lease prune --file DIR --idle D`) removes free keys idle for
//! a given time, and the store implements lease-core's [`LeaseBackend::delete`]; a pruned key
//! costs nothing, and a store pruned of every key holds one empty marker file (one inode, no
//! blocks). The store directory itself keeps the size its largest listing grew it to, as every
//! ext4 directory does (4,096,000 bytes after 100,000 keys); recreate the directory while no
//! process uses it to shrink that too.
//!
//! A key ends by one more compare-and-swap rename, `free.<g>` (or a deleting holder's
//! `held.<g>...`) to `dead.<g>`, after which no rename in that directory can make a holder; the
//! empty directory is then removed with `rmdir`, which only ever removes an empty directory.
//! So a key being acquired or held is never removed, and an acquirer racing a prune either
//! wins first (the prune's rename fails and the key stays) or finds its own rename fails and
//! creates the key afresh: never a holder in a removed directory beside one in a new one. See
//! [*Delete and prune*](crate::DirectoryStore#delete-and-prune).
//!
//! **What pruning does to fencing.** A store that never deleted a key starts each key at
//! token 1. The first delete or prune creates the marker `.fencing-from-clock` in the store
//! directory; from then on a re-created key starts from the store's wall clock in
//! microseconds since the epoch (as lease-dynamo seeds a missing counter), so its tokens
//! continue above the ones issued before the prune, assuming (1) fewer acquisitions of the key
//! than microseconds elapsed since its directory was created and (2) the wall clock did not
//! step back below the key's last token between the prune and the re-creation. A prune keeps a
//! key whose token is not below its clock. A creation under way when the key ended keeps the
//! ended directory in place until it is over, so a creator paused for any time cannot publish
//! a first generation it read before the prune. `docs/correctness.md` states the assumption;
//! `tests/prune.rs` tests it with a stepped-back clock, and `tests/fault_points.rs` pauses a
//! prune and its racing acquirers at each step.
//!
//! # Forks
//!
//! A process that holds a lease and calls `fork` gives its child a copy of everything: the
//! [`FileLockGuard`] or the [`DirectoryStore`] and its [`Lease`], their descriptors, and with them
//! the kernel lock, which lives on the open file description that parent and child now share
//! (`flock(LOCK_UN)` or the last close of it in *either* process would free it). A shared
//! description also makes `flock` meaningless between the two: `flock` on a description that
//! already holds the lock succeeds, so parent and child would each "take" the lock the other
//! holds, and each would read the other's tenure as its dead holder's. So the rule, at the
//! mechanism rather than per call:
//!
//! * **No descriptor opened by another process ever decides holding or liveness.** Every
//!   open lock directory records the process that opened it. Its kernel lock is taken, trusted
//!   ("this handle holds it", "the holder is dead") and let go only in that process; in any
//!   other, `flock` through it is refused before it is made, and the handle holds nothing.
//!   Every cache of open lock directories (the directories a [`FileLock`] and a
//!   [`DirectoryStore`] keep open between tenures, their threads blocked in `flock` for
//!   waiters, the descriptor [`DirectoryStore::kernel_lock_descriptor`] shares) checks the
//!   opener first and, in a child, drops the inherited copy (closing only the child's
//!   descriptor, so the parent keeps its lock) and opens the path afresh, as any other process
//!   would. A fresh descriptor has a description of its own, and `flock` on it excludes the
//!   parent as it excludes anyone. This costs one `getpid` per use of a cached directory: the
//!   crate holds no `unsafe` code, so it cannot register a `pthread_atfork` handler, and a
//!   pid read once and cached would be the parent's in the child.
//! * **A lease is ended or changed only by the process that acquired it.** A store records
//!   the acquiring process with each lease it grants, and a guard with its tenure. From any
//!   other process, a release ([`FileLockGuard::release`], [`LeaseBackend::release`]), a
//!   renewal ([`LeaseBackend::renew`]) or a delete ([`LeaseBackend::delete`]) of that lease
//!   through the inherited store or guard is refused with [`LeaseError::Unsupported`],
//!   renaming and unlocking nothing, even with the lease's own owner and fencing tokens.
//! * Dropping the copy, returning from `main`, unwinding or exiting with it does nothing: a
//!   guard releases on drop only in the process that acquired it, and the child only forgets
//!   the kernel lock (the parent's copy keeps it). Conversely, while the child keeps its copy
//!   of a held lease's descriptor, the kernel lock outlives the parent: a parent that crashes
//!   then loses its lease by expiry, not at once (later, never earlier).
//! * The child may read: [`FileLockGuard::fencing_token`], and the store's `inspect` and
//!   listings. Its copy of a guard is never trusted: [`FileLockGuard::check`] and a lease-core
//!   guard's `check` fail at once with [`LossReason::DeadlinePassed`] and its `lost()` completes
//!   at once (the heartbeats and renewals are the parent's, and threads do not survive `fork`),
//!   and a lease-core guard's `release` is refused whatever the store. To act for the parent,
//!   pass the fencing token with the child's writes and let the resource's fencing decide. The
//!   child may acquire leases through the inherited store or lock, its parent's keys included;
//!   they are its own, on descriptors it opened, kept by a heartbeat thread, a keeper and a
//!   timer thread of its own (the parent's do not exist in the child), and exclude the parent
//!   (and the parent them) as another process's would. No call on an inherited copy waits for a
//!   lock a thread of the parent held at the fork (it would stay locked in the child forever):
//!   such a call fails instead, saying to open a new `FileLock` in the child.
//! * To hand a lease to a child, let the child acquire its own, or pass the fencing token for
//!   it to check against the parent; a release with the lease's token through a store the child
//!   opens itself is a deliberate hand-off and is not refused.
//!
//! *Assumption:* a process's id does not change while it runs, and a child never has its
//! parent's id (both hold while the parent lives, which is all that matters: a handle is only
//! ever compared with the process that holds it). Processes that share a descriptor without a
//! `fork` (passed over a Unix socket, or inherited across an `exec` with close-on-exec cleared,
//! as `lease run` does for its guard process on purpose) are outside the rule.
//!
//! Every descriptor the crate opens is close-on-exec, so a program a child `exec`s inherits
//! nothing (`lease run` passes its lock to its guard process on purpose: see the CLI).
//! `tests/fork.rs` of the unpublished `lease-forktest` crate forks for real, in both modes and
//! both faces: a child's drop, exit, unwind, release, renewal and delete of its parent's lease,
//! and parent and child both acquiring a key whose directory was kept open across the fork.
//!
//! # Shared directories and other users
//!
//! Lock directories live where users meet (`/tmp`, `/var/lock`, a CI workspace). Whatever other
//! users do to the store concurrently (rename, replace or remove its entries, plant symbolic
//! links, FIFOs or files of any name), **this crate never creates, changes the mode of,
//! truncates, writes, renames or deletes anything outside the store's own entries**:
//!
//! * The store's directory (a `FileLock`'s parent) is opened once, `O_DIRECTORY|O_NOFOLLOW`;
//!   missing components are created one by one with `mkdirat` relative to their opened parent.
//!   Every later operation is relative to a descriptor: `mkdirat`, `openat` with
//!   `O_NOFOLLOW` (and `O_CREAT|O_EXCL` for every create), `renameat`, `unlinkat`, `fstat`,
//!   `fchmod`. No `chmod`, `open` or `rename` ever takes a path another user could swap.
//! * **Only what this process made is written, truncated or `chmod`ed, checked by identity,
//!   not by owner.** A file of the caller's that another user moved into a directory they can
//!   write (a root-owned file, under root) is owned by the caller and has one link, so
//!   ownership proves nothing. A new lock directory is built in a private temporary directory:
//!   `mkdirat`, then opened with `O_NOFOLLOW` and checked by `fstat` on the descriptor to be
//!   this user's *and born (`statx` birth time) no earlier than the kernel's coarse clock read
//!   before the `mkdirat`*: another user can only swap in a directory that existed before (they
//!   cannot make one that is the caller's), and one that is older is refused (not `fchmod`ed,
//!   not used, not removed). Where no birth time is recorded (NFS) it is never `fchmod`ed. Its
//!   first entry is created inside it exclusively, its device and inode read from the
//!   descriptor, then the directory is renamed into place. A description is written (and
//!   truncated, only after the check) only into a regular file with no other name that is
//!   either that very entry (same device and inode) or the caller's in a lock directory only
//!   the caller can write (its own, writable by neither group nor others: every entry in it was
//!   put there by the caller). A file planted in a lock directory someone else can write is
//!   renamed like any state entry, never written.
//! * **Ownership, like OpenSSH's `StrictModes`.** A store directory, a `FileLock`'s parent or
//!   a lock directory that a user other than the caller and root can change (owned by another
//!   user, or writable by group or others without the sticky bit) is refused with
//!   [`LeaseError::InvalidInput`] naming its path, owner and mode, and how to allow it. A
//!   sticky directory owned by the caller or root, such as `/tmp` itself, is accepted: others
//!   can add entries there but never rename or remove this user's. They can still take a
//!   lock's name first (a lock directory they own is then refused: a denial, never a shared
//!   lease).
//! * **The opt-in**, [`DirectoryStoreBuilder::with_shared_directory`],
//!   [`FileLockBuilder::with_shared_directory`] (`lease --shared-dir`), accepts a directory
//!   owned by another user or writable by its group, and lock directories made by other users.
//!   Every user who can write the store can then: deny any key (take its name first, or plant
//!   a second state entry), release or take over any lease in it (rename its state entry), and
//!   read every holder's description, owner token included. Fencing tokens still never repeat
//!   for a lock directory nobody replaced. Nothing beyond the store's entries is reachable: no
//!   link is followed, no planted file is written, and a state entry another user created is
//!   renamed like any other but never written (a holder there is shown as "a holder still
//!   writing its description"). A directory anyone can write without the sticky bit is refused
//!   even with the opt-in.
//! * **Modes.** Created files and directories get the configured mode less the umask, never
//!   writable by group or others, and a lease's state entry, which carries the owner token,
//!   is readable by its owner only (other users see the state's name in a listing, not who
//!   holds it). In a shared directory the configured mode is given exactly, through the
//!   descriptor of what was just created, so a group can share the lock whatever the
//!   creator's umask, except that a lock directory never gets write permission for others
//!   (one anyone can write without the sticky bit is refused: `with_file_mode(0o666)` makes
//!   0775 lock directories). The fencing marker of a store that deletes keys is created like
//!   every other file.
//!
//! # Design choices
//!
//! * **A name, not a record, is the state.** Only a rename from an exact name is atomic *and*
//!   conditional on every file system, NFS included; rewriting a record (even by rename) is not
//!   conditional on what it replaces.
//! * **The kernel lock is on the lock directory itself**, taken before the state is read: no
//!   companion file that a cleaner could delete or replace under a holder.
//! * **Observation, not wall clocks**, for holders on other clocks, as Kubernetes leader
//!   election does; the wall time is display only.
//! * **One heartbeat thread per `FileLock`**, started at the first acquisition (or when
//!   [`FileLock::acquire`] first blocks) and parked between tenures: a heartbeat stuck in
//!   slow I/O on one path never delays another lock's. Neither acquisition nor release wakes it:
//!   it sleeps until its tenure's next beat.
//! * **Lock directories kept open.** A `FileLock` keeps its lock directory open between tenures
//!   (three descriptors: the directory, a stream on it, the state entry), and a
//!   [`DirectoryStore`] the directories of the leases it holds and up to 32 released ones, so
//!   that an acquisition opens nothing. A kept directory is trusted only while the path still
//!   names it: that is checked after every win and before a refusal is reported, and a directory
//!   moved away or removed by hand is dropped and the path opened afresh. It is used only in
//!   the process that opened it (see [*Forks*](#forks)).
//! * **Inline I/O in the store's futures.** The operations are a few local syscalls (19 per
//!   acquire + release in kernel mode, one more when the tenure lasted; counted with
//!   `strace`), shorter than a thread hop, so the futures do
//!   them when first polled and need no runtime; on a network file system they can block the
//!   executor thread for the duration of the I/O.
//! * **Costs**, in syscalls and wakeups (the counts per operation are in [`FileLock`]'s table;
//!   `benches/file_lease.rs` measures the times, each beside a floor measured in the same run,
//!   and `cargo xtask bench` writes them to [docs/benchmarks.md](https://github.com/lease-rs/lease/blob/main/docs/benchmarks.md)).
//!   Heartbeat-only mode costs the same syscalls on the fast path less the kernel lock's.
//!   - An uncontended acquire + release is 19 syscalls on descriptors kept open (9 of them
//!     `getpid` for the fork checks), beside a floor
//!     of a bare `open(O_CREAT|O_EXCL)` + `close` + `unlink` in the same directory. The lease's
//!     renames allocate no inode, so on ext4 its cost does not grow as the journal fills, while
//!     the floor's create + unlink loop does.
//!   - A takeover after SIGKILL of the holder is one kernel-lock handover plus the acquisition,
//!     beside a floor of a process blocked in `flock` on a plain file. A blocked `flock` cannot
//!     time out, so a helper thread blocks in it and wakes the caller: one more wakeup than the
//!     floor. `lease run` frees the lock only once its command's group is gone, because a
//!     small holder process beside the group (not the command, which could unlock it) inherits
//!     the kernel lock.
//!   - A held lease costs one timer wakeup and one rename per heartbeat interval (250 ms by
//!     default), plus the check that the path still names the directory, beside a floor of a
//!     thread that only wakes and renames one file.
//!
//! [`AcquireOptions::with_value`]: lease_core::AcquireOptions::with_value
//! [`DirectoryStore`]: crate::DirectoryStore
//! [`DirectoryStore::prune`]: crate::DirectoryStore::prune
//! [`DirectoryStore::kernel_lock_descriptor`]: crate::DirectoryStore::kernel_lock_descriptor
//! [`DirectoryStoreBuilder::with_shared_directory`]: crate::DirectoryStoreBuilder::with_shared_directory
//! [`FencedValues::fence_and_read`]: lease_core::FencedValues::fence_and_read
//! [`FileLock`]: crate::FileLock
//! [`FileLock::acquire`]: crate::FileLock::acquire
//! [`FileLockBuilder::with_shared_directory`]: crate::FileLockBuilder::with_shared_directory
//! [`FileLockGuard`]: crate::FileLockGuard
//! [`FileLockGuard::check`]: crate::FileLockGuard::check
//! [`FileLockGuard::fencing_token`]: crate::FileLockGuard::fencing_token
//! [`FileLockGuard::release`]: crate::FileLockGuard::release
//! [`Lease`]: lease_core::Lease
//! [`LeaseBackend::delete`]: lease_core::LeaseBackend::delete
//! [`LeaseBackend::release`]: lease_core::LeaseBackend::release
//! [`LeaseBackend::renew`]: lease_core::LeaseBackend::renew
//! [`LeaseBackend::watch_record`]: lease_core::LeaseBackend::watch_record
//! [`LeaseError::Corrupt`]: lease_core::LeaseError::Corrupt
//! [`LeaseError::Foreign`]: lease_core::LeaseError::Foreign
//! [`LeaseError::Held`]: lease_core::LeaseError::Held
//! [`LeaseError::InvalidInput`]: lease_core::LeaseError::InvalidInput
//! [`LeaseError::Unsupported`]: lease_core::LeaseError::Unsupported
//! [`LeaseGuard::check`]: lease_core::LeaseGuard::check
//! [`LockMode::HeartbeatOnly`]: crate::LockMode::HeartbeatOnly
//! [`LockMode::Kernel`]: crate::LockMode::Kernel
//! [`LossReason::BackendFailing`]: lease_core::LossReason::BackendFailing
//! [`LossReason::DeadlinePassed`]: lease_core::LossReason::DeadlinePassed
//! [`ModePreference::Kernel`]: crate::ModePreference::Kernel
//! [`Observer`]: lease_core::Observer
