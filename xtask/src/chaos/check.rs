//! The checker: finds in a parsed [`History`] every violation of the table in docs/chaos.md
//! ("What the checker reports") and classes each as failing the run or as beyond the
//! assumption (wall clocks further apart than a DynamoDB surface allows).
//!
//! A run has about 10^5 tenures on a handful of keys, so every rule is a sort and a sweep:
//! overlaps keep the set of tenures still open at each start (its size is the number of
//! tenures trusted at once, one when all is well), regressions and stale writes keep the
//! highest token seen before each instant.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use super::history::{Fault, History, Id, Outcome, Read, Surface, Write, faults_by_kind};

/// One second in nanoseconds (`mono` unit).
const SECOND: u64 = 1_000_000_000;
/// How far before two tenures a clock offset still counts: an offset in force just before an
/// acquisition decides the expiry the acquirer computes.
const SKEW_LEAD: u64 = SECOND;
/// Violations kept, with their descriptions, per kind and class; all are counted.
const KEEP_PER_KIND: u64 = 50;
/// Faults within this distance of a violation's instant are printed with it.
const FAULTS_AROUND: u64 = 5 * SECOND;
/// At most this many faults are printed per violation.
const FAULTS_SHOWN: usize = 20;

/// What the run assumes of its environment (docs/correctness.md, A1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Assumptions {
    /// How far apart (ms) two processes' wall clocks may be for DynamoDB leases to hold.
    pub(crate) dynamo_max_skew_ms: u64,
}

/// The kinds of violation, as docs/chaos.md names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum ViolationKind {
    /// Two tenures of one key by different `(proc, token)` intersect.
    Overlap,
    /// One key, one token, two procs.
    TokenTwice,
    /// A tenure was acquired before another's acquisition was sent, and the later token is not
    /// above it.
    TokenRegression,
    /// An accepted write or a read saw an older token after a newer write was accepted.
    OlderWriter,
    /// An overlap on fleet surfaces: one unit trusted by two workers.
    UnitDoubleTrust,
    /// An election's observer reported a leader the history says never held that tenure: a
    /// token another proc acquired, or a proc that never campaigned on the key.
    PhantomLeader,
    /// An observer reported a tenure twice, or one older than a tenure it had reported.
    ObserverRepeat,
    /// More tenures of one counting lease's slots at once than its `N`.
    OverLimit,
}

impl ViolationKind {
    /// Every kind, in report order.
    pub(crate) const ALL: [ViolationKind; 8] = [
        ViolationKind::Overlap,
        ViolationKind::TokenTwice,
        ViolationKind::TokenRegression,
        ViolationKind::OlderWriter,
        ViolationKind::UnitDoubleTrust,
        ViolationKind::PhantomLeader,
        ViolationKind::ObserverRepeat,
        ViolationKind::OverLimit,
    ];

    /// Its name in docs/chaos.md and in the report.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ViolationKind::Overlap => "overlap",
            ViolationKind::TokenTwice => "token-twice",
            ViolationKind::TokenRegression => "token-regression",
            ViolationKind::OlderWriter => "older-writer",
            ViolationKind::UnitDoubleTrust => "unit-double-trust",
            ViolationKind::PhantomLeader => "phantom-leader",
            ViolationKind::ObserverRepeat => "observer-repeat",
            ViolationKind::OverLimit => "over-limit",
        }
    }
}

/// One violation, described for a human who will replay the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Violation {
    /// Which rule.
    pub(crate) kind: ViolationKind,
    /// The lease key, or for `older-writer` the written name.
    pub(crate) key_or_name: String,
    /// The surface of both sides, or `a/b` when they differ.
    pub(crate) surface: String,
    /// Both procs, their tokens and the monotonic instants involved (and, beyond the
    /// assumption, the clock offsets that put it there).
    pub(crate) description: String,
    /// When it happened (ns): where to look for the faults that caused it.
    pub(crate) at_mono: u64,
}

/// How much history the check covered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Lines read, malformed ones included.
    pub(crate) lines: u64,
    /// Malformed lines skipped, per file that had any (path relative to the run directory).
    pub(crate) malformed: Vec<(String, u64)>,
    /// `acq` lines per surface.
    pub(crate) acquisitions: BTreeMap<Surface, u64>,
    /// `claim` lines.
    pub(crate) claims: u64,
    /// `rel` lines.
    pub(crate) releases: u64,
    /// `write` lines per outcome.
    pub(crate) writes: BTreeMap<Outcome, u64>,
    /// `read` lines.
    pub(crate) reads: u64,
    /// `clock` lines.
    pub(crate) clock_lines: u64,
    /// Distinct procs.
    pub(crate) procs: usize,
    /// Distinct lease keys.
    pub(crate) keys: usize,
    /// Distinct written or read names.
    pub(crate) names: usize,
    /// Tenures, `(proc, token)` per key.
    pub(crate) tenures: usize,
    /// Leaders reported by election observers.
    pub(crate) leaders_reported: u64,
    /// Vacancies reported by election observers.
    pub(crate) vacancies_reported: u64,
    /// `(leaders, vacancies)` reported by election observers, per surface.
    pub(crate) observed: BTreeMap<Surface, (u64, u64)>,
    /// Leaders reported whose `acq` line is missing, by a proc that campaigned on the key
    /// (killed between its election and its log line): not provable either way.
    pub(crate) leaders_unlogged: u64,
    /// Tenures of counting leases' slots, and the most of one counting lease held at once.
    pub(crate) counting: (usize, usize),
}

/// The checker's verdict on one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CheckReport {
    /// The assumptions it checked against.
    pub(crate) assumptions: Assumptions,
    /// How much history it covered.
    pub(crate) counts: Counts,
    /// Violations that fail the run, at most [`KEEP_PER_KIND`] per kind.
    pub(crate) violations: Vec<Violation>,
    /// Violations beyond the assumption, at most [`KEEP_PER_KIND`] per kind.
    pub(crate) beyond_assumption: Vec<Violation>,
    /// How many violations of each kind fail the run (all, not only those kept).
    pub(crate) violation_totals: BTreeMap<ViolationKind, u64>,
    /// How many violations of each kind are beyond the assumption.
    pub(crate) beyond_totals: BTreeMap<ViolationKind, u64>,
}

/// Checks `history` against every rule of docs/chaos.md.
pub(crate) fn check(history: &History, assumptions: &Assumptions) -> CheckReport {
    let tenures = tenures(history);
    let mut sink = Sink {
        history,
        clocks: Clocks::new(history),
        max_skew_ms: assumptions.dynamo_max_skew_ms,
        violations: Vec::new(),
        beyond: Vec::new(),
        totals: BTreeMap::new(),
        beyond_totals: BTreeMap::new(),
    };
    check_overlaps(&tenures, &mut sink);
    let counting = check_counting_limits(&tenures, &mut sink);
    check_token_twice(&tenures, &mut sink);
    check_token_regressions(&tenures, &mut sink);
    check_older_writers(history, &tenures, &mut sink);
    check_writes_below_read_fences(history, &tenures, &mut sink);
    let unlogged = check_observers(history, &mut sink);
    let mut counts = counts(history, tenures.len());
    counts.leaders_unlogged = unlogged;
    CheckReport {
        assumptions: *assumptions,
        counts: Counts { counting, ..counts },
        violations: sink.violations,
        beyond_assumption: sink.beyond,
        violation_totals: sink.totals,
        beyond_totals: sink.beyond_totals,
    }
}

/// The counts of the report.
fn counts(history: &History, tenures: usize) -> Counts {
    let mut counts = Counts {
        lines: history.lines(),
        claims: history.claim_lines,
        releases: history.rels.len() as u64,
        reads: history.reads.len() as u64,
        clock_lines: history.clocks.len() as u64,
        procs: history.procs.count(),
        keys: history.keys.count(),
        names: history.names.count(),
        tenures,
        ..Counts::default()
    };
    for file in history.files.iter().filter(|f| f.malformed > 0) {
        counts.malformed.push((file.name.clone(), file.malformed));
    }
    for acq in &history.acqs {
        *counts.acquisitions.entry(acq.surface).or_insert(0) += 1;
    }
    for write in &history.writes {
        *counts.writes.entry(write.outcome).or_insert(0) += 1;
    }
    for observe in &history.observes {
        let per_surface = counts.observed.entry(observe.surface).or_default();
        match observe.leader {
            Some(_) => {
                counts.leaders_reported += 1;
                per_surface.0 += 1;
            }
            None => {
                counts.vacancies_reported += 1;
                per_surface.1 += 1;
            }
        }
    }
    counts
}

/// `phantom-leader` and `observer-repeat`: every leader an election observer reported is a
/// tenure the history shows (the `acq` of that key and token is the reported proc's), and each
/// observer's reports of one key have strictly increasing tokens. A report whose tenure has no
/// `acq` line is tolerated, and counted (returned), when the reported proc campaigned on the
/// key (a `campaign` line, written before it stood): it may have been killed between its
/// election and its log line.
fn check_observers(history: &History, sink: &mut Sink<'_>) -> u64 {
    let mut acquired_by: HashMap<(Id, u64), Id> = HashMap::new();
    let campaigned: std::collections::HashSet<(Id, Id)> =
        history.campaigns.iter().copied().collect();
    for acq in history.acqs.iter().filter(|a| a.surface.is_election()) {
        acquired_by.entry((acq.key, acq.token)).or_insert(acq.proc);
    }
    let mut unlogged = 0;
    let mut last: HashMap<(Id, Id), (u64, u64)> = HashMap::new();
    for o in &history.observes {
        let Some((token, leader)) = o.leader else {
            continue;
        };
        let key = sink.history.keys.name(o.key);
        let phantom = match acquired_by.get(&(o.key, token)) {
            Some(&holder) if holder == leader => None,
            Some(&holder) => Some(holder),
            None if campaigned.contains(&(o.key, leader)) => {
                unlogged += 1;
                None
            }
            None => Some(leader),
        };
        if let Some(holder) = phantom {
            let finding = Finding {
                kind: ViolationKind::PhantomLeader,
                key_or_name: key,
                surfaces: [o.surface, o.surface],
                procs: [o.proc, holder],
                window: (o.mono, o.mono),
                at_mono: o.mono,
            };
            sink.record(finding, |s| {
                format!(
                    "{} reported {} leading with token {token} at {}; the history says {}",
                    s.proc(o.proc),
                    s.proc(leader),
                    o.mono,
                    if holder == leader {
                        "it never campaigned on this key".to_owned()
                    } else {
                        format!("token {token} was {}'s", s.proc(holder))
                    }
                )
            });
        }
        if let Some(&(before, at)) = last.get(&(o.proc, o.key))
            && token <= before
        {
            let finding = Finding {
                kind: ViolationKind::ObserverRepeat,
                key_or_name: key,
                surfaces: [o.surface, o.surface],
                procs: [o.proc, o.proc],
                window: (at, o.mono),
                at_mono: o.mono,
            };
            sink.record(finding, |s| {
                format!(
                    "{} reported token {token} at {} after token {before} at {at}",
                    s.proc(o.proc),
                    o.mono
                )
            });
        }
        last.insert((o.proc, o.key), (token, o.mono));
    }
    unlogged
}

/// One `(proc, token)` of a key: from its acquisition (or first claim) to its last claim.
#[derive(Clone, Copy, Debug)]
struct Tenure {
    /// The key.
    key: Id,
    /// The holder.
    proc: Id,
    /// Its fencing token.
    token: u64,
    /// The surface of its `acq` line, or of its first claim.
    surface: Surface,
    /// `(sent_mono, acquired_mono)` of its `acq` line, if there is one.
    acq: Option<(u64, u64)>,
    /// Its first claim (`acquired_mono` for a tenure without claims).
    start: u64,
    /// Whether it has claims: only claimed instants are vouched for by a check, so only those
    /// count for `overlap`. (`acquired_mono` is read after the call returned, and a pause
    /// there can put it past the deadline; it serves the token order only.)
    claimed: bool,
    /// The last claim, or `start` if it has none.
    end: u64,
}

impl Tenure {
    /// Its earliest instant: the acquisition's `sent_mono`, or `start`.
    fn earliest(&self) -> u64 {
        self.acq.map_or(self.start, |(sent, _)| sent)
    }
}

/// Every tenure, sorted by key, then start.
fn tenures(history: &History) -> Vec<Tenure> {
    // With two `acq` lines for one tenure (never expected), the earlier acquisition counts.
    let mut acqs = HashMap::new();
    for acq in &history.acqs {
        acqs.entry((acq.key, acq.proc, acq.token))
            .and_modify(|(surface, sent, acquired)| {
                if acq.acquired_mono < *acquired {
                    (*surface, *sent, *acquired) = (acq.surface, acq.sent_mono, acq.acquired_mono);
                }
            })
            .or_insert((acq.surface, acq.sent_mono, acq.acquired_mono));
    }
    let mut tenures = Vec::with_capacity(history.claims.len() + acqs.len());
    for claim in &history.claims {
        let acq = acqs.remove(&(claim.key, claim.proc, claim.token));
        let start = claim.first_mono;
        tenures.push(Tenure {
            key: claim.key,
            proc: claim.proc,
            token: claim.token,
            surface: acq.map_or(claim.surface, |(surface, _, _)| surface),
            acq: acq.map(|(_, sent, acquired)| (sent, acquired)),
            start,
            claimed: true,
            end: claim.last_mono.max(start),
        });
    }
    for ((key, proc, token), (surface, sent, acquired)) in acqs {
        let (acq, start, end) = (Some((sent, acquired)), acquired, acquired);
        tenures.push(Tenure {
            key,
            proc,
            token,
            surface,
            acq,
            start,
            claimed: false,
            end,
        });
    }
    tenures.sort_unstable_by_key(|t| (t.key, t.start, t.proc, t.token));
    tenures
}

/// Each proc's wall-clock offset over monotonic time, from its `clock` lines.
#[derive(Debug)]
struct Clocks(HashMap<Id, Vec<(u64, i64)>>);

/// The widest gap found between two procs' offsets in a window.
#[derive(Clone, Copy, Debug)]
struct Skew {
    /// The instant (ns).
    at: u64,
    /// The first proc's offset then (ms).
    first_ms: i64,
    /// The second proc's offset then (ms).
    second_ms: i64,
}

impl Clocks {
    /// Each proc's `(mono, offset_ms)` changes, in time order (file order among equal instants).
    fn new(history: &History) -> Clocks {
        let mut by_proc: HashMap<Id, Vec<(u64, i64)>> = HashMap::new();
        for clock in &history.clocks {
            by_proc
                .entry(clock.proc)
                .or_default()
                .push((clock.mono, clock.offset_ms));
        }
        for changes in by_proc.values_mut() {
            changes.sort_by_key(|(mono, _)| *mono);
        }
        Clocks(by_proc)
    }

    /// The offset of `proc` at `at`: 0 before its first `clock` line.
    fn offset(&self, proc: Id, at: u64) -> i64 {
        let Some(changes) = self.0.get(&proc) else {
            return 0;
        };
        match changes.partition_point(|(mono, _)| *mono <= at) {
            0 => 0,
            n => changes[n - 1].1,
        }
    }

    /// The instant of `[lo, hi]` where the offsets of `first` and `second` differ most. Both
    /// are piecewise constant, so it is `lo` or one of their changes.
    fn widest(&self, first: Id, second: Id, lo: u64, hi: u64) -> Skew {
        let at_instant = |at| Skew {
            at,
            first_ms: self.offset(first, at),
            second_ms: self.offset(second, at),
        };
        let changes = [first, second]
            .into_iter()
            .filter_map(|proc| self.0.get(&proc))
            .flatten()
            .map(|(mono, _)| *mono)
            .filter(|mono| lo < *mono && *mono <= hi);
        std::iter::once(lo)
            .chain(changes)
            .map(at_instant)
            .max_by_key(|skew| (skew.gap_ms(), std::cmp::Reverse(skew.at)))
            .unwrap_or_else(|| at_instant(lo))
    }
}

impl Skew {
    /// How far apart the two offsets are (ms).
    fn gap_ms(&self) -> u64 {
        self.first_ms.abs_diff(self.second_ms)
    }
}

/// A violation found, before it is classed and described.
#[derive(Clone, Copy, Debug)]
struct Finding<'a> {
    /// Which rule.
    kind: ViolationKind,
    /// The key or name.
    key_or_name: &'a str,
    /// The surfaces of both sides.
    surfaces: [Surface; 2],
    /// The procs of both sides.
    procs: [Id; 2],
    /// The span of both sides' tenures (ns), in which a clock offset counts.
    window: (u64, u64),
    /// When it happened (ns).
    at_mono: u64,
}

/// Collects findings: classes each, counts all, keeps the first of each kind.
#[derive(Debug)]
struct Sink<'h> {
    /// The history, for names.
    history: &'h History,
    /// Every proc's clock offset over time.
    clocks: Clocks,
    /// Assumption A1 for DynamoDB surfaces (ms).
    max_skew_ms: u64,
    /// Kept violations that fail the run.
    violations: Vec<Violation>,
    /// Kept violations beyond the assumption.
    beyond: Vec<Violation>,
    /// All violations that fail the run, per kind.
    totals: BTreeMap<ViolationKind, u64>,
    /// All violations beyond the assumption, per kind.
    beyond_totals: BTreeMap<ViolationKind, u64>,
}

impl<'h> Sink<'h> {
    /// The name of `proc`.
    fn proc(&self, proc: Id) -> &str {
        self.history.procs.name(proc)
    }

    /// Records `finding`; `describe` (called only if it is kept) says what happened.
    fn record(&mut self, finding: Finding<'_>, describe: impl FnOnce(&Sink<'_>) -> String) {
        let [p, q] = finding.procs;
        let (lo, hi) = finding.window;
        // A file store never reads a wall clock: a violation there is never excused by one.
        let skew = if finding.surfaces.iter().all(|s| s.is_dynamo()) {
            Some(self.clocks.widest(p, q, lo, hi)).filter(|s| s.gap_ms() > self.max_skew_ms)
        } else {
            None
        };
        let totals = if skew.is_some() {
            &mut self.beyond_totals
        } else {
            &mut self.totals
        };
        let total = totals.entry(finding.kind).or_insert(0);
        *total += 1;
        if *total > KEEP_PER_KIND {
            return;
        }
        let mut description = describe(self);
        if let Some(skew) = skew {
            let _ = write!(
                description,
                "; beyond the assumption: at mono {} the wall clock of {} was {:+} ms off and \
                 that of {} {:+} ms off, {} ms apart (allowed: {} ms)",
                skew.at,
                self.proc(p),
                skew.first_ms,
                self.proc(q),
                skew.second_ms,
                skew.gap_ms(),
                self.max_skew_ms
            );
        }
        let [s1, s2] = finding.surfaces;
        let violation = Violation {
            kind: finding.kind,
            key_or_name: finding.key_or_name.to_owned(),
            surface: if s1 == s2 {
                s1.as_str().to_owned()
            } else {
                format!("{}/{}", s1.as_str(), s2.as_str())
            },
            description,
            at_mono: finding.at_mono,
        };
        if skew.is_some() {
            self.beyond.push(violation);
        } else {
            self.violations.push(violation);
        }
    }

    /// A finding between tenures `a` and `b` of one key.
    fn tenure_pair(&self, kind: ViolationKind, a: &Tenure, b: &Tenure) -> Finding<'h> {
        let lo = a.earliest().min(b.earliest()).saturating_sub(SKEW_LEAD);
        Finding {
            kind,
            key_or_name: self.history.keys.name(a.key),
            surfaces: [a.surface, b.surface],
            procs: [a.proc, b.proc],
            window: (lo, a.end.max(b.end)),
            at_mono: match kind {
                ViolationKind::TokenRegression | ViolationKind::TokenTwice => {
                    b.acq.map_or(b.start, |(_, acquired)| acquired)
                }
                _ => b.start,
            },
        }
    }

    /// `proc token T (surface) over [start, end]`, for descriptions.
    fn tenure(&self, t: &Tenure) -> String {
        let acquired = t
            .acq
            .map_or(String::new(), |(_, at)| format!("acquired at {at}, "));
        let claims = if t.claimed {
            format!("claims from {} to {}", t.start, t.end)
        } else {
            "no claim".to_owned()
        };
        format!(
            "{} token {} ({}, {acquired}{claims})",
            self.proc(t.proc),
            t.token,
            t.surface.as_str(),
        )
    }
}

/// `overlap` and `unit-double-trust`: intersecting tenures of one key (closed intervals).
fn check_overlaps(tenures: &[Tenure], sink: &mut Sink<'_>) {
    for group in tenures.chunk_by(|a, b| a.key == b.key) {
        // Tenures started so far that have not ended before the current start.
        let mut open: Vec<&Tenure> = Vec::new();
        for b in group.iter().filter(|t| t.claimed) {
            open.retain(|a| a.end >= b.start);
            for &a in &open {
                let kind = if a.surface.is_fleet() && b.surface.is_fleet() {
                    ViolationKind::UnitDoubleTrust
                } else {
                    ViolationKind::Overlap
                };
                let finding = sink.tenure_pair(kind, a, b);
                sink.record(finding, |s| {
                    format!(
                        "{} and {} both trusted the lease from {} to {}",
                        s.tenure(a),
                        s.tenure(b),
                        b.start,
                        a.end.min(b.end)
                    )
                });
            }
            open.push(b);
        }
    }
}

/// The `N` of a counting lease's name: a key with a path component `slots<N>` (the chaos run's
/// counting-lease actors use `slots2`), its slots being `<name>#slot-<i>`.
fn counting_limit(name: &str) -> Option<usize> {
    name.split('/')
        .find_map(|part| part.strip_prefix("slots")?.parse().ok())
}

/// The tenures of each counting lease (slot 0, the name, and its `#slot-<i>` keys), with its `N`.
fn counting_groups<'t>(
    tenures: &'t [Tenure],
    history: &History,
) -> BTreeMap<(String, usize), Vec<&'t Tenure>> {
    let mut groups: BTreeMap<(String, usize), Vec<&Tenure>> = BTreeMap::new();
    for t in tenures.iter().filter(|t| t.claimed) {
        let name = history.keys.name(t.key);
        let base = name.split_once("#slot-").map_or(name, |(base, _)| base);
        if let Some(limit) = counting_limit(base) {
            groups.entry((base.to_owned(), limit)).or_default().push(t);
        }
    }
    for group in groups.values_mut() {
        group.sort_by_key(|t| t.start);
    }
    groups
}

/// `over-limit`: more tenures of one counting lease's slots trusted at once (closed intervals
/// of claims) than its `N`. (Two of one slot are an `overlap` of that slot's key.) Returns the
/// counting tenures and the most held at once.
fn check_counting_limits(tenures: &[Tenure], sink: &mut Sink<'_>) -> (usize, usize) {
    let (mut count, mut most) = (0, 0);
    for ((name, limit), group) in counting_groups(tenures, sink.history) {
        count += group.len();
        let mut open: Vec<&Tenure> = Vec::new();
        for b in group {
            open.retain(|a| a.end >= b.start);
            open.push(b);
            most = most.max(open.len());
            if open.len() <= limit {
                continue;
            }
            let a = open[0];
            let held = open.len();
            let finding = sink.tenure_pair(ViolationKind::OverLimit, a, b);
            sink.record(finding, |s| {
                let all: Vec<String> = open.iter().map(|t| s.tenure(t)).collect();
                format!(
                    "{held} holders of the counting lease {name} (at most {limit}) at {}: {}",
                    b.start,
                    all.join("; ")
                )
            });
        }
    }
    (count, most)
}

/// `token-twice`: one token of one key held by two procs.
fn check_token_twice(tenures: &[Tenure], sink: &mut Sink<'_>) {
    let mut by_token: Vec<&Tenure> = tenures.iter().collect();
    by_token.sort_unstable_by_key(|t| (t.key, t.token, t.start, t.proc));
    for group in by_token.chunk_by(|a, b| (a.key, a.token) == (b.key, b.token)) {
        // A tenure is one (proc, token) per key: every other member is another proc.
        let [first, others @ ..] = group else {
            continue;
        };
        for &b in others {
            let finding = sink.tenure_pair(ViolationKind::TokenTwice, first, b);
            sink.record(finding, |s| {
                format!(
                    "token {} was held by {} and by {}",
                    b.token,
                    s.tenure(first),
                    s.tenure(b)
                )
            });
        }
    }
}

/// `token-regression`: B sent its acquisition after A was acquired, yet B's token is not above
/// A's. Per key, acquisitions in `sent` order meet the highest token acquired before.
fn check_token_regressions(tenures: &[Tenure], sink: &mut Sink<'_>) {
    for group in tenures.chunk_by(|a, b| a.key == b.key) {
        // Only acquisitions count: for these, `earliest` is sent_mono.
        let acquired = |t: &Tenure| t.acq.map_or(t.start, |(_, acquired)| acquired);
        let mut by_acquired: Vec<&Tenure> = group.iter().filter(|t| t.acq.is_some()).collect();
        let mut by_sent = by_acquired.clone();
        by_acquired.sort_by_key(|t| acquired(t));
        by_sent.sort_by_key(|t| t.earliest());
        let mut next = 0;
        let mut highest: Option<&Tenure> = None;
        for b in by_sent {
            let b_sent = b.earliest();
            // B itself never joins: its acquired_mono is not before its sent_mono.
            while let Some(&a) = by_acquired.get(next)
                && acquired(a) < b_sent
            {
                if highest.is_none_or(|h| a.token > h.token) {
                    highest = Some(a);
                }
                next += 1;
            }
            let Some(a) = highest.filter(|a| b.token <= a.token) else {
                continue;
            };
            let finding = sink.tenure_pair(ViolationKind::TokenRegression, a, b);
            sink.record(finding, |s| {
                format!(
                    "{} was acquired before {} sent its acquisition at {}, which returned a token \
                     not above it",
                    s.tenure(a),
                    s.tenure(b),
                    b_sent
                )
            });
        }
    }
}

/// A write or a read of one name, met in `sent` order.
#[derive(Clone, Copy, Debug)]
enum Access<'h> {
    /// An accepted write.
    Write(&'h Write),
    /// A read.
    Read(&'h Read),
}

impl Access<'_> {
    /// When it was sent (ns).
    fn sent(&self) -> u64 {
        match self {
            Access::Write(w) => w.sent_mono,
            Access::Read(r) => r.sent_mono,
        }
    }
}

/// `older-writer`: per name, accepted writes in `done` order meet writes and reads in `sent`
/// order; each must not carry (write) or return (read) a token below the highest accepted
/// write that ended before it began.
fn check_older_writers(history: &History, tenures: &[Tenure], sink: &mut Sink<'_>) {
    let mut by_name: BTreeMap<Id, (Vec<&Write>, Vec<Access<'_>>)> = BTreeMap::new();
    for w in history.writes.iter().filter(|w| w.outcome == Outcome::Ok) {
        let (ended, accesses) = by_name.entry(w.name).or_default();
        ended.push(w);
        accesses.push(Access::Write(w));
    }
    for r in &history.reads {
        if let Some((_, accesses)) = by_name.get_mut(&r.name) {
            accesses.push(Access::Read(r));
        }
    }
    let spans = TenureSpans::new(tenures);
    for (name, (mut ended, mut accesses)) in by_name {
        ended.sort_by_key(|w| (w.done_mono, w.sent_mono));
        accesses.sort_by_key(Access::sent);
        let mut next = 0;
        let mut highest: Option<&Write> = None;
        for access in accesses {
            while let Some(&x) = ended.get(next)
                && x.done_mono < access.sent()
            {
                if highest.is_none_or(|h| x.token > h.token) {
                    highest = Some(x);
                }
                next += 1;
            }
            if let Some(x) = highest {
                older_writer(sink, &spans, name, x, access);
            }
        }
    }
}

/// `older-writer`, by a read's fence: a fenced read raises the name's fence to its token, so
/// an accepted write with a lower token sent after such a read ended is a stale writer the
/// store let through (a new owner fences before it reads, exactly to refuse those).
fn check_writes_below_read_fences(history: &History, tenures: &[Tenure], sink: &mut Sink<'_>) {
    let mut by_name: BTreeMap<Id, (Vec<&Read>, Vec<&Write>)> = BTreeMap::new();
    for r in &history.reads {
        by_name.entry(r.name).or_default().0.push(r);
    }
    for w in history.writes.iter().filter(|w| w.outcome == Outcome::Ok) {
        if let Some((_, writes)) = by_name.get_mut(&w.name) {
            writes.push(w);
        }
    }
    let spans = TenureSpans::new(tenures);
    for (name, (mut reads, mut writes)) in by_name {
        reads.sort_by_key(|r| r.done_mono);
        writes.sort_by_key(|w| w.sent_mono);
        let (mut next, mut highest): (usize, Option<&Read>) = (0, None);
        for w in writes {
            while let Some(&r) = reads.get(next)
                && r.done_mono < w.sent_mono
            {
                if highest.is_none_or(|h| r.token > h.token) {
                    highest = Some(r);
                }
                next += 1;
            }
            if let Some(r) = highest.filter(|r| w.token < r.token) {
                below_read_fence(sink, &spans, name, r, w);
            }
        }
    }
}

/// Records `w`, accepted although `r` had fenced the name above its token.
fn below_read_fence(sink: &mut Sink<'_>, spans: &TenureSpans, name: Id, r: &Read, w: &Write) {
    let (lo, hi) = spans.around(w.proc, w.token, w.sent_mono, w.done_mono);
    let (r_lo, r_hi) = spans.around(r.proc, r.token, r.sent_mono, r.done_mono);
    let finding = Finding {
        kind: ViolationKind::OlderWriter,
        key_or_name: sink.history.names.name(name),
        surfaces: [w.surface, r.surface],
        procs: [w.proc, r.proc],
        window: (lo.min(r_lo).saturating_sub(SKEW_LEAD), hi.max(r_hi)),
        at_mono: w.sent_mono,
    };
    sink.record(finding, |s| {
        format!(
            "{}'s write with token {} (seq {}), sent at {}, was accepted at {} although {}'s \
             fenced read with token {} had raised the fence by {}",
            s.proc(w.proc),
            w.token,
            w.seq,
            w.sent_mono,
            w.done_mono,
            s.proc(r.proc),
            r.token,
            r.done_mono
        )
    });
}

/// Records `access` if it is older than `x`, the highest accepted write that ended before it.
fn older_writer(sink: &mut Sink<'_>, spans: &TenureSpans, name: Id, x: &Write, access: Access<'_>) {
    let (proc, surface, token, sent, done) = match access {
        Access::Write(w) if w.token < x.token => {
            (w.proc, w.surface, w.token, w.sent_mono, w.done_mono)
        }
        Access::Read(r) if r.value.is_none_or(|(token, _)| token < x.token) => {
            (r.proc, r.surface, r.token, r.sent_mono, r.done_mono)
        }
        _ => return,
    };
    let (lo, hi) = spans.around(proc, token, sent, done);
    let (x_lo, x_hi) = spans.around(x.proc, x.token, x.sent_mono, x.done_mono);
    let finding = Finding {
        kind: ViolationKind::OlderWriter,
        key_or_name: sink.history.names.name(name),
        surfaces: [surface, x.surface],
        procs: [proc, x.proc],
        window: (lo.min(x_lo).saturating_sub(SKEW_LEAD), hi.max(x_hi)),
        at_mono: sent,
    };
    sink.record(finding, |s| {
        let newer = format!(
            "{}'s write with token {} (seq {}) was accepted, ending at {}",
            s.proc(x.proc),
            x.token,
            x.seq,
            x.done_mono
        );
        let who = s.proc(proc);
        match access {
            Access::Write(w) => format!(
                "{who}'s write with token {token} (seq {}), sent at {sent}, was accepted at \
                 {done} although {newer}",
                w.seq
            ),
            Access::Read(r) => format!(
                "{who}'s read with token {token}, sent at {sent}, returned {} although {newer}",
                r.value.map_or("no value".to_owned(), |(t, seq)| {
                    format!("the value of token {t} (seq {seq})")
                })
            ),
        }
    });
}

/// The span of each `(proc, token)` over all keys: where a writer's clock offset counts.
#[derive(Debug)]
struct TenureSpans(HashMap<(Id, u64), (u64, u64)>);

impl TenureSpans {
    /// From every tenure's earliest instant to its end.
    fn new(tenures: &[Tenure]) -> TenureSpans {
        let mut spans: HashMap<(Id, u64), (u64, u64)> = HashMap::new();
        for t in tenures {
            let span = spans
                .entry((t.proc, t.token))
                .or_insert((t.earliest(), t.end));
            *span = (span.0.min(t.earliest()), span.1.max(t.end));
        }
        TenureSpans(spans)
    }

    /// `[sent, done]` widened to the tenure of `(proc, token)`, if it has one.
    fn around(&self, proc: Id, token: u64, sent: u64, done: u64) -> (u64, u64) {
        self.0
            .get(&(proc, token))
            .map_or((sent, done), |&(lo, hi)| (lo.min(sent), hi.max(done)))
    }
}

impl CheckReport {
    /// Whether the run fails: some violation is not beyond the assumption.
    pub(crate) fn failed(&self) -> bool {
        self.violation_totals.values().any(|&n| n > 0)
    }

    /// One line per kind of violation that fails the run: the kind, its count, and the first
    /// one kept (key, surfaces, procs, tokens, when): what a failing run prints last, so the
    /// reason is on screen without opening the report.
    pub(crate) fn failure_lines(&self) -> Vec<String> {
        ViolationKind::ALL
            .into_iter()
            .filter_map(|kind| {
                let total = self.violation_totals.get(&kind).copied().unwrap_or(0);
                if total == 0 {
                    return None;
                }
                let first = self.violations.iter().find(|v| v.kind == kind);
                Some(match first {
                    Some(v) => format!(
                        "{} x{total}: first on `{}` ({}) at mono {}: {}",
                        kind.as_str(),
                        v.key_or_name,
                        v.surface,
                        v.at_mono,
                        v.description
                    ),
                    None => format!("{} x{total}", kind.as_str()),
                })
            })
            .collect()
    }

    /// The report's sections (`###` headings, under the orchestrator's `## Chaos`): what was
    /// checked, the faults injected, and every violation kept with the `seed` and the `faults`
    /// within 5 s of it, so that it can be replayed.
    pub(crate) fn to_markdown(&self, seed: u64, faults: &[Fault]) -> String {
        let mut md = String::new();
        self.counts_markdown(&mut md);
        faults_markdown(&mut md, faults);
        let total: u64 = self.violation_totals.values().sum();
        md.push_str("\n### Violations\n\n");
        if total == 0 {
            md.push_str("None: every guarantee held.\n");
        } else {
            let noun = if total == 1 {
                "violation"
            } else {
                "violations"
            };
            let _ = writeln!(
                md,
                "**The run fails**: {total} {noun} of a guarantee, seed `{seed}`."
            );
            list_markdown(
                &mut md,
                &self.violation_totals,
                &self.violations,
                seed,
                faults,
            );
        }
        let beyond: u64 = self.beyond_totals.values().sum();
        md.push_str("\n### Beyond the assumption\n\n");
        let _ = writeln!(
            md,
            "Violations between processes whose wall clocks differed by more than the allowed \
             DynamoDB skew ({} ms; docs/correctness.md, A1) are counted apart and do not fail \
             the run: {beyond}.",
            self.assumptions.dynamo_max_skew_ms
        );
        if beyond > 0 {
            list_markdown(
                &mut md,
                &self.beyond_totals,
                &self.beyond_assumption,
                seed,
                faults,
            );
        }
        md
    }

    /// The `### History checked` table.
    fn counts_markdown(&self, md: &mut String) {
        let c = &self.counts;
        let mut row = |what: &str, value: String| {
            let _ = writeln!(md, "| {what} | {value} |");
        };
        row("lines read", c.lines.to_string());
        let malformed: u64 = c.malformed.iter().map(|(_, n)| n).sum();
        let files: Vec<String> = c
            .malformed
            .iter()
            .map(|(f, n)| format!("`{f}`: {n}"))
            .collect();
        let detail = if files.is_empty() {
            String::new()
        } else {
            format!(" ({})", files.join(", "))
        };
        row("malformed lines skipped", format!("{malformed}{detail}"));
        row("processes", c.procs.to_string());
        for (surface, n) in &c.acquisitions {
            row(
                &format!("acquisitions, `{}`", surface.as_str()),
                n.to_string(),
            );
        }
        row("claims", c.claims.to_string());
        row("releases", c.releases.to_string());
        row("tenures", c.tenures.to_string());
        row(
            "counting-lease tenures (most held at once)",
            format!("{} ({})", c.counting.0, c.counting.1),
        );
        row("distinct keys", c.keys.to_string());
        for outcome in [Outcome::Ok, Outcome::Refused, Outcome::Error] {
            let n = c.writes.get(&outcome).copied().unwrap_or(0);
            row(&format!("writes, `{}`", outcome.as_str()), n.to_string());
        }
        row("reads", c.reads.to_string());
        row("distinct names written or read", c.names.to_string());
        row("clock offsets applied", c.clock_lines.to_string());
        row(
            "leaders reported by observers",
            c.leaders_reported.to_string(),
        );
        row(
            "vacancies reported by observers",
            c.vacancies_reported.to_string(),
        );
        for (surface, (leaders, vacancies)) in &c.observed {
            row(
                &format!("leaders / vacancies reported, `{}`", surface.as_str()),
                format!("{leaders} / {vacancies}"),
            );
        }
        row(
            "leaders reported, holder killed before logging",
            c.leaders_unlogged.to_string(),
        );
        let table = std::mem::take(md);
        md.push_str("### History checked\n\n| | count |\n|---|---:|\n");
        md.push_str(&table);
    }
}

/// The `### Faults injected` table.
fn faults_markdown(md: &mut String, faults: &[Fault]) {
    md.push_str("\n### Faults injected\n\n");
    if faults.is_empty() {
        md.push_str("None.\n");
        return;
    }
    md.push_str("| kind | count |\n|---|---:|\n");
    for (kind, n) in faults_by_kind(faults) {
        let _ = writeln!(md, "| `{kind}` | {n} |");
    }
}

/// Totals per kind, then each kept violation with the seed and the faults around it.
fn list_markdown(
    md: &mut String,
    totals: &BTreeMap<ViolationKind, u64>,
    kept: &[Violation],
    seed: u64,
    faults: &[Fault],
) {
    md.push_str("\n| violation | count | listed |\n|---|---:|---:|\n");
    for kind in ViolationKind::ALL {
        let total = totals.get(&kind).copied().unwrap_or(0);
        let listed = kept.iter().filter(|v| v.kind == kind).count();
        if total > 0 {
            let _ = writeln!(md, "| `{}` | {total} | {listed} |", kind.as_str());
        }
    }
    md.push('\n');
    for v in kept {
        let _ = writeln!(
            md,
            "- **`{}`** on `{}` (`{}`) at mono {}: {}.\n  Seed `{seed}`; faults within ±5 s:",
            v.kind.as_str(),
            v.key_or_name,
            v.surface,
            v.at_mono,
            v.description
        );
        let near: Vec<&Fault> = faults
            .iter()
            .filter(|f| f.mono.abs_diff(v.at_mono) <= FAULTS_AROUND)
            .collect();
        if near.is_empty() {
            md.push_str("  none.\n");
        }
        for f in near.iter().take(FAULTS_SHOWN) {
            let delta = (i128::from(f.mono) - i128::from(v.at_mono)) as f64 / SECOND as f64;
            let _ = writeln!(md, "  - `{f}` ({delta:+.3} s)");
        }
        if near.len() > FAULTS_SHOWN {
            let _ = writeln!(md, "  - and {} more", near.len() - FAULTS_SHOWN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::history::TempRun;

    /// The skew the tests allow DynamoDB surfaces.
    const ASSUME: Assumptions = Assumptions {
        dynamo_max_skew_ms: 500,
    };
    /// Monotonic origin of the test histories: 100 s after boot.
    const BASE: u64 = 100 * SECOND;

    /// `ms` milliseconds after [`BASE`], in ns.
    fn t(ms: u64) -> u64 {
        BASE + ms * 1_000_000
    }

    fn acq(proc: &str, surface: &str, key: &str, token: u64, sent: u64, at: u64) -> String {
        let (sent, at) = (t(sent), t(at));
        format!("acq {proc} {surface} {key} {token} {sent} {at} 1700000000000")
    }

    fn claim(proc: &str, surface: &str, key: &str, token: u64, at: u64) -> String {
        format!("claim {proc} {surface} {key} {token} {}", t(at))
    }

    fn rel(proc: &str, surface: &str, key: &str, token: u64, at: u64) -> String {
        format!("rel {proc} {surface} {key} {token} {}", t(at))
    }

    /// A `write` line; `(token, seq)`, `(sent, done)` in ms.
    fn write(p: &str, s: &str, name: &str, ts: (u64, u64), span: (u64, u64), out: &str) -> String {
        let ((token, seq), (sent, done)) = (ts, span);
        format!(
            "write {p} {s} {name} {token} {seq} {} {} {out}",
            t(sent),
            t(done)
        )
    }

    /// A `read` line; `(sent, done)` in ms.
    fn read(
        p: &str,
        s: &str,
        name: &str,
        token: u64,
        span: (u64, u64),
        v: Option<(u64, u64)>,
    ) -> String {
        let value = v.map_or("- -".to_owned(), |(vt, vs)| format!("{vt} {vs}"));
        format!(
            "read {p} {s} {name} {token} {} {} {value}",
            t(span.0),
            t(span.1)
        )
    }

    fn clock(proc: &str, offset_ms: i64, at: u64) -> String {
        format!("clock {proc} {offset_ms} {}", t(at))
    }

    /// `(kind, key or name)` of every kept violation that fails the run.
    fn found(report: &CheckReport) -> Vec<(&'static str, &str)> {
        report
            .violations
            .iter()
            .map(|v| (v.kind.as_str(), v.key_or_name.as_str()))
            .collect()
    }

    #[test]
    fn overlap_of_two_holders_of_one_key_is_caught() {
        let (k, run) = ("file:/chaos/files/l1", TempRun::new("overlap"));
        run.log(
            "run-f0.3",
            &[
                acq("run-f0.3", "run-file", k, 1, 0, 0),
                claim("run-f0.3", "run-file", k, 1, 100),
                claim("run-f0.3", "run-file", k, 1, 900),
            ],
        );
        // Acquired at 420 and first trusted at 450, while run-f0.3 still trusted its tenure
        // until 900: the overlap is reported from the claim.
        run.log(
            "fk1.2",
            &[
                acq("fk1.2", "filelock-kernel", k, 2, 400, 420),
                claim("fk1.2", "filelock-kernel", k, 2, 450),
                claim("fk1.2", "filelock-kernel", k, 2, 500),
                claim("fk1.2", "filelock-kernel", k, 2, 1000),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        assert_eq!(found(&report), [("overlap", k)]);
        let v = &report.violations[0];
        assert_eq!(
            (v.surface.as_str(), v.at_mono),
            ("run-file/filelock-kernel", t(450))
        );
        for part in ["run-f0.3 token 1", "fk1.2 token 2", &t(900).to_string()] {
            assert!(v.description.contains(part), "{part} in {}", v.description);
        }
        assert!(report.failed() && report.beyond_assumption.is_empty());
        // What a failing run prints last names the rule, the key, both procs and tokens.
        let lines = report.failure_lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        for part in [
            "overlap x1",
            k,
            "run-file/filelock-kernel",
            "run-f0.3 token 1",
            "fk1.2",
        ] {
            assert!(lines[0].contains(part), "{part} in {}", lines[0]);
        }
    }

    #[test]
    fn overlap_at_one_shared_instant_is_caught() {
        // Tenures are closed intervals: first claimed at the very instant of the other's last
        // claim.
        let (k, run) = ("dir:shared", TempRun::new("touch"));
        run.log("ds1.0", &[claim("ds1.0", "filelock-heartbeat", k, 1, 200)]);
        run.log(
            "ds2.0",
            &[
                acq("ds2.0", "filelock-heartbeat", k, 2, 100, 200),
                claim("ds2.0", "filelock-heartbeat", k, 2, 200),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        assert_eq!(found(&report), [("overlap", k)]);
    }

    #[test]
    fn acquisition_instant_alone_is_not_an_overlap() {
        // fk1.0 trusts its tenure from 0 to 1000. fk2.0's acquisition returned at 500, inside
        // those claims, but fk2.0 first trusted the lease at 1100: acquired_mono is read after
        // the call returned, no check vouches for it, so it makes no overlap. It still orders
        // the tokens, and token 2 acquired after token 1 is no regression.
        let (k, run) = ("file:/chaos/files/l3", TempRun::new("acq-alone"));
        run.log(
            "fk1.0",
            &[
                acq("fk1.0", "filelock-kernel", k, 1, 0, 0),
                claim("fk1.0", "filelock-kernel", k, 1, 0),
                claim("fk1.0", "filelock-kernel", k, 1, 1000),
                rel("fk1.0", "filelock-kernel", k, 1, 1010),
            ],
        );
        run.log(
            "fk2.0",
            &[
                acq("fk2.0", "filelock-kernel", k, 2, 400, 500),
                claim("fk2.0", "filelock-kernel", k, 2, 1100),
                claim("fk2.0", "filelock-kernel", k, 2, 1500),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        assert_eq!(report.violations, []);
        assert_eq!(report.beyond_assumption, []);
        assert!(!report.failed());
        assert_eq!(report.counts.tenures, 2);
    }

    #[test]
    fn three_holders_of_a_counting_lease_of_two_are_caught() {
        // Slots 0 and 1 of `slots2` held at once is the limit; a third holder (slot 2, as a
        // holder with a larger N would take it) over [300, 400] is one too many. Each slot has
        // one holder, so there is no overlap.
        let k = "file:/chaos/files/counting/slots2";
        let (k1, k2) = (format!("{k}#slot-1"), format!("{k}#slot-2"));
        let run = TempRun::new("counting");
        let holder = |proc: &str, key: &str, token: u64, from: u64, to: u64| {
            vec![
                acq(proc, "run-file", key, token, from, from),
                claim(proc, "run-file", key, token, from),
                claim(proc, "run-file", key, token, to),
            ]
        };
        run.log("countf0.1", &holder("countf0.1", k, 1, 0, 1000));
        run.log("countf1.1", &holder("countf1.1", &k1, 1, 100, 500));
        run.log("countf1.2", &holder("countf1.2", &k1, 2, 600, 900));
        let report = check(&run.load(), &ASSUME);
        assert_eq!(found(&report), []);
        assert_eq!(report.counts.counting, (3, 2));
        run.log("countf2.1", &holder("countf2.1", &k2, 1, 300, 400));
        let report = check(&run.load(), &ASSUME);
        assert_eq!(found(&report), [("over-limit", k)]);
        let v = &report.violations[0];
        assert!(
            v.description.contains("3 holders of the counting lease"),
            "{}",
            v.description
        );
        assert_eq!(report.counts.counting, (4, 3));
    }

    #[test]
    fn unit_trusted_by_two_fleet_workers_is_caught() {
        let (u, run) = ("dir:unit-7", TempRun::new("unit"));
        run.log(
            "fl1.3",
            &[
                acq("fl1.3", "fleet-file", u, 4, 0, 10),
                claim("fl1.3", "fleet-file", u, 4, 20),
                claim("fl1.3", "fleet-file", u, 4, 700),
            ],
        );
        run.log(
            "fl2.5",
            &[
                acq("fl2.5", "fleet-file", u, 5, 500, 600),
                claim("fl2.5", "fleet-file", u, 5, 650),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        assert_eq!(found(&report), [("unit-double-trust", u)]);
        assert_eq!(report.violations[0].surface, "fleet-file");
    }

    #[test]
    fn postgres_keys_are_checked_as_the_other_stores_are() {
        // Two holders of one PostgreSQL lease at once (a `lease run` child and a kept lease),
        // then a token handed out again and one below an earlier acquisition's.
        let (k, run) = ("postgres:chaos/r0", TempRun::new("postgres"));
        run.log(
            "runp0.1",
            &[
                acq("runp0.1", "run-postgres", k, 10, 0, 0),
                claim("runp0.1", "run-postgres", k, 10, 100),
                claim("runp0.1", "run-postgres", k, 10, 500),
            ],
        );
        run.log(
            "pl0.1",
            &[
                acq("pl0.1", "lease-postgres", k, 11, 200, 250),
                claim("pl0.1", "lease-postgres", k, 11, 300),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        assert_eq!(found(&report), [("overlap", k)]);
        assert_eq!(report.violations[0].surface, "run-postgres/lease-postgres");
        assert!(report.beyond_assumption.is_empty());

        let (k, run) = ("postgres:chaos/p0", TempRun::new("postgres-tokens"));
        run.log(
            "pl1.1",
            &[
                acq("pl1.1", "lease-postgres", k, 7, 0, 20),
                claim("pl1.1", "lease-postgres", k, 7, 30),
                rel("pl1.1", "lease-postgres", k, 7, 40),
            ],
        );
        run.log(
            "pl2.1",
            &[
                acq("pl2.1", "lease-postgres", k, 7, 100, 120),
                claim("pl2.1", "lease-postgres", k, 7, 130),
                rel("pl2.1", "lease-postgres", k, 7, 140),
            ],
        );
        run.log(
            "pl3.1",
            &[
                acq("pl3.1", "lease-postgres", k, 6, 1000, 1030),
                claim("pl3.1", "lease-postgres", k, 6, 1100),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        let mut kinds: Vec<&str> = found(&report).iter().map(|(kind, _)| *kind).collect();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds, ["token-regression", "token-twice"]);
    }

    #[test]
    fn redis_keys_are_checked_as_the_other_stores_are() {
        // Two holders of one Redis lease at once (a `lease run` child and a kept lease), then a
        // token handed out again and one below an earlier acquisition's, on every Redis surface.
        let (k, run) = ("redis:chaos/r0", TempRun::new("redis"));
        run.log(
            "runq0.1",
            &[
                acq("runq0.1", "run-redis", k, 10, 0, 0),
                claim("runq0.1", "run-redis", k, 10, 100),
                claim("runq0.1", "run-redis", k, 10, 500),
            ],
        );
        run.log(
            "ql0.1",
            &[
                acq("ql0.1", "lease-redis", k, 11, 200, 250),
                claim("ql0.1", "lease-redis", k, 11, 300),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        assert_eq!(found(&report), [("overlap", k)]);
        assert_eq!(report.violations[0].surface, "run-redis/lease-redis");
        assert!(report.beyond_assumption.is_empty());

        let (k, run) = ("redis:chaos/leader", TempRun::new("redis-tokens"));
        run.log(
            "electq0.1",
            &[
                acq("electq0.1", "election-redis", k, 7, 0, 20),
                claim("electq0.1", "election-redis", k, 7, 30),
                rel("electq0.1", "election-redis", k, 7, 40),
            ],
        );
        run.log(
            "electq1.1",
            &[
                acq("electq1.1", "election-redis", k, 7, 100, 120),
                claim("electq1.1", "election-redis", k, 7, 130),
                rel("electq1.1", "election-redis", k, 7, 140),
            ],
        );
        run.log(
            "electq0.2",
            &[
                acq("electq0.2", "election-redis", k, 6, 1000, 1030),
                claim("electq0.2", "election-redis", k, 6, 1100),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        let mut kinds: Vec<&str> = found(&report).iter().map(|(kind, _)| *kind).collect();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds, ["token-regression", "token-twice"]);
    }

    #[test]
    fn one_token_granted_to_two_procs_is_caught() {
        // Two racing acquisitions both got token 3; ln1.0 was killed before its first claim,
        // so the tenures never overlap and neither acquisition came after the other.
        let (k, run) = ("dynamo:leases/jobs/main", TempRun::new("twice"));
        run.log("ln1.0", &[acq("ln1.0", "lease-dynamo", k, 3, 0, 50)]);
        run.log(
            "ln2.0",
            &[
                acq("ln2.0", "lease-dynamo", k, 3, 40, 60),
                claim("ln2.0", "lease-dynamo", k, 3, 70),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        assert_eq!(found(&report), [("token-twice", k)]);
        let v = &report.violations[0].description;
        assert!(
            v.contains("token 3") && v.contains("ln1.0") && v.contains("ln2.0"),
            "{v}"
        );
    }

    #[test]
    fn token_not_above_an_earlier_acquisition_is_caught() {
        let (k, run) = ("dynamo:leases/jobs/main", TempRun::new("regression"));
        run.log(
            "ln1.0",
            &[
                acq("ln1.0", "lease-dynamo", k, 9, 0, 20),
                claim("ln1.0", "lease-dynamo", k, 9, 300),
                rel("ln1.0", "lease-dynamo", k, 9, 310),
            ],
        );
        // Sent long after token 9 was acquired (and released), yet it got token 8.
        run.log(
            "ln2.0",
            &[
                acq("ln2.0", "lease-dynamo", k, 8, 1000, 1030),
                claim("ln2.0", "lease-dynamo", k, 8, 1100),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        assert_eq!(found(&report), [("token-regression", k)]);
        assert_eq!(report.violations[0].at_mono, t(1030));
    }

    #[test]
    fn write_below_a_fenced_read_is_caught() {
        // fd2.0 fenced the name with token 2 and read fd1.0's value; fd1.0, paused, then had a
        // write with token 1 accepted: the fence did not hold, though no newer write exists.
        let (k, n, run) = (
            "dynamo:t/d0/LOCK",
            "dynamo:t/value-d0",
            TempRun::new("readfence"),
        );
        run.log(
            "fd1.0",
            &[
                acq("fd1.0", "lease-dynamo", k, 1, 0, 10),
                claim("fd1.0", "lease-dynamo", k, 1, 100),
                write("fd1.0", "lease-dynamo", n, (1, 1), (150, 160), "ok"),
                write("fd1.0", "lease-dynamo", n, (1, 2), (3000, 3010), "ok"),
            ],
        );
        run.log(
            "fd2.0",
            &[
                acq("fd2.0", "lease-dynamo", k, 2, 1900, 2000),
                claim("fd2.0", "lease-dynamo", k, 2, 2100),
                read("fd2.0", "lease-dynamo", n, 2, (2050, 2060), Some((1, 1))),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        assert_eq!(found(&report), [("older-writer", n)]);
        let v = &report.violations[0];
        assert_eq!(v.at_mono, t(3000));
        assert!(
            v.description.contains("fenced read with token 2"),
            "{}",
            v.description
        );
    }

    #[test]
    fn accepted_write_with_an_older_token_is_caught() {
        // fh1.0 trusted its lease at 100, paused, and wrote after fh2.0's newer write landed.
        let (k, n, run) = (
            "file:/chaos/files/l2",
            "dir:value-2",
            TempRun::new("olderw"),
        );
        run.log(
            "fh1.0",
            &[
                acq("fh1.0", "filelock-heartbeat", k, 1, 0, 0),
                claim("fh1.0", "filelock-heartbeat", k, 1, 100),
                write("fh1.0", "filelock-heartbeat", n, (1, 1), (2000, 2010), "ok"),
            ],
        );
        run.log(
            "fh2.0",
            &[
                acq("fh2.0", "filelock-heartbeat", k, 2, 900, 1000),
                claim("fh2.0", "filelock-heartbeat", k, 2, 1100),
                write("fh2.0", "filelock-heartbeat", n, (2, 1), (1200, 1250), "ok"),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        assert_eq!(found(&report), [("older-writer", n)]);
        let v = &report.violations[0];
        assert_eq!(v.at_mono, t(2000));
        assert!(
            v.description.contains("fh1.0's write with token 1"),
            "{}",
            v.description
        );
    }

    #[test]
    fn read_of_a_value_older_than_an_accepted_write_is_caught() {
        let (n, run) = ("dynamo:values/v/1", TempRun::new("olderr"));
        let s = "lease-dynamo";
        run.log("ln1.0", &[write("ln1.0", s, n, (1, 1), (0, 10), "ok")]);
        run.log("ln2.0", &[write("ln2.0", s, n, (2, 1), (100, 150), "ok")]);
        run.log(
            "ln3.0",
            &[
                // Sent before token 2's write ended: the older value is fine.
                read("ln3.0", s, n, 3, (120, 160), Some((1, 1))),
                read("ln3.0", s, n, 3, (200, 210), Some((1, 1))),
                read("ln3.0", s, n, 3, (300, 310), None),
                read("ln3.0", s, n, 3, (400, 410), Some((2, 1))),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        assert_eq!(found(&report), [("older-writer", n), ("older-writer", n)]);
        let at: Vec<u64> = report.violations.iter().map(|v| v.at_mono).collect();
        assert_eq!(at, [t(200), t(300)]);
        assert!(
            report.violations[0]
                .description
                .contains("value of token 1 (seq 1)")
        );
        assert!(
            report.violations[1]
                .description
                .contains("returned no value")
        );
    }

    /// Three file holders, two DynamoDB holders and two fleet workers handing off back to back,
    /// fenced writes in order, a lost reply, a late write fenced out, and a clock offset within
    /// the allowed skew.
    fn clean_history(run: &TempRun) {
        let (f, d, u, n) = (
            "file:/c/l",
            "dynamo:leases/k/s",
            "dir:unit-1",
            "dynamo:values/n/s",
        );
        let (rf, ld, ff) = ("run-file", "lease-dynamo", "fleet-file");
        run.log(
            "r1.0",
            &[acq("r1.0", rf, f, 1, 0, 0), claim("r1.0", rf, f, 1, 500)],
        );
        run.log(
            "r2.0",
            &[
                acq("r2.0", rf, f, 2, 300, 501),
                claim("r2.0", rf, f, 2, 502),
                claim("r2.0", rf, f, 2, 900),
                rel("r2.0", rf, f, 2, 901),
            ],
        );
        run.log(
            "r1.1",
            &[
                acq("r1.1", rf, f, 3, 950, 960),
                claim("r1.1", rf, f, 3, 2000),
            ],
        );
        run.log(
            "d1.0",
            &[
                acq("d1.0", ld, d, 5, 0, 30),
                claim("d1.0", ld, d, 5, 40),
                write("d1.0", ld, n, (5, 1), (41, 60), "ok"),
                claim("d1.0", ld, d, 5, 100),
                write("d1.0", ld, n, (5, 2), (101, 120), "ok"),
                claim("d1.0", ld, d, 5, 200),
                // The reply was lost: the write may have landed, nobody must rely on it.
                write("d1.0", ld, n, (5, 3), (201, 1500), "error"),
                write("d1.0", ld, n, (5, 4), (1600, 1620), "refused"),
            ],
        );
        run.log(
            "d2.0",
            &[
                clock("d2.0", 200, 0),
                read("d2.0", ld, n, 4, (0, 5), None),
                acq("d2.0", ld, d, 6, 150, 1200),
                claim("d2.0", ld, d, 6, 1210),
                read("d2.0", ld, n, 6, (1211, 1220), Some((5, 2))),
                write("d2.0", ld, n, (6, 1), (1221, 1240), "ok"),
                read("d2.0", ld, n, 6, (1250, 1260), Some((6, 1))),
                rel("d2.0", ld, d, 6, 1300),
            ],
        );
        run.log(
            "fl1.0",
            &[acq("fl1.0", ff, u, 1, 0, 1), claim("fl1.0", ff, u, 1, 99)],
        );
        run.log(
            "fl2.0",
            &[
                acq("fl2.0", ff, u, 2, 50, 100),
                claim("fl2.0", ff, u, 2, 200),
            ],
        );
    }

    #[test]
    fn clean_interleaved_history_reports_nothing() {
        let run = TempRun::new("clean");
        clean_history(&run);
        let report = check(&run.load(), &ASSUME);
        assert_eq!(report.violations, []);
        assert_eq!(report.beyond_assumption, []);
        assert!(!report.failed());
        let c = &report.counts;
        assert_eq!((c.tenures, c.keys, c.names, c.procs), (7, 3, 1, 7));
        assert_eq!(
            (c.claims, c.releases, c.reads, c.clock_lines),
            (10, 2, 3, 1)
        );
        let acquisitions: Vec<_> = c
            .acquisitions
            .iter()
            .map(|(s, n)| (s.as_str(), *n))
            .collect();
        assert_eq!(
            acquisitions,
            [("run-file", 3), ("lease-dynamo", 2), ("fleet-file", 2)]
        );
        let writes: Vec<_> = c.writes.iter().map(|(o, n)| (o.as_str(), *n)).collect();
        assert_eq!(writes, [("ok", 3), ("refused", 1), ("error", 1)]);
    }

    /// ln1.0 trusts its lease from 10 until 3000; ln2.0, whose clock runs `offset_ms` ahead
    /// from 500 on, takes it over and trusts it from 1500.
    fn skewed_takeover(run: &TempRun, surface: &str, key: &str, offset_ms: i64) {
        run.log(
            "ln1.0",
            &[
                acq("ln1.0", surface, key, 1, 0, 10),
                claim("ln1.0", surface, key, 1, 10),
                claim("ln1.0", surface, key, 1, 3000),
            ],
        );
        run.log(
            "ln2.0",
            &[
                clock("ln2.0", offset_ms, 500),
                acq("ln2.0", surface, key, 2, 1400, 1500),
                claim("ln2.0", surface, key, 2, 1500),
                claim("ln2.0", surface, key, 2, 1600),
            ],
        );
    }

    #[test]
    fn violation_beyond_the_allowed_skew_is_counted_apart_on_dynamo_only() {
        let (dk, dynamo) = ("dynamo:leases/k/s", TempRun::new("beyond-d"));
        skewed_takeover(&dynamo, "lease-dynamo", dk, 2000);
        let report = check(&dynamo.load(), &ASSUME);
        assert_eq!(found(&report), []);
        assert!(!report.failed());
        assert_eq!(report.beyond_totals.get(&ViolationKind::Overlap), Some(&1));
        let v = &report.beyond_assumption[0];
        assert_eq!(
            (v.kind, v.key_or_name.as_str()),
            (ViolationKind::Overlap, dk)
        );
        for part in ["ln1.0 was +0 ms off", "ln2.0 +2000 ms off", "2000 ms apart"] {
            assert!(v.description.contains(part), "{part} in {}", v.description);
        }

        // File stores never read a wall clock: the same history there fails the run.
        let (fk, file) = ("file:/c/l", TempRun::new("beyond-f"));
        skewed_takeover(&file, "run-file", fk, 2000);
        let report = check(&file.load(), &ASSUME);
        assert_eq!(found(&report), [("overlap", fk)]);
        assert_eq!(report.beyond_assumption, []);
    }

    #[test]
    fn violation_within_the_allowed_skew_fails_the_run() {
        let (k, run) = ("dynamo:leases/k/s", TempRun::new("within"));
        skewed_takeover(&run, "run-dynamo", k, -300);
        let report = check(&run.load(), &ASSUME);
        assert_eq!(found(&report), [("overlap", k)]);
        assert!(report.failed() && report.beyond_assumption.is_empty());
    }

    /// ln1.0 holds from 20.01 s to 23 s; ln2.0, whose clock was stepped 2 s ahead from
    /// `ahead_ms` and back at `back_ms`, takes over at 21.5 s.
    fn stepped_takeover(run: &TempRun, k: &str, (ahead_ms, back_ms): (u64, u64)) -> CheckReport {
        run.log(
            "ln1.0",
            &[
                acq("ln1.0", "lease-dynamo", k, 1, 20_000, 20_010),
                claim("ln1.0", "lease-dynamo", k, 1, 20_010),
                claim("ln1.0", "lease-dynamo", k, 1, 23_000),
            ],
        );
        run.log(
            "ln2.0",
            &[
                clock("ln2.0", 2000, ahead_ms),
                clock("ln2.0", 0, back_ms),
                acq("ln2.0", "lease-dynamo", k, 2, 21_400, 21_500),
                claim("ln2.0", "lease-dynamo", k, 2, 21_500),
                claim("ln2.0", "lease-dynamo", k, 2, 21_600),
            ],
        );
        check(&run.load(), &ASSUME)
    }

    #[test]
    fn clock_offset_outside_the_tenures_does_not_excuse_a_violation() {
        // Stepped ahead and back 18 s before either tenure.
        let (k, run) = ("dynamo:leases/k/s", TempRun::new("window"));
        let report = stepped_takeover(&run, k, (0, 2000));
        assert_eq!(found(&report), [("overlap", k)]);
    }

    #[test]
    fn clock_offset_in_the_second_before_the_acquisitions_counts() {
        // Stepped ahead 800 ms before the first acquisition was sent, back 100 ms before.
        let (k, run) = ("dynamo:leases/k/s", TempRun::new("lead"));
        let report = stepped_takeover(&run, k, (19_200, 19_900));
        assert_eq!(found(&report), []);
        assert_eq!(report.beyond_totals.get(&ViolationKind::Overlap), Some(&1));
    }

    #[test]
    fn older_writer_is_attributed_by_the_writers_clocks() {
        // As in the write test, on DynamoDB, with the newer writer's clock 2 s ahead.
        let (k, n, run) = (
            "dynamo:leases/k/s",
            "dynamo:values/n/s",
            TempRun::new("olderw-d"),
        );
        let s = "lease-dynamo";
        run.log(
            "ln1.0",
            &[
                acq("ln1.0", s, k, 1, 0, 0),
                claim("ln1.0", s, k, 1, 100),
                write("ln1.0", s, n, (1, 1), (2000, 2010), "ok"),
            ],
        );
        run.log(
            "ln2.0",
            &[
                clock("ln2.0", 2000, 50),
                acq("ln2.0", s, k, 2, 900, 1000),
                claim("ln2.0", s, k, 2, 1100),
                write("ln2.0", s, n, (2, 1), (1200, 1250), "ok"),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        assert_eq!(found(&report), []);
        let beyond: Vec<_> = report
            .beyond_assumption
            .iter()
            .map(|v| (v.kind, v.key_or_name.as_str()))
            .collect();
        assert_eq!(beyond, [(ViolationKind::OlderWriter, n)]);
    }

    #[test]
    fn malformed_lines_are_counted_and_the_rest_still_checked() {
        let (k, run) = ("file:/c/l", TempRun::new("malformed-check"));
        let good = [
            acq("a", "run-file", k, 1, 0, 0),
            claim("a", "run-file", k, 1, 0),
            claim("a", "run-file", k, 1, 900),
        ];
        let text = format!(
            "{}\n{}\n{}\nclaim a run-file {k} 1\nclaim a run-file {k} 1 95",
            good[0], good[1], good[2]
        );
        run.raw("a", text.as_bytes());
        run.log(
            "b",
            &[
                acq("b", "run-file", k, 2, 400, 450),
                claim("b", "run-file", k, 2, 450),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        assert_eq!(found(&report), [("overlap", k)]);
        assert_eq!(report.counts.malformed, [("history/a.log".to_owned(), 2)]);
        assert_eq!(report.counts.lines, 7);
    }

    #[test]
    fn stored_violations_are_capped_per_kind_but_all_counted() {
        let run = TempRun::new("cap");
        let mut lines = Vec::new();
        for i in 0..60 {
            let k = format!("file:/c/l{i}");
            lines.push(acq("a", "run-file", &k, 1, 0, 0));
            lines.push(claim("a", "run-file", &k, 1, 0));
            lines.push(claim("a", "run-file", &k, 1, 100));
            lines.push(acq("a", "run-file", &k, 2, 50, 50));
            lines.push(claim("a", "run-file", &k, 2, 50));
        }
        run.log("a", &lines);
        let report = check(&run.load(), &ASSUME);
        assert_eq!(
            report.violation_totals.get(&ViolationKind::Overlap),
            Some(&60)
        );
        assert_eq!(report.violations.len(), 50);
        assert!(
            report
                .to_markdown(1, &[])
                .contains("| `overlap` | 60 | 50 |")
        );
    }

    #[test]
    fn many_back_to_back_tenures_check_quickly_and_clean() {
        let run = TempRun::new("many");
        let mut lines = Vec::new();
        for i in 0..20_000u64 {
            let k = format!("dir:unit-{}", i % 4);
            let (token, at) = (i / 4 + 1, i / 4 * 10);
            lines.push(acq("w", "fleet-file", &k, token, at, at + 1));
            lines.push(claim("w", "fleet-file", &k, token, at + 5));
            lines.push(write(
                "w",
                "fleet-file",
                &k,
                (token, 1),
                (at + 6, at + 7),
                "ok",
            ));
        }
        run.log("w", &lines);
        let report = check(&run.load(), &ASSUME);
        assert_eq!(
            (report.violations.len(), report.counts.tenures),
            (0, 20_000)
        );
    }

    #[test]
    fn markdown_names_the_seed_and_the_faults_around_each_violation() {
        let (k, run) = ("file:/chaos/files/l1", TempRun::new("markdown"));
        run.log(
            "r1.0",
            &[
                acq("r1.0", "run-file", k, 1, 0, 0),
                claim("r1.0", "run-file", k, 1, 0),
                claim("r1.0", "run-file", k, 1, 9000),
            ],
        );
        run.log(
            "r2.0",
            &[
                acq("r2.0", "run-file", k, 2, 7000, 8000),
                claim("r2.0", "run-file", k, 2, 8000),
            ],
        );
        let (near, after, far) = (
            format!("fault {} 1700000000000 sigstop r1.0 6000", t(3000)),
            format!("fault {} 1700000000001 file-delete files/l1 -", t(12_500)),
            format!("fault {} 1700000000002 sigkill r2.0 -", t(14_000)),
        );
        run.faults(&[&near, &after, &far]);
        let history = run.load();
        let report = check(&history, &ASSUME);
        let md = report.to_markdown(4242, &history.faults);
        for part in [
            "### History checked",
            "### Faults injected",
            "| `sigstop` | 1 |",
            "**The run fails**: 1 violation of a guarantee, seed `4242`.",
            "- **`overlap`** on `file:/chaos/files/l1` (`run-file`)",
            "Seed `4242`; faults within ±5 s:",
            &format!("  - `{near}` (-5.000 s)"),
            &format!("  - `{after}` (+4.500 s)"),
        ] {
            assert!(md.contains(part), "{part:?} missing from:\n{md}");
        }
        assert!(!md.contains(&far), "a fault 6 s away is listed:\n{md}");

        let clean = TempRun::new("markdown-clean");
        clean_history(&clean);
        let md = check(&clean.load(), &ASSUME).to_markdown(7, &[]);
        assert!(md.contains("None: every guarantee held."), "{md}");
    }

    #[test]
    fn observers_report_only_tenures_the_history_shows_and_none_twice() {
        for (surface, key) in [
            ("election-file", "file:/e/leader"),
            ("election-dynamo", "dynamo:chaos/leader/LOCK"),
        ] {
            observers_checked(surface, key);
        }
    }

    fn observers_checked(surface: &str, key: &str) {
        let run = TempRun::new(&format!("observe-{surface}"));
        run.log(
            "elect0.1",
            &[
                format!("campaign elect0.1 {surface} {key} 5"),
                acq("elect0.1", surface, key, 1, 5, 10),
                claim("elect0.1", surface, key, 1, 20),
                format!("campaign elect0.1 {surface} {key} 90"),
            ],
        );
        run.log(
            "watch0.1",
            &[
                format!("observe watch0.1 {surface} {key} 0 - 1"),
                format!("observe watch0.1 {surface} {key} 1 elect0.1 12"),
                format!("observe watch0.1 {surface} {key} 0 - 40"),
                // Elected at 95, killed before its `acq` line: tolerated, counted.
                format!("observe watch0.1 {surface} {key} 2 elect0.1 100"),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        assert_eq!(report.violations, []);
        assert_eq!(
            (
                report.counts.leaders_reported,
                report.counts.vacancies_reported,
                report.counts.leaders_unlogged
            ),
            (2, 2, 1)
        );
        let surface_id = crate::chaos::history::Surface::parse(surface).unwrap();
        assert_eq!(report.counts.observed.get(&surface_id), Some(&(2, 2)));
        let md = report.to_markdown(7, &[]);
        assert!(
            md.contains(&format!(
                "| leaders / vacancies reported, `{surface}` | 2 / 2 |"
            )),
            "{md}"
        );

        // Token 1 reported as another proc's, a proc that never stood, and a repeat.
        run.log(
            "watch1.1",
            &[
                format!("observe watch1.1 {surface} {key} 1 elect9.1 12"),
                format!("observe watch1.1 {surface} {key} 3 nobody.1 50"),
                format!("observe watch1.1 {surface} {key} 3 nobody.1 60"),
            ],
        );
        let report = check(&run.load(), &ASSUME);
        let kinds: Vec<_> = report.violations.iter().map(|v| v.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "phantom-leader",
                "phantom-leader",
                "phantom-leader",
                "observer-repeat"
            ],
            "{:?}",
            report.violations
        );
    }
}
