//! The on-disk protocol: one directory per lock whose single *state entry's name* is the whole
//! lease state, changed only by `rename(2)` from the exact name last observed.
//!
//! A rename whose source name is gone fails with `ENOENT`. With exactly one state entry per
//! directory and names that never repeat (the generation only grows, and within a generation the
//! renewal counter only grows), `rename(observed, next)` therefore succeeds iff the state is still
//! exactly the one observed: a compare-and-swap on the name. A process paused for any length of
//! time between looking and renaming finds its source gone, so no decision can ever be replayed
//! on a state that changed. See the `protocol` module for the argument in full.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use lease_core::Holder;

use crate::at::{self, Dir, EntryKind, Stream};
use crate::encode::fnv;
use crate::error::FsError;
use crate::fsio::{Base, MAX_RECORD_BYTES, io_error};
use crate::record::LeaseFileRecord;

/// A state entry while the lock is free: `free.<generation>`.
const FREE: &str = "free.";
/// A state entry while the lock is held: `held.<gen>.<seq>.<token>.<kernel>.<scale>.<deadline>.<duration>`.
const HELD: &str = "held.";
/// The state entry of a deleted (pruned) lock directory: `dead.<generation>`.
///
/// A delete renames the state entry `free.<g>` (or a holder's `held.<g>...`) to `dead.<g>`: the
/// same compare-and-swap as every other change, so it happens iff the state is still exactly
/// the one observed, and no acquisition can ever succeed in that directory afterwards (there is
/// no `free.*` or `held.*` name left to rename from). Then the entry is unlinked and the empty
/// directory removed with `rmdir`, which the kernel refuses for any directory that is not empty:
/// a lock directory created by this crate is never empty (it is renamed into place already
/// holding its state), so only a deleted one (or an empty one planted by hand, which holds no
/// state either) can be removed that way, whoever runs it and however late. The next acquirer
/// creates the directory afresh, starting at `free.<seed>` (see `DirectoryStore`'s fencing).
pub(crate) const DEAD: &str = "dead.";
/// A fenced value's chain entry: `value.<fence>.<seq>.<nonce>`.
const VALUE: &str = "value.";
/// A fenced value's bytes: `data.<nonce>`.
const DATA: &str = "data.";
/// Descriptions are padded to this size, so that a shorter one overwrites a longer one in place.
const DESCRIPTION_BYTES: usize = 1024;
/// How many times a listing with zero or two state entries is taken again before it is
/// believed (a listing taken during a rename may show either).
const LISTING_RETRIES: u32 = 6;
/// The most entries a lock directory is scanned for (planted junk beyond it is refused).
const MAX_ENTRIES: usize = 4096;

/// A held lease, as its state entry's name says.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Held {
    /// Fencing generation.
    pub(crate) generation: u64,
    /// Renewal counter within the generation.
    pub(crate) seq: u64,
    /// [`fnv`] of the holder's token.
    pub(crate) token: u64,
    /// Identity of the lock directory on which the holder holds the kernel lock (`flock`), or
    /// `None` when it does not hold it (heartbeat-only mode, or a takeover from a hung holder).
    pub(crate) kernel: Option<u64>,
    /// The holder's monotonic time scale (host boot and time namespace, or a test clock), if it
    /// can be shared: then `deadline_ns` is on that scale.
    pub(crate) scale: Option<u64>,
    /// When the lease ends, in nanoseconds on `scale`.
    pub(crate) deadline_ns: u64,
    /// The duration granted by the last acquire or renewal.
    pub(crate) duration_ns: u64,
}

impl Held {
    /// The holder of this tenure as lease-core shows it, described by `record` when that record
    /// is this very tenure's: pid and host, the label as the owner, the generation as the
    /// fencing token, when it acquired and last heartbeat. A holder whose record is not (yet)
    /// this tenure's is "a holder still writing its description".
    pub(crate) fn holder(&self, record: Option<LeaseFileRecord>) -> Holder {
        let record = record.filter(|r| {
            r.generation == self.generation
                && r.owner.as_deref().map(|t| fnv(t.as_bytes())) == Some(self.token)
        });
        let mut holder = Holder::new();
        if self.generation > 0 {
            holder = holder.with_fencing(lease_core::backend::fencing_token(self.generation));
        }
        let Some(record) = record else {
            return holder.with_owner("a holder still writing its description");
        };
        if record.pid != 0 || !record.host.is_empty() {
            let host = if record.host.is_empty() {
                "an unknown host"
            } else {
                &record.host
            };
            holder = holder.with_process(record.pid, host);
        }
        if let Some(label) = record.label {
            holder = holder.with_owner(label);
        }
        if let Some(value) = record.value {
            holder = holder.with_value(value);
        }
        if let Some(at) = from_ns(record.acquired_at_ns) {
            holder = holder.with_acquired_at(at);
        }
        if let Some(at) = from_ns(record.written_at_ns) {
            holder = holder.with_renewed_at(at);
        }
        holder
    }
}

fn from_ns(ns: u64) -> Option<std::time::SystemTime> {
    (ns > 0).then(|| std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(ns))
}

/// The lease state a directory's state entry names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum State {
    /// Released (or never acquired); the generation the next holder continues from.
    Free(u64),
    /// Held.
    Held(Held),
}

impl State {
    /// The state entry's name.
    pub(crate) fn name(&self) -> String {
        match self {
            Self::Free(generation) => format!("{FREE}{generation}"),
            Self::Held(h) => format!(
                "{HELD}{}.{}.{:016x}.{}.{}.{}.{}",
                h.generation,
                h.seq,
                h.token,
                hex_or_n(h.kernel),
                hex_or_n(h.scale),
                h.deadline_ns,
                h.duration_ns
            ),
        }
    }

    /// Parses a state entry's name; `None` for anything not in the canonical form this crate
    /// writes (planted or foreign names are ignored, never trusted).
    pub(crate) fn parse(name: &str) -> Option<Self> {
        let state = if let Some(rest) = name.strip_prefix(FREE) {
            Self::Free(decimal(rest)?)
        } else {
            let rest = name.strip_prefix(HELD)?;
            let mut fields = rest.split('.');
            let held = Held {
                generation: decimal(fields.next()?)?,
                seq: decimal(fields.next()?)?,
                token: hex(fields.next()?)?,
                kernel: optional_hex(fields.next()?)?,
                scale: optional_hex(fields.next()?)?,
                deadline_ns: decimal(fields.next()?)?,
                duration_ns: decimal(fields.next()?)?,
            };
            if fields.next().is_some() || held.generation == 0 {
                return None;
            }
            Self::Held(held)
        };
        // Only the canonical spelling counts: `free.007` or upper-case hex are someone else's.
        (state.name() == name).then_some(state)
    }

    /// The fencing generation this state carries.
    pub(crate) fn generation(&self) -> u64 {
        match self {
            Self::Free(g) => *g,
            Self::Held(h) => h.generation,
        }
    }
}

fn hex_or_n(value: Option<u64>) -> String {
    value.map_or_else(|| "n".to_owned(), |v| format!("{v:016x}"))
}

fn decimal(s: &str) -> Option<u64> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    canonical.then(|| s.parse().ok()).flatten()
}

fn hex(s: &str) -> Option<u64> {
    let canonical = s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    canonical.then(|| u64::from_str_radix(s, 16).ok()).flatten()
}

fn optional_hex(s: &str) -> Option<Option<u64>> {
    if s == "n" {
        Some(None)
    } else {
        hex(s).map(Some)
    }
}

/// A fenced value's chain entry: the fence, a counter, and the nonce of its data file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Value {
    pub(crate) fence: u64,
    pub(crate) seq: u64,
    /// `None` before the first write.
    pub(crate) nonce: Option<u64>,
}

impl Value {
    pub(crate) fn name(&self) -> String {
        format!(
            "{VALUE}{}.{}.{}",
            self.fence,
            self.seq,
            self.nonce
                .map_or_else(|| "none".to_owned(), |n| format!("{n:016x}"))
        )
    }

    fn parse(name: &str) -> Option<Self> {
        let mut fields = name.strip_prefix(VALUE)?.split('.');
        let fence = decimal(fields.next()?)?;
        let seq = decimal(fields.next()?)?;
        let nonce = match fields.next()? {
            "none" => None,
            other => Some(hex(other)?),
        };
        let value = Self { fence, seq, nonce };
        (fields.next().is_none() && value.name() == name).then_some(value)
    }
}

/// The name of a fenced value's data file.
pub(crate) fn data_name(nonce: u64) -> String {
    format!("{DATA}{nonce:016x}")
}

/// What a lock directory is for: what its first entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A lease: starts as `free.0`.
    Lease,
    /// A fenced value: starts as `value.0.0.none`.
    Value,
}

/// How created files and directories are made.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Modes {
    pub(crate) file: u32,
    pub(crate) dir: u32,
    /// fsync the parent directory once the lock directory is in place.
    pub(crate) fsync: bool,
}

impl Modes {
    /// The modes to create with in `base`: as configured in a shared directory; elsewhere never
    /// writable by group or others (such a lock directory would be refused as untrusted).
    fn for_base(self, base: &Base) -> Self {
        if base.shared() {
            // Never a lock directory anyone can write: one without the sticky bit is refused
            // even with the opt-in, so a world-writable mode (`with_file_mode(0o666)`) would
            // make a lock directory this very lock then refuses. The group keeps its bits.
            Self {
                dir: self.dir & !0o002,
                ..self
            }
        } else {
            Self {
                file: self.file & !0o022,
                dir: self.dir & !0o022,
                fsync: self.fsync,
            }
        }
    }
}

/// One lock directory, opened. Every operation goes through its descriptor, so the state read,
/// the kernel lock taken and the rename made are all in the same directory even if the path is
/// replaced meanwhile.
#[derive(Debug)]
pub(crate) struct KeyDir {
    path: PathBuf,
    /// The directory holding it, and its name there: what [`still_at_path`](Self::still_at_path)
    /// looks at, never the path.
    base: Arc<Base>,
    name: std::ffi::OsString,
    dir: Dir,
    /// [`fnv`] of the directory's device and inode numbers.
    id: u64,
    dev_ino: (u64, u64),
    locked: bool,
    /// The process that opened `file` (and so the open file description the kernel lock lives
    /// on). After a `fork` the child shares that description with its parent: `flock` on it
    /// succeeds in both at once, and `flock(LOCK_UN)` in either frees the other's lock. So the
    /// kernel lock is taken, trusted and let go only through a descriptor opened by the calling
    /// process ([`opened_here`](Self::opened_here)); a copy inherited across a `fork` is
    /// refused for that, and its holders open the directory afresh (see
    /// [*Forks*](crate::protocol#forks)).
    opened_in: u32,
    /// fsync the directory after every rename.
    durable: bool,
    /// What a description may be written into (see [`describe`](Self::describe)): the state
    /// entry this handle's open created, by device and inode (recorded from the descriptor it
    /// was created through), and whether the directory admits no writer but this user (owned
    /// by the effective user, writable by nobody else: `fstat` on the descriptor at open), so
    /// that every entry in it was put there by this user.
    created_entry: Option<(u64, u64)>,
    sole_writer: bool,
    /// A directory stream on a duplicate of `dir`, made at the first listing and rewound after
    /// each: a listing is then `getdents64` twice and an `lseek`, instead of also opening,
    /// checking and closing a stream every time.
    stream: Mutex<Option<Stream>>,
    /// The state entry, opened at the first description and kept with its inode number: the
    /// entry is one file renamed from state to state, so while a listing shows that inode under
    /// the state's name, a description is one `pwrite` to it (an open file's inode number is
    /// never reused by another file). Never kept on Windows, whose listings give no inode
    /// number (0).
    entry: Mutex<Option<(u64, File)>>,
}

/// A state entry as found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) name: String,
    pub(crate) state: State,
    /// Its inode number, as the listing gave it.
    pub(crate) ino: u64,
}

impl KeyDir {
    /// Opens the lock directory at `path`, creating it (atomically, already holding its first
    /// state entry) when `create` says how and it is missing. `Ok(None)`: missing, not created.
    ///
    /// # Errors
    /// [`FsError::Foreign`] when `path` is a file of another lock protocol (a Go
    /// `kit/lockfile` record, a lease-file 0.1 record): never taken over, never deleted.
    /// [`FsError::Hostile`] for a symbolic link or anything else that is not a directory.
    pub(crate) fn open(
        base: &Arc<Base>,
        name: &OsStr,
        kind: Kind,
        create: Option<Modes>,
    ) -> Result<Option<Self>, FsError> {
        Self::open_seeded(base, name, kind, create, &|| 0)
    }

    /// [`open`](Self::open), a lease directory created here starting at `free.<seed()>`
    /// instead of `free.0` (asked only when it creates one): see [`DEAD`].
    pub(crate) fn open_seeded(
        base: &Arc<Base>,
        name: &OsStr,
        kind: Kind,
        create: Option<Modes>,
        seed: &dyn Fn() -> u64,
    ) -> Result<Option<Self>, FsError> {
        let path = base.join(name);
        let path = path.as_path();
        check_name(name)?;
        let mut created_entry = None;
        for _ in 0..8 {
            match base.dir().open_dir(name) {
                Ok(dir) => {
                    let meta = dir.metadata().map_err(|e| io_error("fstat", path, e))?;
                    crate::fsio::trusted(path, &meta, base.shared(), "lock directory")?;
                    let (dev_ino, sole_writer) = identity(&meta);
                    let mut id_bytes = [0u8; 16];
                    id_bytes[..8].copy_from_slice(&dev_ino.0.to_le_bytes());
                    id_bytes[8..].copy_from_slice(&dev_ino.1.to_le_bytes());
                    // Made now rather than at the first listing, which every use of a lock
                    // directory starts with: a waiter that opens the directory before blocking
                    // in `flock` then lists it without this cost once woken.
                    let stream = Stream::new(&dir).ok();
                    return Ok(Some(Self {
                        path: path.to_owned(),
                        base: base.clone(),
                        name: name.to_owned(),
                        dir,
                        id: fnv(&id_bytes),
                        dev_ino,
                        locked: false,
                        opened_in: std::process::id(),
                        durable: false,
                        created_entry,
                        sole_writer,
                        stream: Mutex::new(stream),
                        entry: Mutex::new(None),
                    }));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => match create {
                    None => return Ok(None),
                    Some(modes) => {
                        if let Some(entry) = init(base, name, kind, modes, seed)? {
                            created_entry = Some(entry);
                        }
                    }
                },
                // Another protocol's file, or something hostile; or it changed under the look
                // (a Go lock released, or this lock's directory created meanwhile): look again.
                Err(e) => not_a_directory(base, name, e)?,
            }
        }
        Err(FsError::Io {
            op: "open lock directory",
            path: path.to_owned(),
            transient: true,
            source: io::Error::other(
                "the directory keeps being created and removed by someone else",
            ),
        })
    }

    /// fsync the directory after every rename, so that a state (and its generation) survives
    /// a power loss once the call that made it returned.
    pub(crate) fn durable(mut self, on: bool) -> Self {
        self.durable = on;
        self
    }

    /// The directory's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The identity a holder records when it holds this directory's kernel lock.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Whether this handle holds the kernel lock: it took it, through a descriptor this process
    /// opened (a copy inherited across a `fork` holds nothing for the child).
    pub(crate) fn locked(&self) -> bool {
        self.locked && self.opened_here()
    }

    /// Whether this process opened the directory: a handle inherited across a `fork` shares its
    /// open file description with the parent, so its kernel lock cannot tell the two apart.
    /// Every cache of open lock directories drops a handle for which this is false and opens
    /// the directory afresh.
    pub(crate) fn opened_here(&self) -> bool {
        self.opened_in == std::process::id()
    }

    /// The process that opened this handle: the current one, for a handle opened or checked
    /// with [`opened_here`](Self::opened_here) in this process (no `getpid` needed then).
    pub(crate) fn opener(&self) -> u32 {
        self.opened_in
    }

    /// Whether this handle took the kernel lock, in this process or (before a `fork`) in its
    /// parent: [`locked`](Self::locked) without its `getpid`, for a caller that already knows
    /// it runs in the acquiring process (a release, which a forked child is refused first).
    pub(crate) fn lock_taken(&self) -> bool {
        self.locked
    }

    /// Tries the kernel lock (`flock(LOCK_EX|LOCK_NB)` on the directory): true if now held.
    ///
    /// # Errors
    /// An I/O error other than "held by someone else"; a handle this process did not open
    /// ([`inherited`]): `flock` on a description shared with the parent would succeed in both.
    pub(crate) fn try_lock(&mut self) -> Result<bool, FsError> {
        if !self.opened_here() {
            return Err(inherited(&self.path));
        }
        if self.locked {
            return Ok(true);
        }
        match self.dir.try_lock() {
            Ok(()) => self.locked = true,
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(io_error("flock", &self.path, e)),
        }
        Ok(self.locked)
    }

    /// Blocks until this handle holds the kernel lock (the kernel wakes it).
    ///
    /// # Errors
    /// An I/O error; a handle this process did not open ([`inherited`]).
    pub(crate) fn lock_blocking(&mut self) -> Result<(), FsError> {
        if !self.opened_here() {
            return Err(inherited(&self.path));
        }
        if !self.locked {
            self.dir
                .lock()
                .map_err(|e| io_error("flock", &self.path, e))?;
            self.locked = true;
        }
        Ok(())
    }

    /// Another descriptor of this directory, sharing its open file description and so its
    /// kernel lock (`O_CLOEXEC`, like every descriptor here).
    /// A handle inherited across a `fork` shares nothing: its lock is the parent's.
    #[cfg(unix)]
    pub(crate) fn share(&self) -> io::Result<std::os::fd::OwnedFd> {
        if !self.opened_here() {
            return Err(io::Error::other(INHERITED));
        }
        self.dir.file().try_clone().map(std::os::fd::OwnedFd::from)
    }

    /// Drops the kernel lock (also dropped when the last process holding the handle closes
    /// it). In a forked child of the process that took it, only forgets it: the lock is shared
    /// with the parent, whose tenure it still guards.
    pub(crate) fn unlock(&mut self) {
        if self.locked {
            if self.opened_here() {
                let _ = self.dir.unlock();
            }
            self.locked = false;
        }
    }

    /// Whether the store directory holding this lock directory has an entry `name` (looked up
    /// through the store's descriptor, never its path, which may name another directory now).
    pub(crate) fn store_has(&self, name: &str) -> bool {
        self.base.dir().stat(OsStr::new(name)).is_ok()
    }

    /// Whether the path still names this directory (not removed, moved or replaced). On
    /// Windows, where every operation goes by path (see [`at`]), whether a directory is at the
    /// path: a handle there cannot drift from the path, and std gives no stable file identity
    /// to compare (Wine even changes a directory's creation time as entries are renamed in it).
    pub(crate) fn still_at_path(&self) -> bool {
        let at_path = self.base.dir().stat(&self.name);
        if cfg!(windows) {
            at_path.is_ok_and(|m| m.kind == EntryKind::Dir)
        } else {
            at_path.is_ok_and(|m| m.dev_ino == self.dev_ino)
        }
    }

    /// The entries' names and inode numbers, capped at [`MAX_ENTRIES`].
    fn names(&self) -> Result<Vec<(String, u64)>, FsError> {
        let mut stream = self.stream.lock().unwrap_or_else(PoisonError::into_inner);
        let dir = match stream.as_mut() {
            Some(dir) => dir,
            None => stream.insert(
                Stream::new(&self.dir)
                    .map_err(|e| io_error("open lock directory", &self.path, e))?,
            ),
        };
        let mut names = Vec::new();
        let mut seen = 0;
        dir.each(
            |entry| {
                // Every entry counts towards the cap, names that are not UTF-8 too.
                seen += 1;
                if seen > MAX_ENTRIES {
                    return Err(FsError::Hostile {
                        path: self.path.clone(),
                        reason: format!("more than {MAX_ENTRIES} entries in a lock directory"),
                    });
                }
                if let Ok(name) = entry.name.into_string() {
                    names.push((name, entry.ino));
                }
                Ok(())
            },
            |e| io_error("read lock directory", &self.path, e),
        )?;
        Ok(names)
    }

    /// The lease state: the one state entry. Names that are not canonical state names are
    /// ignored.
    ///
    /// A directory listing is not atomic: one taken while a rename is under way may show the old
    /// name, the new one, neither or both. So zero or two state entries are looked at again a few
    /// times before they are believed.
    ///
    /// # Errors
    /// [`FsError::Hostile`] when there is still no state entry, or more than one (files
    /// deleted or planted by hand): never guessed, never repaired.
    pub(crate) fn state(&self) -> Result<Found, FsError> {
        let mut attempt = 0;
        loop {
            let found: Vec<Found> = self
                .names()?
                .into_iter()
                .filter_map(|(name, ino)| {
                    State::parse(&name).map(|state| Found { name, state, ino })
                })
                .collect();
            match <[Found; 1]>::try_from(found) {
                Ok([one]) => return Ok(one),
                Err(found) if attempt < LISTING_RETRIES => {
                    let _ = found;
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_micros(50 << attempt));
                }
                Err(found) if found.is_empty() => {
                    return Err(FsError::Hostile {
                        path: self.path.clone(),
                        reason: "the lease state entry is missing (deleted by hand or by a \
                                 cleaner?); remove the directory once no process uses it"
                            .into(),
                    });
                }
                Err(found) => {
                    let names: Vec<&str> = found.iter().map(|f| f.name.as_str()).collect();
                    return Err(FsError::Hostile {
                        path: self.path.clone(),
                        reason: format!(
                            "two lease states or more ({}): planted by hand? Remove the \
                             directory once no process uses it",
                            names.join(", ")
                        ),
                    });
                }
            }
        }
    }

    /// The fenced value's chain entry, looked at again a few times like [`state`](Self::state).
    ///
    /// # Errors
    /// As [`state`](Self::state).
    pub(crate) fn value(&self) -> Result<Value, FsError> {
        let mut attempt = 0;
        loop {
            let found: Vec<Value> = self
                .names()?
                .iter()
                .filter_map(|(name, _)| Value::parse(name))
                .collect();
            match <[Value; 1]>::try_from(found) {
                Ok([one]) => return Ok(one),
                Err(_) if attempt < LISTING_RETRIES => {
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_micros(50 << attempt));
                }
                Err(found) => {
                    return Err(FsError::Hostile {
                        path: self.path.clone(),
                        reason: if found.is_empty() {
                            "the fenced value entry is missing (deleted by hand or by a cleaner?)"
                                .into()
                        } else {
                            format!("{} fenced value entries: planted by hand?", found.len())
                        },
                    });
                }
            }
        }
    }

    /// `rename(from, to)` inside this directory: the compare-and-swap. `Ok(false)` when `from`
    /// is gone (the state moved on) and `to` is not there either (so the rename was not ours
    /// with a lost reply, which a network file system can produce).
    ///
    /// # Errors
    /// I/O errors other than `ENOENT`.
    pub(crate) fn swap(&self, from: &str, to: &str) -> Result<bool, FsError> {
        #[cfg(feature = "failpoints")]
        crate::faults::pause_at(from, to);
        // On Windows a rename opens its source by name, then renames the file through the
        // handle: two steps, so two renames of one name can both succeed. Under the lock
        // directory's `cas` lock the check that `from` is still there and the rename are one
        // step for every other writer (they all take it), which the rename alone is on Unix.
        #[cfg(windows)]
        let _cas = {
            let cas = self.cas()?;
            if !self.exists(from)? {
                return self.exists(to);
            }
            cas
        };
        match self.dir.rename(OsStr::new(from), OsStr::new(to)) {
            Ok(()) if self.durable => self
                .dir
                .sync()
                .map(|()| true)
                .map_err(|e| io_error("fsync lock directory", &self.path, e)),
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.exists(to),
            Err(e) => Err(io_error("rename lease state", &self.path, e)),
        }
    }

    /// Takes the lock directory's `cas` lock (Windows): `LockFileEx` on the file [`CAS`], made
    /// if missing, held until the returned guard is dropped.
    ///
    /// # Errors
    /// Transient I/O errors (a `cas` file pending deletion by a pruner refuses opens until its
    /// last handle closes).
    #[cfg(windows)]
    fn cas(&self) -> Result<CasLock, FsError> {
        let transient = |op, e| FsError::Io {
            op,
            path: self.path.join(CAS),
            transient: true,
            source: e,
        };
        // One `cas` handle per lock directory per process at a time: threads of this process
        // wait here, on a condition variable, not in `LockFileEx` on handles of their own
        // (under Wine, whose `UnlockFileEx` refuses std's range, the close frees the lock: the
        // case tested there).
        let turn = CasTurn::take(&self.path);
        let file = self
            .dir
            .open_or_create(OsStr::new(CAS))
            .map_err(|e| transient("open cas lock", e))?;
        file.lock().map_err(|e| transient("lock cas", e))?;
        Ok(CasLock {
            file,
            _turn: turn,
        })
    }

    fn exists(&self, name: &str) -> Result<bool, FsError> {
        self.dir
            .exists(OsStr::new(name))
            .map_err(|e| io_error("stat lease state", &self.path, e))
    }

    /// Writes the diagnostic record into the state entry `name`, which a rename just gave the
    /// entry listed as inode `ino` (best effort: if the state moved on meanwhile, there is
    /// nothing to describe). Records are padded with spaces to [`DESCRIPTION_BYTES`] and written
    /// over the old one in place: truncating a file with data would make ext4 flush it on close
    /// (`auto_da_alloc`), which costs more than the rest of an acquisition. Only a record longer
    /// than that (a very long label) truncates.
    ///
    /// The entry opened for the last description is kept: while it is still inode `ino`, the
    /// write needs no `open` and `close`. Only a regular file is written (and kept): a planted
    /// FIFO (or device) under a state name is renamed like any state entry but never described,
    /// and `O_NONBLOCK` keeps the open of a FIFO with no reader from blocking the acquisition.
    pub(crate) fn describe(&self, name: &str, ino: u64, record: &LeaseFileRecord) {
        #[cfg(feature = "failpoints")]
        crate::faults::before_describe();
        let mut bytes = record.to_bytes();
        let fits = bytes.len() <= DESCRIPTION_BYTES;
        let mut entry = self.entry.lock().unwrap_or_else(PoisonError::into_inner);
        if fits {
            bytes.resize(DESCRIPTION_BYTES, b' ');
            if let Some((kept, file)) = entry.as_ref()
                && *kept == ino
            {
                let _ = at::write_all_at(file, &bytes);
                return;
            }
        }
        if let Ok(file) = self.dir.open_write(OsStr::new(name)) {
            let Ok(meta) = file.metadata() else {
                return;
            };
            // Only an entry known to be the lock's own (see `writable`): a file planted under a
            // state name (a hard link to someone's file, or a file of this very user moved in
            // by someone who can write the directory) is renamed like any entry, but never
            // written (truncated only after this check, never by `O_TRUNC`).
            if self.writable(&meta) {
                if !fits {
                    let _ = file.set_len(0);
                }
                let _ = at::write_all_at(&file, &bytes);
                if ino != 0 && at::ino(&meta) == ino {
                    *entry = Some((ino, file));
                }
            }
        }
    }

    /// Whether the state entry described by `meta` (from `fstat` on its descriptor) may be
    /// written: a regular file with no other name, that is either the very entry this handle's
    /// open created (same device and inode), or this user's in a directory nobody else can
    /// write (so this user put it there; no other user could have moved anything in). Ownership
    /// alone proves nothing: a user who can write the lock directory (a shared store, a lock
    /// directory squatted by another user) can move into it a file of the caller's that was
    /// never a state entry, a root-owned file under root.
    #[cfg(unix)]
    fn writable(&self, meta: &std::fs::Metadata) -> bool {
        use std::os::unix::fs::MetadataExt;
        meta.is_file()
            && meta.nlink() == 1
            && (self.created_entry == Some((meta.dev(), meta.ino()))
                || (self.sole_writer && meta.uid() == nix::unistd::geteuid().as_raw()))
    }

    /// On Windows std reads neither owners nor link counts: a regular file is written, and the
    /// store directory's access control list keeps other users from planting one (see the
    /// [platforms](crate::platforms) page, *Windows*).
    #[cfg(windows)]
    fn writable(&self, meta: &std::fs::Metadata) -> bool {
        let _ = (self.created_entry, self.sole_writer);
        meta.is_file()
    }

    /// Erases the description from the state entry kept open by the last
    /// [`describe`](Self::describe) (if it is inode `ino`, when given): one `ftruncate` to 0
    /// bytes, so that a free key's entry holds no data block (a free state is never described:
    /// only a held one's description is ever read). Nothing is opened for it: without a kept
    /// entry (none described through this directory handle, or an entry this user does not own)
    /// nothing is erased. The caller erases only while the state is still provably its own
    /// tenure's (see [`engine::release`](crate::engine::release)), since the entry is the one
    /// file every tenure of this lock describes itself in.
    pub(crate) fn erase_description(&self, ino: Option<u64>) {
        let entry = self.entry.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((kept, file)) = entry.as_ref()
            && ino.is_none_or(|ino| ino == *kept)
        {
            let _ = file.set_len(0);
        }
    }

    /// Reads the diagnostic record of the state entry `name`, if it describes that state (the
    /// record is written just after the rename that made the state, so it may still be the
    /// previous holder's, or empty).
    pub(crate) fn description(&self, name: &str) -> Option<LeaseFileRecord> {
        let bytes = self.read_file(name).ok()??;
        LeaseFileRecord::parse(&bytes).ok()
    }

    /// Reads a regular file of this directory, capped; `Ok(None)` if missing.
    pub(crate) fn read_file(&self, name: &str) -> Result<Option<Vec<u8>>, FsError> {
        match self.open_file(name)? {
            Some(file) => read_capped(&file, &self.path.join(name)).map(Some),
            None => Ok(None),
        }
    }

    /// Opens a file of this directory for reading, if it exists.
    pub(crate) fn open_file(&self, name: &str) -> Result<Option<File>, FsError> {
        match self.dir.open_read(OsStr::new(name)) {
            Ok(file) => Ok(Some(file)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error("open", &self.path.join(name), e)),
        }
    }

    /// Creates the file `name` exclusively with `mode` (less the umask) and `bytes`.
    ///
    /// # Errors
    /// I/O errors, `EEXIST` included.
    pub(crate) fn create(
        &self,
        name: &str,
        mode: u32,
        bytes: &[u8],
        fsync: bool,
    ) -> Result<(), FsError> {
        let path = self.path.join(name);
        let mode = if self.base.shared() {
            mode
        } else {
            mode & !0o022
        };
        let mut file = self
            .dir
            .create_new(OsStr::new(name), mode)
            .map_err(|e| io_error("create", &path, e))?;
        if self.base.shared() {
            at::set_mode(&file, mode).map_err(|e| io_error("chmod", &path, e))?;
        }
        file.write_all(bytes)
            .and_then(|()| if fsync { file.sync_all() } else { Ok(()) })
            .map_err(|e| io_error("write", &path, e))
    }

    /// Removes the file `name` (best effort).
    pub(crate) fn remove(&self, name: &str) {
        let _ = self.dir.unlink(OsStr::new(name));
    }
}

/// What a lock directory that holds no live state holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Deleted: its one entry is `dead.<generation>`.
    Dead(String),
    /// Nothing at all (a delete between its unlink and its `rmdir`, or planted by hand).
    Empty,
}

/// Deletion ([`DEAD`]): kept apart from the live protocol above.
impl KeyDir {
    /// Ends this lock directory if its state is still exactly `from`: one rename to
    /// `dead.<generation>`. `Ok(false)` when the state moved on (nothing changed).
    ///
    /// # Errors
    /// I/O errors other than `ENOENT`.
    pub(crate) fn end(&self, from: &str, generation: u64) -> Result<bool, FsError> {
        let ended = self.swap(from, &format!("{DEAD}{generation}"))?;
        if ended {
            tracing::debug!(path = %self.path.display(), generation, "lock directory ended");
        }
        Ok(ended)
    }

    /// `Some` when the directory holds no live state: only a `dead.<g>` entry, or nothing.
    /// Either is final (nothing ever renames a dead entry back, or adds a state entry to an
    /// existing directory), so a caller may finish the removal ([`remove_ended`]).
    ///
    /// # Errors
    /// I/O errors listing it.
    pub(crate) fn ended(&self) -> Result<Option<Ended>, FsError> {
        let mut names = self.names()?;
        // Windows: the `cas` lock file stays beside a dead entry (and is removed with it).
        names.retain(|(name, _)| !cfg!(windows) || name != CAS);
        Ok(match names.as_slice() {
            [] => Some(Ended::Empty),
            [(name, _)] if dead_generation(name).is_some() => Some(Ended::Dead(name.clone())),
            _ => None,
        })
    }

    /// When the directory was last changed (its mtime: every state rename sets it).
    pub(crate) fn changed_at(&self) -> Option<std::time::SystemTime> {
        self.dir.metadata().and_then(|m| m.modified()).ok()
    }

    /// Drops the state entry kept open for descriptions (so that a network file system need
    /// not silly-rename it when it is unlinked).
    pub(crate) fn close_entry(&self) {
        *self.entry.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// The generation of a `dead.<g>` name, if it is one in canonical form.
pub(crate) fn dead_generation(name: &str) -> Option<u64> {
    let generation = decimal(name.strip_prefix(DEAD)?)?;
    (format!("{DEAD}{generation}") == name).then_some(generation)
}

/// The store directory for `*at` calls: a duplicate of the descriptor it was opened as once
/// (`O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC`, see [`Base`]), never reopened by its path.
///
/// # Errors
/// I/O errors duplicating it.
pub(crate) fn open_store_dir(base: &Base) -> Result<Dir, FsError> {
    base.dir()
        .try_clone()
        .map_err(|e| io_error("open store directory", base.path(), e))
}

/// Whether a creation of the lock directory `name` may be under way: the store listing
/// `listing` (every name, hidden ones included) holds one of its temporary directories
/// (`.lease-init.<hash of name>.<nonce>`, see [`init`]).
///
/// A creator reads the clock for its first generation *after* making its temporary directory,
/// and publishes it by a rename that fails while anything but an empty directory is at the
/// path. So an ended directory is removed only when a listing taken *after* it ended shows no
/// creation of its name under way: any creator that publishes later made its temporary
/// directory after that listing, and so read the clock after the key ended, above its old
/// generation. Without this check a creator paused between reading the clock and its rename
/// (from before the directory ended) could publish a first generation below the old ones.
pub(crate) fn creating(listing: &[std::ffi::OsString], name: &str) -> bool {
    let prefix = format!("{INIT_PREFIX}{}.", init_name_hash(OsStr::new(name)));
    listing
        .iter()
        .any(|entry| entry.as_encoded_bytes().starts_with(prefix.as_bytes()))
}

/// The names whose creation may be under way in the store listing `listing` (as [`creating`]
/// says of one name), for many lookups: the hashes their temporary directories carry (see
/// [`creation_pending`]).
pub(crate) fn creations(listing: &[std::ffi::OsString]) -> std::collections::HashSet<&[u8]> {
    listing
        .iter()
        .filter_map(|entry| {
            let temp = entry
                .as_encoded_bytes()
                .strip_prefix(INIT_PREFIX.as_bytes())?;
            temp.get(..16)
        })
        .collect()
}

/// Whether `creations` (from [`creations`]) says a creation of `name` may be under way.
pub(crate) fn creation_pending(creations: &std::collections::HashSet<&[u8]>, name: &str) -> bool {
    creations.contains(init_name_hash(OsStr::new(name)).as_bytes())
}

/// Every name in the store directory, hidden ones included, listed through its descriptor.
///
/// # Errors
/// I/O errors listing it.
pub(crate) fn store_listing(base: &Base) -> Result<Vec<std::ffi::OsString>, FsError> {
    let list_error = |e| io_error("list", base.path(), e);
    // A fresh stream on a fresh descriptor of the directory (`openat(".")`), not the base's.
    let mut stream = base
        .dir()
        .open_dir(OsStr::new("."))
        .and_then(Stream::from_dir)
        .map_err(list_error)?;
    let mut names = Vec::new();
    stream.each(
        |entry| {
            // A creation under way is a directory (`mkdirat`): anything else at a temporary's
            // name (a link another user planted in a shared store) creates nothing, and is not
            // listed, so it cannot make a pruner keep a key forever.
            let planted = entry
                .name
                .as_encoded_bytes()
                .starts_with(INIT_PREFIX.as_bytes())
                && entry.kind.is_some_and(|kind| kind != EntryKind::Dir);
            if !planted {
                names.push(entry.name);
            }
            Ok(())
        },
        list_error,
    )?;
    Ok(names)
}

/// Finishes removing the ended lock directory `kd`, entry `name` of the store directory
/// `base`, unless a creation of that name is under way
/// ([`creating`], in `listing` if given, taken after `kd` ended; else listed now): unlinks its
/// `dead.<g>` entry (if any), then `rmdir`s the name, which the kernel does only if the
/// directory there is empty. Safe for anyone to run at any time: true when the name is gone
/// afterwards. An ended directory left in place blocks every creation of its name (a rename
/// never replaces a non-empty directory) until someone removes it.
pub(crate) fn remove_ended(
    base: &Base,
    name: &str,
    kd: &KeyDir,
    listing: Option<&std::collections::HashSet<&[u8]>>,
) -> bool {
    kd.close_entry();
    let pending = match listing {
        Some(creations) => creation_pending(creations, name),
        None => store_listing(base).map_or(true, |listing| creating(&listing, name)),
    };
    if pending {
        return false;
    }
    if let Ok(Some(Ended::Dead(dead))) = kd.ended() {
        let _ = kd.dir.unlink(OsStr::new(&dead));
    }
    // Windows: the `cas` lock file goes too. A contender that opens it again meanwhile (its
    // swap then finds no state to rename) makes the `rmdir` below fail: a later prune ends it.
    #[cfg(windows)]
    let _ = kd.dir.unlink(OsStr::new(CAS));
    #[cfg(feature = "failpoints")]
    fail::fail_point!("lease-file/before-rmdir");
    match base.dir().rmdir(OsStr::new(name)) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => true,
        // Not empty, or not ours to remove: removed only if the ended directory is no longer
        // at the path (someone finished the removal, and perhaps created the key afresh).
        Err(_) => !kd.still_at_path(),
    }
}

/// Why a handle inherited across a `fork` is refused for the kernel lock.
const INHERITED: &str = "the lock directory was opened by the process this one was forked from: \
                         its kernel lock is shared with that process";

/// The refusal of the kernel lock through a handle this process did not open (see
/// [`KeyDir::opened_here`]). Transient: the caller's retry opens the directory afresh.
fn inherited(path: &Path) -> FsError {
    FsError::Io {
        op: "flock",
        path: path.to_owned(),
        transient: true,
        source: io::Error::other(INHERITED),
    }
}

/// Reads at most [`MAX_RECORD_BYTES`] (or [`crate::MAX_FENCED_FILE_BYTES`]) of a regular file,
/// leaving it open.
fn read_capped(file: &File, path: &Path) -> Result<Vec<u8>, FsError> {
    let meta = file.metadata().map_err(|e| io_error("fstat", path, e))?;
    if !meta.is_file() {
        return Err(FsError::Hostile {
            path: path.to_owned(),
            reason: "not a regular file".into(),
        });
    }
    let cap = MAX_RECORD_BYTES.max(crate::MAX_FENCED_FILE_BYTES);
    // Sized from `fstat`: two `read`s for a file that did not grow, not a doubling series.
    let mut bytes =
        Vec::with_capacity(usize::try_from(meta.len()).map_or(cap, |len| len.min(cap)) + 1);
    file.take(cap as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error("read", path, e))?;
    if bytes.len() > cap {
        return Err(FsError::Hostile {
            path: path.to_owned(),
            reason: format!("larger than {cap} bytes"),
        });
    }
    Ok(bytes)
}

/// Creates the lock directory atomically with its first entry: a private temporary directory
/// holding it is renamed into place. A plain rename refuses a non-empty target, so of several
/// creators exactly one wins, and a creator paused for any time can never reset a directory in
/// use (an empty directory planted at the path is replaced: it holds no state).
///
/// Every step goes through a descriptor: `mkdirat` in the base directory, the temporary
/// directory opened with `O_NOFOLLOW` and checked to be the directory just made (this user's),
/// the first entry created in it with `openat(O_CREAT|O_EXCL|O_NOFOLLOW)`, `renameat` into
/// place. Modes are the configured ones less the umask: nothing is `chmod`ed. Whatever another
/// user swaps the temporary name for meanwhile, nothing outside the base directory's own
/// entries is created, changed, renamed or removed.
fn init(
    base: &Base,
    name: &OsStr,
    kind: Kind,
    modes: Modes,
    seed: &dyn Fn() -> u64,
) -> Result<Option<(u64, u64)>, FsError> {
    let path = base.join(name);
    let temp = init_temp_name(name);
    let temp_path = base.join(&temp);
    let modes = modes.for_base(base);
    // The coarse clock the kernel stamps new inodes with, read before the `mkdirat`: the
    // directory it makes is born no earlier (see `open_temp`).
    let made_after = crate::sys::birth_floor();
    base.dir()
        .mkdir(&temp, modes.dir)
        .map_err(|e| io_error("create lock directory", &temp_path, e))?;
    #[cfg(feature = "failpoints")]
    fail::fail_point!("lease-file/before-open-temp");
    let result = init_place(base, &temp, name, kind, modes, seed, made_after);
    // A directory swapped in for the temporary is not ours to remove, even empty.
    let swapped = matches!(&result, Err(FsError::Io { op, .. }) if *op == SWAPPED_TEMP);
    if !swapped && !matches!(result, Ok(Some(_))) {
        // Removes an empty directory only, and only an entry of the base directory.
        let _ = base.dir().rmdir(&temp);
    }
    if matches!(result, Ok(None)) {
        // Whatever is at the path now is looked at by the next open.
        if let Ok(meta) = base.dir().stat(name)
            && meta.kind != EntryKind::Dir
        {
            not_a_directory(base, name, io::Error::from(io::ErrorKind::NotADirectory))?;
        }
    }
    let _ = path;
    result
}

/// A private temporary name to build the lock directory `name` in:
/// `.lease-init.<16 hex: a hash of name>.<16 hex: a nonce>`, so that it never collides with a
/// key's name, nor with another creator's, fits whatever the key's length, and still tells a
/// pruner which name may be being created ([`creating`]; a hash collision only makes a pruner
/// leave a key in place).
fn init_temp_name(name: &OsStr) -> std::ffi::OsString {
    format!(
        "{INIT_PREFIX}{}.{:016x}",
        init_name_hash(name),
        uuid::Uuid::new_v4().as_u64_pair().0
    )
    .into()
}

/// The prefix of every temporary lock directory's name.
const INIT_PREFIX: &str = ".lease-init.";

/// The part of a temporary lock directory's name that stands for the name being created.
fn init_name_hash(name: &OsStr) -> String {
    format!("{:016x}", crate::encode::fnv(name.as_encoded_bytes()))
}

/// The longest lock name, in bytes (`NAME_MAX` on Linux file systems).
pub(crate) const MAX_NAME_BYTES: usize = 255;

/// Refuses a lock name the file system cannot hold, up front, naming the limit.
pub(crate) fn check_name(name: &OsStr) -> Result<(), FsError> {
    let len = name.as_encoded_bytes().len();
    if len > MAX_NAME_BYTES {
        return Err(FsError::InvalidOption {
            option: "path",
            reason: format!(
                "the lock name is {len} bytes; the file system allows at most {MAX_NAME_BYTES}"
            ),
        });
    }
    let separator = |b: &u8| *b == b'/' || (cfg!(windows) && *b == b'\\');
    if len == 0 || name == "." || name == ".." || name.as_encoded_bytes().iter().any(separator) {
        return Err(FsError::InvalidOption {
            option: "path",
            reason: format!("{} is not a lock name", name.to_string_lossy()),
        });
    }
    Ok(())
}

/// The operation an error names when the temporary directory was swapped for an older one:
/// then it is left where it is (not removed, even if empty).
const SWAPPED_TEMP: &str = "check the temporary lock directory";

/// Opens the temporary directory `temp` just made (`mkdirat` at or after the coarse wall time
/// `made_after`), checking with `fstat` that it is the one this call made, not something
/// another user swapped in under its name, and gives it the configured mode exactly in a shared
/// directory.
///
/// `mkdirat` returns no descriptor, so the directory's identity is checked by what no other
/// user can forge: it is this user's, and it was born (`statx` birth time) no earlier than
/// `made_after`, the kernel's coarse clock read before the `mkdirat`. Another user can only swap
/// in a directory that already existed (they cannot create one owned by this user), born
/// before this call; the check's resolution is the coarse clock's tick (a few milliseconds), so
/// only a directory this user made within that tick before (its own creations of that instant,
/// which a user who can write the store can rename anyway) is not told apart. Where the file
/// system records no birth time (NFS), a directory owned by this user is accepted, as before,
/// but never `fchmod`ed: the configured mode is then given less the umask.
fn open_temp(
    base: &Base,
    temp: &OsStr,
    modes: Modes,
    made_after: Option<std::time::SystemTime>,
) -> Result<Dir, FsError> {
    let temp_path = base.join(temp);
    let dir = base
        .dir()
        .open_dir(temp)
        .map_err(|e| io_error("open lock directory", &temp_path, e))?;
    let meta = dir
        .metadata()
        .map_err(|e| io_error("fstat", &temp_path, e))?;
    if !at::owned_by_me(&meta) {
        return Err(FsError::Hostile {
            path: temp_path,
            reason: "the temporary directory was replaced by another user's".into(),
        });
    }
    let born = meta.created().ok();
    if let (Some(born), Some(after)) = (born, made_after)
        && born < after
    {
        tracing::warn!(path = %temp_path.display(), "temporary lock directory swapped for an older one");
        return Err(FsError::Io {
            op: SWAPPED_TEMP,
            path: temp_path,
            transient: true,
            source: io::Error::other(
                "the temporary directory was replaced by an older directory (not created here)",
            ),
        });
    }
    // In a directory explicitly shared, the configured modes are given exactly (through the
    // descriptor, and only to a directory proven to be the one just made), so that the group
    // can use the lock whatever the creator's umask; elsewhere the umask applies.
    if base.shared() && born.is_some() && made_after.is_some() {
        dir.set_mode(modes.dir)
            .map_err(|e| io_error("chmod", &temp_path, e))?;
    }
    Ok(dir)
}

/// Writes the first entry into the temporary directory `temp` and renames it to `name`: the
/// first entry's device and inode when this call created the lock directory, `None` when one
/// (or a file) was there first.
fn init_place(
    base: &Base,
    temp: &OsStr,
    name: &OsStr,
    kind: Kind,
    modes: Modes,
    seed: &dyn Fn() -> u64,
    made_after: Option<std::time::SystemTime>,
) -> Result<Option<(u64, u64)>, FsError> {
    let temp_path = base.join(temp);
    let dir = open_temp(base, temp, modes, made_after)?;
    let first = match kind {
        // Read now that the temporary directory exists, never earlier: see `creating`.
        Kind::Lease => State::Free(seed()).name(),
        Kind::Value => Value {
            fence: 0,
            seq: 0,
            nonce: None,
        }
        .name(),
    };
    // The state entry carries the holder's description, owner token included: only its owner
    // reads it, unless the directory is shared.
    let first_mode = match kind {
        Kind::Lease if !base.shared() => modes.file & 0o600,
        _ => modes.file,
    };
    let created = dir
        .create_new(OsStr::new(&first), first_mode)
        .map_err(|e| io_error("create", &temp_path.join(&first), e))?;
    if base.shared() {
        at::set_mode(&created, first_mode)
            .map_err(|e| io_error("chmod", &temp_path.join(&first), e))?;
    }
    let entry = created
        .metadata()
        .map(|m| identity(&m).0)
        .map_err(|e| io_error("fstat", &temp_path.join(&first), e))?;
    drop(created);
    // Windows: the `cas` lock file is made with the directory, so that no swap has to.
    #[cfg(windows)]
    drop(
        dir.open_or_create(OsStr::new(CAS))
            .map_err(|e| io_error("create", &temp_path.join(CAS), e))?,
    );
    let path = base.join(name);
    #[cfg(feature = "failpoints")]
    fail::fail_point!("lease-file/before-create");
    match base.dir().rename(temp, name) {
        Ok(()) => {
            tracing::debug!(path = %path.display(), "lock directory created");
            if modes.fsync {
                base.dir()
                    .sync()
                    .map_err(|e| io_error("fsync directory", base.path(), e))?;
            }
            Ok(Some(entry))
        }
        Err(e) => {
            let _ = dir.unlink(OsStr::new(&first));
            #[cfg(windows)]
            let _ = dir.unlink(OsStr::new(CAS));
            if placed_first(&e) {
                // Someone else created it first, or a file sits there (looked at by the caller).
                Ok(None)
            } else {
                Err(io_error("rename lock directory into place", &path, e))
            }
        }
    }
}

/// Whether a rename of a new lock directory into place failed because something is there
/// already: a non-empty directory, or a file (Unix: `EEXIST`, `ENOTEMPTY`, `ENOTDIR`,
/// `EISDIR`; Windows: "already exists", or access denied, which `MoveFileExW` reports for an
/// existing directory as target).
fn placed_first(e: &io::Error) -> bool {
    use io::ErrorKind as K;
    matches!(
        e.kind(),
        K::AlreadyExists | K::DirectoryNotEmpty | K::NotADirectory | K::IsADirectory
    ) || (cfg!(windows) && e.kind() == K::PermissionDenied)
}

/// A directory's or file's identity and whether this user alone can have written it: device
/// and inode, and (for a directory) owned by the effective user and writable by nobody else
/// (Unix). On Windows std gives no file index and no owner: `(0, creation time)` and `true`
/// (the store directory's access control list keeps other users out there).
#[cfg(unix)]
fn identity(meta: &std::fs::Metadata) -> ((u64, u64), bool) {
    use std::os::unix::fs::MetadataExt;
    (
        (meta.dev(), meta.ino()),
        meta.uid() == nix::unistd::geteuid().as_raw() && meta.mode() & 0o022 == 0,
    )
}

/// See the Unix one.
#[cfg(windows)]
fn identity(meta: &std::fs::Metadata) -> ((u64, u64), bool) {
    use std::os::windows::fs::MetadataExt;
    ((0, meta.creation_time()), true)
}

/// Windows: the file in every lock directory whose `LockFileEx` lock serializes the swaps
/// ([`KeyDir::swap`]). Never read, never a state name.
#[cfg(windows)]
const CAS: &str = "cas";
/// Not a file anywhere else (a `cas` planted on Unix is an unknown name, ignored).
#[cfg(not(windows))]
const CAS: &str = "";

/// The `cas` lock held ([`KeyDir::cas`]): unlocked explicitly when dropped, since a lock left
/// to the close is freed "depending upon available system resources" (UnlockFileEx), then
/// closed (under Wine, whose `UnlockFileEx` refuses std's whole-file range, the close frees
/// it).
#[cfg(windows)]
#[derive(Debug)]
struct CasLock {
    file: File,
    /// This process's turn at the directory's `cas` ([`CasTurn`]), given back after the file
    /// is unlocked and closed (fields drop in order).
    _turn: CasTurn,
}

#[cfg(windows)]
impl Drop for CasLock {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// A thread's turn at the `cas` lock of one lock directory, within this process: the paths
/// whose turn is taken are a process-wide list, so it holds only the directories in use at
/// this moment (a path leaves it when its turn is given back).
#[cfg(windows)]
#[derive(Debug)]
struct CasTurn(PathBuf);

/// The lock directories whose `cas` turn a thread of this process has ([`CasTurn`]), and the
/// condition the others wait on.
#[cfg(windows)]
static CAS_TURNS: (Mutex<Vec<PathBuf>>, std::sync::Condvar) =
    (Mutex::new(Vec::new()), std::sync::Condvar::new());

#[cfg(windows)]
impl CasTurn {
    /// Waits until no other thread of this process has the turn at `path`'s `cas`, and takes it.
    fn take(path: &Path) -> Self {
        let (turns, given_back) = &CAS_TURNS;
        let mut taken = turns.lock().unwrap_or_else(PoisonError::into_inner);
        while taken.iter().any(|p| p == path) {
            taken = given_back
                .wait(taken)
                .unwrap_or_else(PoisonError::into_inner);
        }
        taken.push(path.to_owned());
        Self(path.to_owned())
    }
}

#[cfg(windows)]
impl Drop for CasTurn {
    fn drop(&mut self) {
        let (turns, given_back) = &CAS_TURNS;
        let mut taken = turns.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = taken.iter().position(|p| *p == self.0) {
            taken.swap_remove(i);
        }
        drop(taken);
        given_back.notify_all();
    }
}

/// Explains what sits at a lock path that the directory open failed on with `error`: another
/// protocol's lock file (refused, never touched), or something hostile.
///
/// Another protocol's lock comes and goes: a Go `PIDLock` is removed on release and rewritten in
/// place (truncated, then written) on every heartbeat. So its type, its size and its bytes are
/// all taken from one descriptor, an empty read counts as a file being written, and `Ok(())`
/// says the path changed under the look (gone, or a directory now): the caller looks again.
fn not_a_directory(base: &Base, name: &OsStr, error: io::Error) -> Result<(), FsError> {
    let path = base.join(name);
    let path = path.as_path();
    if error.kind() != io::ErrorKind::NotADirectory && !at::is_link(&error) {
        return Err(io_error("open lock directory", path, error));
    }
    let kind = match base.dir().stat(name) {
        Ok(meta) => meta.kind,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error("stat lock path", path, e)),
    };
    match kind {
        EntryKind::Symlink => {
            return Err(FsError::Hostile {
                path: path.to_owned(),
                reason: "it is a symbolic link; links are never followed".into(),
            });
        }
        EntryKind::Dir => return Ok(()),
        EntryKind::Other => {
            return Err(FsError::Hostile {
                path: path.to_owned(),
                reason: "it is neither a lock directory nor a regular file".into(),
            });
        }
        EntryKind::File => {}
    }
    let file = match base.dir().open_read(name) {
        Ok(file) => file,
        // Removed, or replaced by a link, a FIFO or a socket since the stat: look again.
        Err(e)
            if e.kind() == io::ErrorKind::NotFound
                || e.kind() == io::ErrorKind::IsADirectory
                || at::is_link(&e)
                || at::is_fifo(&e) =>
        {
            return Ok(());
        }
        Err(e) => return Err(io_error("open", path, e)),
    };
    let meta = file.metadata().map_err(|e| io_error("fstat", path, e))?;
    if !meta.is_file() {
        return Ok(());
    }
    let cap = MAX_RECORD_BYTES.max(crate::MAX_FENCED_FILE_BYTES);
    if meta.len() > cap as u64 {
        return Err(crate::foreign::unknown(path, meta.len()));
    }
    let bytes = read_capped(&file, path)?;
    // The modification time after the read: no older than any write the read saw.
    let modified = file.metadata().and_then(|m| m.modified()).ok();
    Err(crate::foreign::classify(path, &bytes, modified))
}

/// The store's keys: lock directory names in the store's directory (no hidden ones), listed
/// through its descriptor.
pub(crate) fn entry_names(base: &Base) -> Result<Vec<std::ffi::OsString>, FsError> {
    let mut names = store_listing(base)?;
    names.retain(|name| !name.as_encoded_bytes().starts_with(b"."));
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_only_canonical_names_parse() {
        let held = State::Held(Held {
            generation: 7,
            seq: 3,
            token: 0xdead_beef,
            kernel: Some(1),
            scale: None,
            deadline_ns: 12,
            duration_ns: 3_000_000_000,
        });
        for state in [State::Free(0), State::Free(u64::MAX), held] {
            assert_eq!(State::parse(&state.name()), Some(state.clone()));
        }
        for junk in [
            "free.007",
            "free.",
            "free.-1",
            "free.18446744073709551616",
            "held.0.0.00000000deadbeef.n.n.0.0",
            "held.1.0.00000000DEADBEEF.n.n.0.0",
            "held.1.0.00000000deadbeef.n.n.0.0.9",
            "held.1.0.deadbeef.n.n.0.0",
            "lock",
        ] {
            assert_eq!(State::parse(junk), None, "{junk}");
        }
        let value = Value {
            fence: 4,
            seq: 9,
            nonce: Some(77),
        };
        assert_eq!(Value::parse(&value.name()), Some(value));
        assert_eq!(Value::parse("value.0.0.none").map(|v| v.nonce), Some(None));
        assert_eq!(Value::parse("value.01.0.none"), None);
    }
}
