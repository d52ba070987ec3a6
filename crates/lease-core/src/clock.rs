//! Wall and monotonic time, injected.
//!
//! Every backend, the keeper and the waiting helpers read time only through a [`Clock`], so tests
//! replace it with a [`ManualClock`] and advance time instead of sleeping.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, TryLockError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime};

use crate::BoxFuture;
use crate::sync::lock;

/// A source of wall time, monotonic time and sleeps.
///
/// * [`Clock::now`] is wall time, the only kind a shared store can compare across hosts. It may
///   jump (NTP steps, an operator); backends document how much skew they tolerate.
/// * [`Clock::monotonic`] never goes backwards; holders measure their deadlines with it. It must
///   keep running while the host is suspended (a laptop's lid, a paused VM): other hosts, and
///   the stores that judge expiry on their wall clocks, do not stop for this one, so a holder's
///   deadline must pass across a suspend too. [`SystemClock`] counts suspended time on Linux.
///   Its `Instant`s are therefore not on the scale of [`Instant::now`] after a suspend: compare
///   and subtract them only with readings of the same clock.
/// * [`Clock::sleep`] waits on this clock's monotonic time. It needs no async runtime.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Wall-clock time.
    fn now(&self) -> SystemTime;
    /// Monotonic time.
    fn monotonic(&self) -> Instant;
    /// A future that completes once `duration` of this clock's monotonic time has passed.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;

    /// This clock's monotonic time on a scale that other clocks (in other processes too) may
    /// share, as `(scale, time since the scale's origin)`: two readings with the same scale are
    /// directly comparable, whoever took them. `None` (the default) when no other clock can
    /// share this one's scale; a backend then times expiry by observation instead.
    ///
    /// [`ManualClock`] answers with a scale of its own, so every store reading one manual clock
    /// agrees on it. (The file backend reads the host's `CLOCK_MONOTONIC` itself when it runs
    /// on the system clock; lease-core has no access to it.)
    ///
    /// ```
    /// use lease_core::{Clock, ManualClock, SystemClock};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let (scale, before) = clock.shared_monotonic().unwrap();
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(clock.shared_monotonic(), Some((scale, before + Duration::from_secs(1))));
    /// assert_ne!(ManualClock::new().shared_monotonic().unwrap().0, scale);
    /// assert_eq!(SystemClock.shared_monotonic(), None);
    /// ```
    fn shared_monotonic(&self) -> Option<(u64, Duration)> {
        None
    }
}

/// The operating system's clocks. Sleeps are served by one shared timer thread, so they work
/// inside any executor, or none.
///
/// Monotonic time counts time the host spent suspended: on Linux an [`Instant`] is the
/// process's first reading of std's clock plus the time `CLOCK_BOOTTIME` advanced since then
/// (`CLOCK_MONOTONIC`, which std's `Instant::now` reads, stops while the host sleeps; boot
/// time does not); on macOS and FreeBSD the same with `CLOCK_MONOTONIC`, which counts time
/// asleep there. So a lease's deadline, measured on this clock, passes while the host sleeps,
/// as it does for every other host. Elsewhere it is std's `Instant::now`: on Windows that is
/// `QueryPerformanceCounter`, which counts time asleep (rust-lang/rust#79462 quotes Microsoft:
/// "including the time when the machine was in a sleep state such as standby, hibernate, or
/// connected standby"); other systems' may not count suspended time. Time the kernel does not
/// know it lost (a VM paused by
/// its hypervisor with the guest's clocks stopped) is not counted either. Readings never go
/// backwards and never fall behind `Instant::now`; after a suspend they run ahead of it by the
/// time slept, so compare them only with readings of this clock. A sleep ends when this clock
/// reaches its end (after a resume, within a second of that).
///
/// ```
/// use lease_core::{Clock, SystemClock};
/// use std::time::Duration;
///
/// let clock = SystemClock;
/// let before = clock.monotonic();
/// pollster::block_on(clock.sleep(Duration::from_millis(5)));
/// assert!(clock.monotonic() - before >= Duration::from_millis(5));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn monotonic(&self) -> Instant {
        system_monotonic()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        let deadline = crate::lease::instant_after(system_monotonic(), duration);
        Box::pin(TimerSleep {
            deadline,
            state: None,
        })
    }
}

/// [`SystemClock`]'s monotonic time: std's clock at the process's first reading, advanced by
/// `CLOCK_BOOTTIME` since then.
fn system_monotonic() -> Instant {
    static SCALE: OnceLock<BootScale> = OnceLock::new();
    SCALE
        .get_or_init(|| BootScale::new(boottime_ns()))
        .at(boottime_ns())
}

/// Monotonic time that counts time suspended: `base` plus the boot clock's advance since
/// `base_boot`, never behind std's clock since `base` and never going backwards.
#[derive(Debug)]
struct BootScale {
    base: Instant,
    base_boot: Option<u64>,
    /// The largest advance since `base` handed out, in nanoseconds.
    last: AtomicU64,
}

impl BootScale {
    fn new(base_boot: Option<u64>) -> Self {
        Self {
            base: Instant::now(),
            base_boot,
            last: AtomicU64::new(0),
        }
    }

    /// The instant for a boot clock reading of `boot` nanoseconds (`None`: unreadable, std's
    /// clock alone).
    fn at(&self, boot: Option<u64>) -> Instant {
        let std_since = nanos(self.base.elapsed());
        let since = match (self.base_boot, boot) {
            (Some(base), Some(now)) => now.saturating_sub(base).max(std_since),
            _ => std_since,
        };
        let last = self.last.fetch_max(since, Ordering::AcqRel);
        crate::lease::instant_after(self.base, Duration::from_nanos(last.max(since)))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The clock that counts time suspended, in nanoseconds: `CLOCK_BOOTTIME` on Linux
/// (clock_gettime(2)); `CLOCK_MONOTONIC` on macOS (clock_gettime(3): it "will continue to
/// increment while the system is asleep", where std's `Instant` reads `CLOCK_UPTIME_RAW`, which
/// does not) and on FreeBSD (clock_gettime(2): it increments "even while the system is
/// suspended"; its `CLOCK_BOOTTIME` was an alias of `CLOCK_UPTIME`, which stops, before 15.0).
#[cfg(any(target_os = "linux", target_os = "macos", target_os = "freebsd"))]
fn boottime_ns() -> Option<u64> {
    #[cfg(target_os = "linux")]
    let clock = nix::time::ClockId::CLOCK_BOOTTIME;
    #[cfg(not(target_os = "linux"))]
    let clock = nix::time::ClockId::CLOCK_MONOTONIC;
    let t = nix::time::clock_gettime(clock).ok()?;
    u64::try_from(t.tv_sec())
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(u64::try_from(t.tv_nsec()).ok()?)
}

/// No such clock read here: std's `Instant` alone. On Windows it counts suspended time
/// (`QueryPerformanceCounter`, see [`SystemClock`]); on other systems it may not, and the
/// suspend gap stays open there.
#[cfg(not(any(target_os = "linux", target_os = "macos", target_os = "freebsd")))]
fn boottime_ns() -> Option<u64> {
    None
}

/// The longest the timer thread waits without re-reading the clock: a suspend stops the
/// condition variable's clock, not [`SystemClock`]'s, so after a resume a sleep ends at most
/// this long after its end.
const TIMER_RECHECK: Duration = Duration::from_secs(1);

/// Shared between a sleeping future and whoever fires it.
#[derive(Debug, Default)]
struct SleepState {
    fired: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl SleepState {
    fn fire(&self) {
        self.fired.store(true, Ordering::Release);
        if let Some(waker) = lock(&self.waker).take() {
            waker.wake();
        }
    }

    fn poll(&self, cx: &Context<'_>) -> Poll<()> {
        if self.fired.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        *lock(&self.waker) = Some(cx.waker().clone());
        // Re-check: the timer may have fired between the load and storing the waker.
        if self.fired.load(Ordering::Acquire) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

struct TimerEntry {
    deadline: Instant,
    seq: u64,
    state: Arc<SleepState>,
}

impl PartialEq for TimerEntry {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}
impl Eq for TimerEntry {}
impl PartialOrd for TimerEntry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for TimerEntry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.deadline, self.seq).cmp(&(other.deadline, other.seq))
    }
}

#[derive(Default)]
struct Timer {
    heap: Mutex<BinaryHeap<Reverse<TimerEntry>>>,
    changed: Condvar,
    seq: AtomicU64,
    /// The process whose thread runs this timer.
    started_in: u32,
}

impl Timer {
    /// The process-wide timer, or `None` if its thread could not be started.
    ///
    /// One per process, not one per program: a `fork`ed child has a copy of the parent's timer
    /// but not its thread (threads do not survive `fork`), so a sleep scheduled on it would
    /// never end; the child starts a timer of its own on its first sleep. A process's first
    /// sleep only tries the lock, so that a thread of the parent holding it at the fork cannot
    /// hang the child here.
    fn global() -> Option<&'static Timer> {
        static TIMER: Mutex<Option<&'static Timer>> = Mutex::new(None);
        /// The process whose timer `TIMER` holds (0 before the first sleep).
        static TIMER_PID: AtomicU32 = AtomicU32::new(0);
        let pid = std::process::id();
        let mut timer = if TIMER_PID.load(Ordering::Acquire) == pid {
            lock(&TIMER)
        } else {
            // First sleep of this process, perhaps a forked child: a thread of the parent may
            // have held `TIMER` at the fork, and then it stays locked here forever. Give up
            // after a while: the sleep then blocks its thread, which still ends it on time.
            let mut tries = 0;
            loop {
                match TIMER.try_lock() {
                    Ok(guard) => break guard,
                    Err(TryLockError::Poisoned(poisoned)) => break poisoned.into_inner(),
                    Err(TryLockError::WouldBlock) if tries < 1000 => {
                        tries += 1;
                        std::thread::yield_now();
                    }
                    Err(TryLockError::WouldBlock) => return None,
                }
            }
        };
        // (No let-chain: lease-core builds on Rust 1.85.)
        if let Some(current) = timer.filter(|current| current.started_in == pid) {
            return Some(current);
        }
        let fresh: &'static Timer = Box::leak(Box::new(Timer {
            started_in: pid,
            ..Timer::default()
        }));
        match std::thread::Builder::new()
            .name("lease-core-timer".into())
            .spawn(move || fresh.run())
        {
            Ok(_) => {
                *timer = Some(fresh);
                TIMER_PID.store(pid, Ordering::Release);
                Some(fresh)
            }
            Err(error) => {
                tracing::error!(%error, "cannot start the lease-core timer thread; sleeps will block");
                None
            }
        }
    }

    fn schedule(&self, deadline: Instant) -> Arc<SleepState> {
        let state = Arc::new(SleepState::default());
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        lock(&self.heap).push(Reverse(TimerEntry {
            deadline,
            seq,
            state: state.clone(),
        }));
        self.changed.notify_one();
        state
    }

    fn run(&self) {
        let mut heap = lock(&self.heap);
        loop {
            let now = system_monotonic();
            while heap.peek().is_some_and(|Reverse(e)| e.deadline <= now) {
                if let Some(Reverse(entry)) = heap.pop() {
                    entry.state.fire();
                }
            }
            heap = match heap.peek() {
                Some(Reverse(next)) => {
                    let wait = next
                        .deadline
                        .saturating_duration_since(now)
                        .min(TIMER_RECHECK);
                    self.changed
                        .wait_timeout(heap, wait)
                        .map(|(guard, _)| guard)
                        .unwrap_or_else(|poisoned| poisoned.into_inner().0)
                }
                None => self
                    .changed
                    .wait(heap)
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            };
        }
    }
}

struct TimerSleep {
    deadline: Instant,
    state: Option<Arc<SleepState>>,
}

impl Future for TimerSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if system_monotonic() >= self.deadline {
            return Poll::Ready(());
        }
        if self.state.is_none() {
            match Timer::global() {
                Some(timer) => self.state = Some(timer.schedule(self.deadline)),
                None => {
                    std::thread::sleep(self.deadline.saturating_duration_since(system_monotonic()));
                    return Poll::Ready(());
                }
            }
        }
        match &self.state {
            Some(state) => state.poll(cx),
            None => Poll::Ready(()),
        }
    }
}

/// A clock that moves only when told to: for tests that wait for expiry without sleeping.
///
/// Monotonic and wall time advance together with [`ManualClock::advance`]; wall time alone can be
/// set with [`ManualClock::set_wall`] to model NTP jumps and skew. Sleeps complete when the
/// clock is advanced past their end, or at once, advancing the clock, when
/// [`ManualClock::set_auto_advance`] is on.
///
/// ```
/// use lease_core::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let t0 = clock.monotonic();
/// clock.advance(Duration::from_secs(30));
/// assert_eq!(clock.monotonic() - t0, Duration::from_secs(30));
///
/// clock.set_auto_advance(true);
/// pollster::block_on(clock.sleep(Duration::from_secs(5)));
/// assert_eq!(clock.monotonic() - t0, Duration::from_secs(35));
/// ```
#[derive(Debug)]
pub struct ManualClock {
    scale: u64,
    base_instant: Instant,
    base_wall: SystemTime,
    state: Mutex<ManualState>,
}

#[derive(Debug, Default)]
struct ManualState {
    elapsed: Duration,
    /// Wall time minus (base wall + elapsed), in nanoseconds.
    wall_offset_nanos: i128,
    auto_advance: bool,
    sleepers: Vec<(Duration, Arc<SleepState>)>,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A manual clock whose wall time starts at 2030-01-01T00:00:00Z.
    pub fn new() -> Self {
        Self::starting_at(SystemTime::UNIX_EPOCH + Duration::from_secs(1_893_456_000))
    }

    /// A manual clock whose wall time starts at `wall`.
    pub fn starting_at(wall: SystemTime) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self {
            // Unique per clock in this process, and (with the pid) never another process's.
            scale: (u64::from(std::process::id()) << 32) ^ n ^ 0x4d41_4e55_0000_0000,
            base_instant: Instant::now(),
            base_wall: wall,
            state: Mutex::new(ManualState::default()),
        }
    }

    /// Moves monotonic and wall time forward by `by`, waking every sleep that ends by then.
    pub fn advance(&self, by: Duration) {
        let due = {
            let mut state = lock(&self.state);
            state.elapsed = state.elapsed.saturating_add(by);
            let elapsed = state.elapsed;
            let (due, pending): (Vec<_>, Vec<_>) = state
                .sleepers
                .drain(..)
                .partition(|(until, _)| *until <= elapsed);
            state.sleepers = pending;
            due
        };
        for (_, sleeper) in due {
            sleeper.fire();
        }
    }

    /// Sets wall time alone to `at`, forwards or backwards, leaving monotonic time where it is:
    /// a clock jump or skew. Later [`advance`](Self::advance)s move it on from there.
    pub fn set_wall(&self, at: SystemTime) {
        let now = self.now();
        let delta: i128 = match at.duration_since(now) {
            Ok(ahead) => i128::try_from(ahead.as_nanos()).unwrap_or(i128::MAX),
            Err(behind) => i128::try_from(behind.duration().as_nanos())
                .unwrap_or(i128::MAX)
                .saturating_neg(),
        };
        let mut state = lock(&self.state);
        state.wall_offset_nanos = state.wall_offset_nanos.saturating_add(delta);
    }

    /// When on, a sleep completes at once and advances the clock to its end.
    pub fn set_auto_advance(&self, on: bool) {
        lock(&self.state).auto_advance = on;
    }

    /// Monotonic time elapsed since the clock was made.
    pub fn elapsed(&self) -> Duration {
        lock(&self.state).elapsed
    }

    /// How many sleeps are waiting for the clock to advance (sleeps whose future was dropped do
    /// not count).
    pub fn pending_sleeps(&self) -> usize {
        let mut state = lock(&self.state);
        state.sleepers.retain(|(_, s)| Arc::strong_count(s) > 1);
        state.sleepers.len()
    }

    /// When the earliest pending sleep ends, on this clock's monotonic time, or `None` if no
    /// sleep is pending (sleeps whose future was dropped do not count). A single-threaded
    /// simulator advances the clock to it when none of its futures can make progress.
    ///
    /// ```
    /// use lease_core::{Clock, ManualClock};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// assert_eq!(clock.next_sleep_deadline(), None);
    /// let _later = clock.sleep(Duration::from_secs(5));
    /// let _sooner = clock.sleep(Duration::from_secs(2));
    /// let next = clock.next_sleep_deadline().unwrap();
    /// assert_eq!(next - clock.monotonic(), Duration::from_secs(2));
    /// ```
    pub fn next_sleep_deadline(&self) -> Option<Instant> {
        let mut state = lock(&self.state);
        state.sleepers.retain(|(_, s)| Arc::strong_count(s) > 1);
        let until = state.sleepers.iter().map(|(until, _)| *until).min()?;
        Some(crate::lease::instant_after(self.base_instant, until))
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        let state = lock(&self.state);
        let at = self
            .base_wall
            .checked_add(state.elapsed)
            .unwrap_or(self.base_wall);
        let offset = state.wall_offset_nanos;
        let magnitude =
            Duration::from_nanos(u64::try_from(offset.unsigned_abs()).unwrap_or(u64::MAX));
        if offset >= 0 {
            at.checked_add(magnitude).unwrap_or(at)
        } else {
            at.checked_sub(magnitude).unwrap_or(SystemTime::UNIX_EPOCH)
        }
    }

    fn monotonic(&self) -> Instant {
        crate::lease::instant_after(self.base_instant, lock(&self.state).elapsed)
    }

    fn shared_monotonic(&self) -> Option<(u64, Duration)> {
        Some((self.scale, lock(&self.state).elapsed))
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        let state = Arc::new(SleepState::default());
        let mut clock = lock(&self.state);
        let until = clock.elapsed.saturating_add(duration);
        if duration.is_zero() {
            state.fire();
        } else if clock.auto_advance {
            drop(clock);
            self.advance(duration);
            state.fire();
        } else {
            clock.sleepers.retain(|(_, s)| Arc::strong_count(s) > 1);
            clock.sleepers.push((until, state.clone()));
        }
        Box::pin(ManualSleep { state })
    }
}

struct ManualSleep {
    state: Arc<SleepState>,
}

impl Future for ManualSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.state.poll(cx)
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> SystemTime {
        (**self).now()
    }
    fn monotonic(&self) -> Instant {
        (**self).monotonic()
    }
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        (**self).sleep(duration)
    }
    fn shared_monotonic(&self) -> Option<(u64, Duration)> {
        (**self).shared_monotonic()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::block_on;

    #[test]
    fn system_sleeps_overlap_on_one_timer_thread() {
        let start = Instant::now();
        let sleeps: Vec<_> = (0..20)
            .map(|i| SystemClock.sleep(Duration::from_millis(20 + i)))
            .collect();
        block_on(crate::executor::join_all(sleeps));
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(39), "{took:?}");
    }

    #[test]
    fn manual_sleep_waits_for_advance() {
        let clock = Arc::new(ManualClock::new());
        let c2 = clock.clone();
        let waiter = std::thread::spawn(move || block_on(c2.sleep(Duration::from_secs(10))));
        while clock.pending_sleeps() == 0 {
            std::thread::yield_now();
        }
        clock.advance(Duration::from_secs(9));
        assert_eq!(clock.pending_sleeps(), 1);
        clock.advance(Duration::from_secs(1));
        waiter.join().expect("sleeper thread");
        assert_eq!(clock.pending_sleeps(), 0);
    }

    #[test]
    fn the_next_sleep_deadline_skips_fired_and_dropped_sleeps() {
        let clock = ManualClock::new();
        let t0 = clock.monotonic();
        let short = clock.sleep(Duration::from_secs(1));
        let long = clock.sleep(Duration::from_secs(3));
        let _zero = clock.sleep(Duration::ZERO);
        assert_eq!(
            clock.next_sleep_deadline(),
            Some(t0 + Duration::from_secs(1))
        );
        drop(short);
        assert_eq!(
            clock.next_sleep_deadline(),
            Some(t0 + Duration::from_secs(3))
        );
        clock.advance(Duration::from_secs(3));
        assert_eq!(clock.next_sleep_deadline(), None);
        block_on(long);
    }

    /// [`SystemClock`] with a suspend that can be injected: the boot clock reading (and wall
    /// time) run on by the time "slept" while std's clock, like `CLOCK_MONOTONIC`, does not.
    /// Its monotonic time goes through the same [`BootScale`] as [`SystemClock`]'s.
    #[cfg(any(target_os = "linux", target_os = "macos", target_os = "freebsd"))]
    #[derive(Debug)]
    struct SuspendingClock {
        scale: BootScale,
        slept: AtomicU64,
    }

    #[cfg(any(target_os = "linux", target_os = "macos", target_os = "freebsd"))]
    impl SuspendingClock {
        fn new() -> Self {
            Self {
                scale: BootScale::new(boottime_ns()),
                slept: AtomicU64::new(0),
            }
        }

        /// The host sleeps for `by` between two readings.
        fn suspend(&self, by: Duration) {
            self.slept.fetch_add(nanos(by), Ordering::SeqCst);
        }

        fn slept(&self) -> Duration {
            Duration::from_nanos(self.slept.load(Ordering::SeqCst))
        }
    }

    #[cfg(any(target_os = "linux", target_os = "macos", target_os = "freebsd"))]
    impl Clock for SuspendingClock {
        fn now(&self) -> SystemTime {
            SystemTime::now() + self.slept()
        }
        fn monotonic(&self) -> Instant {
            self.scale
                .at(boottime_ns().map(|b| b.saturating_add(nanos(self.slept()))))
        }
        fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
            SystemClock.sleep(duration)
        }
    }

    #[cfg(any(target_os = "linux", target_os = "macos", target_os = "freebsd"))]
    #[test]
    fn a_suspend_passes_a_kept_lease_deadline() {
        use crate::{AcquireOptions, LeaseBackend, LeaseError, LeaseGuard, LeaseKey};
        use crate::{LossReason, MemoryBackend};

        let clock = Arc::new(SuspendingClock::new());
        let backend: Arc<dyn LeaseBackend> =
            Arc::new(MemoryBackend::builder().with_clock(clock.clone()).build());
        let key = LeaseKey::new("suspend").expect("key");
        let guard = LeaseGuard::builder(backend.clone(), &key, Duration::from_secs(5))
            .with_renew_every(Duration::from_secs(3600))
            .acquire_blocking()
            .expect("acquired");
        assert!(guard.check().is_ok());

        clock.suspend(Duration::from_secs(10));
        // std's clock barely moved; the lease's time ran out while the host slept.
        assert!(matches!(
            guard.check(),
            Err(LeaseError::Lost {
                reason: LossReason::DeadlinePassed,
                ..
            })
        ));
        assert!(guard.deadline() <= clock.monotonic());
        let _ = AcquireOptions::default();
        // The store agrees: somebody else may take the key now.
        let other =
            block_on(backend.try_acquire(&key, Duration::from_secs(5), &AcquireOptions::default()));
        assert!(other.is_ok(), "{other:?}");
    }

    #[test]
    fn system_monotonic_time_never_goes_backwards_nor_behind_std() {
        let mut last = SystemClock.monotonic();
        for _ in 0..1000 {
            let std_now = Instant::now();
            let now = SystemClock.monotonic();
            assert!(now >= last);
            assert!(now >= std_now);
            last = now;
        }
    }

    #[test]
    fn a_boot_scale_never_goes_backwards() {
        let scale = BootScale::new(Some(1_000));
        let later = scale.at(Some(1_000 + 5_000_000_000));
        assert!(later >= scale.base + Duration::from_secs(5));
        // A boot reading that went back, or none at all, does not move time back.
        assert_eq!(scale.at(Some(1_000)), later);
        assert_eq!(scale.at(None), later);
    }

    #[test]
    fn wall_steps_do_not_move_monotonic_time() {
        let clock = ManualClock::new();
        let (w0, m0) = (clock.now(), clock.monotonic());
        clock.set_wall(clock.now() - Duration::from_secs(3600));
        assert_eq!(clock.monotonic(), m0);
        assert_eq!(
            w0.duration_since(clock.now()).ok(),
            Some(Duration::from_secs(3600))
        );
    }
}
