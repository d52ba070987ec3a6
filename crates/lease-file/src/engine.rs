//! The one lease protocol both faces run: [`DirectoryStore`](crate::DirectoryStore) calls it
//! per operation, [`FileLock`](crate::FileLock) from its caller and its heartbeat thread.
//!
//! Every decision is a [`KeyDir::swap`] from the state entry name it was made on, so it takes
//! effect only if nothing changed since it was observed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use lease_core::Clock;

use crate::encode::fnv;
use crate::error::FsError;
use crate::record::LeaseFileRecord;
use crate::state::{Found, Held, KeyDir, State};

/// Where time comes from: an injected clock, or the operating system's (whose monotonic clock
/// other processes on this host share, read as raw `CLOCK_MONOTONIC`).
#[derive(Clone, Debug)]
pub(crate) struct Timebase {
    clock: Arc<dyn Clock>,
    system: bool,
    /// One reading of every clock, taken once: the fixed mapping from monotonic readings to
    /// wall times for display, so that a lease's displayed expiry changes only when the lease
    /// does (listers such as the fleet compare it between listings).
    anchor: Now,
}

/// One reading of every clock the protocol uses.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Now {
    /// The caller's monotonic clock: holder deadlines and observations.
    pub(crate) mono: Instant,
    /// Wall time: for display only.
    pub(crate) wall: SystemTime,
    /// The shared monotonic scale and the reading on it, if this clock has one.
    pub(crate) shared: Option<(u64, u64)>,
}

impl Timebase {
    /// The operating system's clocks.
    pub(crate) fn system() -> Self {
        let clock: Arc<dyn Clock> = Arc::new(lease_core::SystemClock);
        let anchor = read(clock.as_ref(), true);
        Self {
            clock,
            system: true,
            anchor,
        }
    }

    /// An injected clock (shared with other processes only through
    /// [`Clock::shared_monotonic`]).
    pub(crate) fn injected(clock: Arc<dyn Clock>) -> Self {
        let anchor = read(clock.as_ref(), false);
        Self {
            clock,
            system: false,
            anchor,
        }
    }

    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Reads the clocks.
    pub(crate) fn now(&self) -> Now {
        read(self.clock.as_ref(), self.system)
    }

    /// The wall time at which `held` ends, for display: stable for one state (it moves only
    /// when the state's name does). On a shared scale, from its deadline; otherwise from when
    /// this process first saw the name.
    pub(crate) fn display_expiry(
        &self,
        path: &Path,
        name: &str,
        held: &Held,
        seen: &Observations,
    ) -> SystemTime {
        let anchor = &self.anchor;
        let shift = |base: SystemTime, ahead: u64, behind: u64| {
            if ahead >= behind {
                base.checked_add(Duration::from_nanos(ahead - behind))
            } else {
                base.checked_sub(Duration::from_nanos(behind - ahead))
            }
            .unwrap_or(base)
        };
        match anchor.shared {
            Some((scale, at)) if held.scale == Some(scale) => {
                shift(anchor.wall, held.deadline_ns, at)
            }
            _ => {
                let duration = Duration::from_nanos(held.duration_ns);
                let first = seen.first_seen(path, name, duration, self.clock.monotonic());
                let end = first + Duration::from_nanos(held.duration_ns);
                if end >= anchor.mono {
                    shift(anchor.wall, nanos(end - anchor.mono), 0)
                } else {
                    shift(anchor.wall, 0, nanos(anchor.mono - end))
                }
            }
        }
    }
}

/// Reads the clocks: the monotonic instant first, so that every deadline computed from the
/// shared reading ends no earlier than the one computed from the instant.
fn read(clock: &dyn Clock, system: bool) -> Now {
    let mono = clock.monotonic();
    let shared = if system {
        system_shared()
    } else {
        clock
            .shared_monotonic()
            .map(|(scale, at)| (scale, nanos(at)))
    };
    Now {
        mono,
        wall: clock.now(),
        shared,
    }
}

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `at` in nanoseconds since the Unix epoch, as records show wall times (0 before the epoch).
pub(crate) fn wall_ns(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH).map_or(0, nanos)
}

/// This host's shared monotonic scale: `CLOCK_MONOTONIC` of this boot, in this time namespace.
///
/// Not `CLOCK_BOOTTIME`, and safe beside a holder whose trust runs on
/// [`SystemClock`](lease_core::SystemClock) (which counts time suspended): every value published
/// on this scale is a reading of `CLOCK_MONOTONIC` taken *after* the holder's reading of its own
/// clock, plus the lease's duration (never a conversion of an `Instant`), and the holder's clock
/// advances at least as much as `CLOCK_MONOTONIC` over any interval. So the holder stops
/// trusting its deadline no later than a contender here sees the published one pass; across a
/// suspend the holder stops earlier (by the time slept) and the contender, on a stopped
/// `CLOCK_MONOTONIC`, waits longer: conservative on both sides. A boot-time scale instead would
/// need the holder's trust on the boot clock too, and every process on one host to read it
/// alike (see docs/correctness.md, *Suspend*).
fn system_shared() -> Option<(u64, u64)> {
    static SCALE: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let scale = (*SCALE.get_or_init(|| {
        let instance = crate::sys::host_instance()?;
        Some(fnv(format!("monotonic/{instance}").as_bytes()))
    }))?;
    Some((scale, crate::sys::monotonic_ns()?))
}

/// What a contender has seen of each lock, to time expiry on its own monotonic clock when the
/// holder's clock is not shared with it.
///
/// Bounded without ever stalling expiry: at most [`OBSERVED_PATHS`] paths are tracked, and a
/// path met while the memory is full is not tracked yet (it is judged as first seen now, so it
/// is refused, never taken over early) rather than pushing out a path whose wait is under way.
/// A tracked path leaves the memory when this process takes the lease over ([`forget`](Self::forget),
/// which is what lets the next paths in), or when it was not looked at for 16 of its durations
/// (abandoned: the caller no longer wants it), and only then. A process cycling through more keys
/// than the bound, all held by stuck holders on other clocks, so takes them over in batches of at
/// most the bound per duration, instead of clearing the memory and starting every wait again
/// (which stalled expiry forever).
#[derive(Debug, Default)]
pub(crate) struct Observations(Mutex<HashMap<PathBuf, Observed>>);

/// The most paths [`Observations`] tracks at once.
pub(crate) const OBSERVED_PATHS: usize = 4096;

/// One tracked path: the state entry name seen, when first seen, when last looked at, and the
/// duration that name grants.
#[derive(Debug)]
struct Observed {
    name: String,
    first: Instant,
    last: Instant,
    duration: Duration,
}

impl Observations {
    /// When this exact state entry name (granting `duration`) was first seen at `path` (now, if
    /// it is new, or if the memory is full of paths still wanted).
    pub(crate) fn first_seen(
        &self,
        path: &Path,
        name: &str,
        duration: Duration,
        now: Instant,
    ) -> Instant {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = map.get_mut(path) {
            if entry.name != name {
                *entry = Observed {
                    name: name.to_owned(),
                    first: now,
                    last: now,
                    duration,
                };
            }
            entry.last = entry.last.max(now);
            return entry.first;
        }
        if map.len() >= OBSERVED_PATHS {
            map.retain(|_, seen| {
                now.saturating_duration_since(seen.last) < seen.duration.saturating_mul(16)
            });
            if map.len() >= OBSERVED_PATHS {
                return now;
            }
        }
        map.insert(
            path.to_owned(),
            Observed {
                name: name.to_owned(),
                first: now,
                last: now,
                duration,
            },
        );
        now
    }

    /// Stops tracking `path`: this process took its lease over, so its wait is over.
    pub(crate) fn forget(&self, path: &Path) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !map.is_empty() {
            map.remove(path);
        }
    }

    /// How many paths are tracked.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl Now {
    /// Whether `held`'s deadline is on this reading's shared scale (same host and boot, or the
    /// same test clock), so the two compare directly.
    pub(crate) fn shares_scale(&self, held: &Held) -> bool {
        held.scale.is_some() && held.scale == self.shared.map(|(scale, _)| scale)
    }

    /// Whether `held`'s deadline has passed on the shared scale (never when it is not shared).
    pub(crate) fn past_deadline(&self, held: &Held) -> bool {
        self.shares_scale(held) && self.shared.is_some_and(|(_, at)| at >= held.deadline_ns)
    }
}

/// Whether `held`'s holder has exited: `kd` holds the kernel lock the holder took on this very
/// directory (same device and inode), on this host (same scale). The kernel lock speaks for
/// nothing else: never across mounts or hosts, never for a holder that did not take it.
pub(crate) fn holder_died(kd: &KeyDir, held: &Held, now: &Now) -> bool {
    kd.locked() && now.shares_scale(held) && held.kernel == Some(kd.id())
}

/// Whether the holder of `held` may be taken over now, and why.
pub(crate) fn expired(
    kd: &KeyDir,
    found_name: &str,
    held: &Held,
    now: &Now,
    seen: &Observations,
) -> Option<&'static str> {
    if holder_died(kd, held, now) {
        return Some("its process is gone (its kernel lock was free)");
    }
    if now.shares_scale(held) {
        return now.past_deadline(held).then_some("its deadline passed");
    }
    let duration = Duration::from_nanos(held.duration_ns);
    let first = seen.first_seen(kd.path(), found_name, duration, now.mono);
    let waited = now.mono.saturating_duration_since(first);
    (waited >= duration).then_some("it stood still for its whole duration")
}

/// The description of a new tenure held by this process, acquired at wall time `at` for
/// `duration` (its generation is filled in by [`try_acquire`]; the store adds its key).
pub(crate) fn holder_record(
    mode: crate::LockMode,
    token: &str,
    label: Option<String>,
    at: SystemTime,
    duration: Duration,
) -> LeaseFileRecord {
    let me = crate::ident::current();
    let wall = wall_ns(at);
    LeaseFileRecord {
        version: crate::record::SCHEMA_VERSION,
        owner: Some(token.to_owned()),
        label,
        pid: me.pid,
        host: me.host,
        pid_ns: me.pid_ns,
        boot_id: me.boot_id,
        start_time: me.start_time,
        heartbeat: 0,
        written_at_ns: wall,
        acquired_at_ns: wall,
        expires_at_ns: wall.saturating_add(nanos(duration)),
        generation: 0,
        tenure: mode == crate::LockMode::Kernel,
        protocol: Some(mode.as_str().to_owned()),
        partition: None,
        sort: None,
        value: None,
    }
}

/// What an acquisition attempt asks for.
#[derive(Debug)]
pub(crate) struct Claim<'a> {
    pub(crate) token: &'a str,
    pub(crate) duration: Duration,
    /// Take the kernel lock (kernel mode).
    pub(crate) kernel: bool,
    /// The diagnostic record to describe the new state with (generation filled in here).
    pub(crate) record: LeaseFileRecord,
}

/// The outcome of one acquisition attempt.
// Returned once per attempt and matched at once, never stored: boxing the larger variant would
// only add an allocation to every refusal.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Attempt {
    /// Acquired: the state entry is `name`; trust runs from `now.mono`.
    Won { held: Held, name: String, now: Now },
    /// Held by someone else (or by this token, a second contender).
    Busy {
        found: Found,
        holder: Option<LeaseFileRecord>,
    },
}

/// One attempt to acquire through `kd`; a state that changes under the attempt is looked at
/// again (a few times), never acted on from memory.
///
/// # Errors
/// I/O errors, hostile or missing state entries, an exhausted generation.
pub(crate) fn try_acquire(
    kd: &mut KeyDir,
    claim: &Claim<'_>,
    time: &Timebase,
    seen: &Observations,
) -> Result<Attempt, FsError> {
    let token = fnv(claim.token.as_bytes());
    for _ in 0..8 {
        if claim.kernel {
            kd.try_lock()?;
        }
        let found = kd.state()?;
        let now = time.now();
        if let State::Held(held) = &found.state {
            let stale = expired(kd, &found.name, held, &now, seen);
            // Live: held (by this very token too: that is a second contender, not a renewal).
            if stale.is_none() {
                return Ok(Attempt::Busy {
                    holder: describe_tenure(kd, &found),
                    found,
                });
            }
            tracing::info!(
                path = %kd.path().display(),
                generation = held.generation,
                why = stale.unwrap_or_default(),
                "taking over a lease"
            );
        }
        let generation =
            found
                .state
                .generation()
                .checked_add(1)
                .ok_or_else(|| FsError::Hostile {
                    path: kd.path().to_owned(),
                    reason: "the fencing generation is exhausted".into(),
                })?;
        let held = Held {
            generation,
            seq: 0,
            token,
            kernel: kd.locked().then(|| kd.id()),
            scale: now.shared.map(|(scale, _)| scale),
            deadline_ns: now
                .shared
                .map_or(0, |(_, at)| at.saturating_add(nanos(claim.duration))),
            duration_ns: nanos(claim.duration),
        };
        let name = State::Held(held.clone()).name();
        if kd.swap(&found.name, &name)? {
            let mut record = claim.record.clone();
            record.generation = generation;
            kd.describe(&name, found.ino, &record);
            seen.forget(kd.path());
            if matches!(found.state, State::Held(_)) {
                lease_core::metrics::takeover(crate::BACKEND);
            }
            tracing::debug!(path = %kd.path().display(), generation, "lease acquired");
            return Ok(Attempt::Won { held, name, now });
        }
    }
    Err(FsError::Io {
        op: "acquire",
        path: kd.path().to_owned(),
        transient: true,
        source: std::io::Error::other("the lease state kept changing under the attempt"),
    })
}

/// The description of the tenure `found` names. A heartbeat may rename the entry between the
/// listing and the read: then the tenure's next name is read, once.
pub(crate) fn describe_tenure(kd: &KeyDir, found: &Found) -> Option<LeaseFileRecord> {
    kd.description(&found.name).or_else(|| {
        let again = kd.state().ok()?;
        let same_tenure = match (&again.state, &found.state) {
            (State::Held(a), State::Held(b)) => a.generation == b.generation && a.token == b.token,
            _ => false,
        };
        if same_tenure {
            kd.description(&again.name)
        } else {
            None
        }
    })
}

/// How a renewal or release found the lease gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    /// Released by its holder (this generation, free).
    Released,
    /// Another tenure holds or held it since.
    TakenOver,
    /// Still this tenure by name, but its deadline passed.
    Expired,
}

/// Renews the tenure whose state entry is `name`: one rename to the next renewal. `Ok(None)`:
/// the state moved on; the caller reads it to say how.
///
/// # Errors
/// I/O errors.
pub(crate) fn renew(
    kd: &mut KeyDir,
    name: &str,
    held: &Held,
    duration: Duration,
    kernel: bool,
    time: &Timebase,
) -> Result<Option<(Held, String, Now)>, FsError> {
    if kernel && held.kernel.is_none() {
        // A takeover from a hung holder could not get the kernel lock; once that holder lets go,
        // say so, so that contenders may again notice this process's death at once.
        kd.try_lock()?;
    }
    let now = time.now();
    let next = Held {
        seq: held.seq.saturating_add(1),
        kernel: held.kernel.or_else(|| kd.locked().then(|| kd.id())),
        scale: now.shared.map(|(scale, _)| scale),
        deadline_ns: now
            .shared
            .map_or(0, |(_, at)| at.saturating_add(nanos(duration))),
        duration_ns: nanos(duration),
        ..held.clone()
    };
    let next_name = State::Held(next.clone()).name();
    Ok(kd.swap(name, &next_name)?.then_some((next, next_name, now)))
}

/// Why the tenure `(generation, token)` no longer matches `found`, or `None` if it does.
pub(crate) fn mismatch(found: &Found, generation: u64, token: &str) -> Option<Gone> {
    match &found.state {
        State::Held(h) if h.generation == generation && h.token == fnv(token.as_bytes()) => None,
        State::Free(g) if *g == generation => Some(Gone::Released),
        _ => Some(Gone::TakenOver),
    }
}

/// How long a tenure must have lasted (since its acquisition or its last renewal; a renewed
/// one always qualifies) for its release to erase its description: the truncation and the
/// next description's fresh block then cost well under a hundredth of the tenure.
pub(crate) const ERASE_AFTER: Duration = Duration::from_millis(10);

/// Releases the tenure `held` whose state entry is `name` (listed as inode `ino`, if it was
/// listed): one rename to `free.<generation>`. `Ok(false)`: the state had moved on.
///
/// Before the rename, if the tenure lasted [`ERASE_AFTER`] and while the state is still this
/// tenure's, its description is erased
/// ([`KeyDir::erase_description`]: one `ftruncate` of the entry kept open), so that a free key
/// costs no data block. Only while no one else can have taken the tenure over: its deadline
/// on the shared scale has not passed, and in kernel mode this handle holds the kernel lock
/// the tenure names (so no contender's takeover "at once" can have happened; a forked child's
/// release is refused before it gets here, so this costs no `getpid`). After the
/// rename it would be too late: a contender may already have renamed the entry again and
/// written its own description, which the truncation would wipe. A holder that pauses past its
/// deadline between the check and the truncation can still wipe its successor's description
/// (a diagnostic only: the successor is then shown as "a holder still writing its
/// description"), as a paused holder's in-flight writes can reach any resource; nothing the
/// protocol decides reads a description.
///
/// # Errors
/// I/O errors.
pub(crate) fn release(
    kd: &mut KeyDir,
    name: &str,
    held: &Held,
    ino: Option<u64>,
    time: &Timebase,
) -> Result<bool, FsError> {
    let generation = held.generation;
    let now = time.now();
    let still_ours = now.shares_scale(held)
        && !now.past_deadline(held)
        && (held.kernel.is_none() || (held.kernel == Some(kd.id()) && kd.lock_taken()));
    // A tenure released right after its acquisition is a hot key, likely taken again at once:
    // emptying its entry would cost the truncation and then a fresh block for the next
    // description, a large share of such a cycle, to free a block needed again at once.
    let lasted = held.seq > 0
        || now.shared.is_some_and(|(_, at)| {
            at.saturating_sub(held.deadline_ns.saturating_sub(held.duration_ns))
                >= nanos(ERASE_AFTER)
        });
    if still_ours && lasted {
        kd.erase_description(ino);
    }
    let released = kd.swap(name, &State::Free(generation).name())?;
    kd.unlock();
    if released {
        tracing::debug!(path = %kd.path().display(), generation, "lease released");
    }
    Ok(released)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process cycling through more keys than the observation memory holds, all held by
    /// stuck holders on other clocks, looks at each once per round, a duration apart, and takes
    /// over (then [`Observations::forget`]s) each key whose name stood still for its duration,
    /// as [`try_acquire`] does. Every key is taken over within a few rounds, none before its
    /// duration passed since this process first saw it. Clearing the memory when full (the old
    /// rule) restarted every wait and took over nothing, ever.
    #[test]
    fn cycling_through_more_keys_than_the_memory_holds_never_stalls_expiry() {
        let seen = Observations::default();
        let duration = Duration::from_secs(1);
        let keys = OBSERVED_PATHS + OBSERVED_PATHS / 4;
        let paths: Vec<PathBuf> = (0..keys)
            .map(|i| PathBuf::from(format!("/store/k{i}")))
            .collect();
        let start = Instant::now();
        let mut first_look: Vec<Option<Instant>> = vec![None; keys];
        let mut taken = vec![false; keys];
        let mut rounds = 0;
        while taken.iter().any(|t| !t) {
            assert!(
                rounds < 4,
                "expiry stalled: {} of {keys} keys never taken over after {rounds} rounds",
                taken.iter().filter(|t| !**t).count()
            );
            let now = start + (duration + Duration::from_millis(1)) * rounds;
            for (i, path) in paths.iter().enumerate() {
                if taken[i] {
                    continue;
                }
                first_look[i].get_or_insert(now);
                let first = seen.first_seen(path, "held.1.0.x", duration, now);
                if now.saturating_duration_since(first) >= duration {
                    let seen_at = first_look[i].unwrap_or(now);
                    assert!(
                        now.saturating_duration_since(seen_at) >= duration,
                        "key {i} taken over early"
                    );
                    taken[i] = true;
                    seen.forget(path);
                }
            }
            rounds += 1;
        }
        assert!(rounds <= 3, "took {rounds} rounds");
        assert_eq!(seen.len(), 0, "every key taken over is forgotten");
    }

    /// Paths nobody looks at any more (for 16 of their durations) make room; a path still
    /// looked at keeps its first sighting even when the memory is full.
    #[test]
    fn abandoned_paths_make_room_and_wanted_ones_keep_their_wait() {
        let seen = Observations::default();
        let duration = Duration::from_millis(10);
        let start = Instant::now();
        for i in 0..OBSERVED_PATHS {
            seen.first_seen(&PathBuf::from(format!("/a/{i}")), "n", duration, start);
        }
        let wanted = PathBuf::from("/a/0");
        let full = start + Duration::from_millis(5);
        assert_eq!(
            seen.first_seen(&PathBuf::from("/b"), "n", duration, full),
            full
        );
        assert_eq!(seen.first_seen(&wanted, "n", duration, full), start);
        let later = start + duration * 17;
        seen.first_seen(&wanted, "n", duration, later - duration);
        assert_eq!(
            seen.first_seen(&PathBuf::from("/b"), "n", duration, later),
            later
        );
        assert_eq!(
            seen.len(),
            2,
            "the abandoned paths went, the wanted one and /b stay"
        );
        assert_eq!(seen.first_seen(&wanted, "n", duration, later), start);
    }
}
