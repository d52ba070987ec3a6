//! The cost table: requests and records read per worker, per tick and per minute, in steady
//! state and under churn, this crate's protocol beside the KCL 2.x model, on identical schedules.

use std::fmt::Write as _;
use std::time::Duration;

use lessor_sim::{Counters, FleetModel, KclConfig, KclSimulation, SimConfig, Simulation};

use super::{MINUTE, kcl, secs};

/// The (L, W) settings of the cost table.
const COST_SETTINGS: [(usize, usize); 4] = [(64, 32), (256, 16), (1024, 8), (8192, 2)];
/// The setting that also runs with foreign holders.
const FOREIGN_SETTING: (usize, usize) = (256, 16);
/// How many units the foreign holder keeps, spread over the unit ids.
const FOREIGN_UNITS: usize = 4;
/// The flapping worker leaves or rejoins this often.
const FLAP_EVERY: Duration = Duration::from_secs(30);
/// A long-lived worker crashes and is restarted this often.
const CRASH_EVERY: Duration = Duration::from_secs(180);
/// The foreign holder renews this often (well within a session duration, so it is never judged
/// dead).
const FOREIGN_RENEW_EVERY: Duration = Duration::from_secs(5);

/// What the cost table drives: a [`FleetModel`] plus what only some models can do.
trait CostModel: FleetModel + Sized {
    /// Renews the foreign holds, if the model has any.
    fn renew_foreign(&mut self) {}
    /// Panics on a safety violation or an unexpected error.
    fn check(&self) {}
}

impl CostModel for Simulation {
    fn renew_foreign(&mut self) {
        // The fleet must leave a holder that keeps renewing alone.
        assert_eq!(
            self.renew_foreign_holds(),
            FOREIGN_UNITS,
            "a foreign hold was taken"
        );
    }
    fn check(&self) {
        assert!(
            self.violations().is_empty(),
            "safety violation: {:?}",
            self.violations()
        );
        assert_eq!(self.errors(), 0, "tick errors on the memory backend");
    }
}

impl CostModel for KclSimulation {}

/// One action of a churn schedule.
#[derive(Clone, Copy, Debug)]
enum Action {
    /// The flapping worker leaves: cleanly, or by crashing.
    Leave { clean: bool },
    /// The flapping worker comes back (a new process, a new id).
    Rejoin,
    /// A long-lived worker crashes and is restarted at once (a new process, a new id).
    CrashRestart,
    /// The foreign holder renews.
    RenewForeign,
}

/// The scenarios of the cost table.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scenario {
    Steady,
    Churn,
    ForeignSteady,
    ForeignChurn,
}

impl Scenario {
    fn label(self) -> &'static str {
        match self {
            Self::Steady => "steady",
            Self::Churn => "churn",
            Self::ForeignSteady => "foreign holds, steady",
            Self::ForeignChurn => "foreign holds, churn",
        }
    }
    fn churn(self) -> bool {
        matches!(self, Self::Churn | Self::ForeignChurn)
    }
    fn foreign(self) -> bool {
        matches!(self, Self::ForeignSteady | Self::ForeignChurn)
    }
}

/// The timed actions of `scenario` over `window`, sorted by time.
fn schedule(scenario: Scenario, window: Duration) -> Vec<(Duration, Action)> {
    let mut actions = Vec::new();
    if scenario.churn() {
        let mut at = FLAP_EVERY;
        let mut leaves = 0;
        let mut present = true;
        while at < window {
            if present {
                actions.push((
                    at,
                    Action::Leave {
                        clean: leaves % 2 == 0,
                    },
                ));
                leaves += 1;
            } else {
                actions.push((at, Action::Rejoin));
            }
            present = !present;
            at += FLAP_EVERY;
        }
        // Half-way between two flaps, so the two kinds of event do not coincide.
        let mut at = CRASH_EVERY - FLAP_EVERY / 2;
        while at < window {
            actions.push((at, Action::CrashRestart));
            at += CRASH_EVERY;
        }
    }
    if scenario.foreign() {
        let mut at = FOREIGN_RENEW_EVERY;
        while at < window {
            actions.push((at, Action::RenewForeign));
            at += FOREIGN_RENEW_EVERY;
        }
    }
    actions.sort_by_key(|(at, _)| *at);
    actions
}

/// What one model spent over one window.
struct Spent {
    counters: Counters,
    /// Running workers integrated over the window.
    worker_seconds: f64,
}

impl Spent {
    fn per_worker_minute(&self, count: u64) -> f64 {
        count as f64 / (self.worker_seconds / MINUTE)
    }
    fn per_worker_tick(&self, count: u64, tick: Duration) -> f64 {
        count as f64 / (self.worker_seconds / secs(tick))
    }
}

/// Runs `model` through `actions` over `window` and measures it. The flapping worker is the one
/// that joined last; crash victims are the other running workers in turn, lowest id first.
fn drive<M: CostModel>(model: &mut M, actions: &[(Duration, Action)], window: Duration) -> Spent {
    let start = model.now();
    let before = model.counters();
    let mut worker_seconds = 0.0;
    let mut flapper = model.running().last().copied();
    let mut crashes = 0;
    let mut run_to = |model: &mut M, at: Duration| {
        let span = (start + at).saturating_sub(model.now());
        worker_seconds += model.running().len() as f64 * secs(span);
        model.run_for(span);
    };
    for &(at, action) in actions {
        run_to(model, at);
        match action {
            Action::Leave { clean } => {
                if let Some(index) = flapper {
                    if clean {
                        model.shutdown(index);
                    } else {
                        model.crash(index);
                    }
                }
            }
            Action::Rejoin => flapper = Some(model.join()),
            Action::CrashRestart => {
                let others: Vec<usize> = model
                    .running()
                    .into_iter()
                    .filter(|i| Some(*i) != flapper)
                    .collect();
                if !others.is_empty() {
                    model.crash(others[crashes % others.len()]);
                    crashes += 1;
                    model.join();
                }
            }
            Action::RenewForeign => model.renew_foreign(),
        }
        model.check();
    }
    run_to(model, window);
    model.check();
    Spent {
        counters: model.counters().since(&before),
        worker_seconds,
    }
}

/// Ours, balanced and settled, with the foreign holds of `scenario` taken before anyone joined.
fn ours_for(units: usize, workers: usize, scenario: Scenario) -> Simulation {
    let mut sim = Simulation::new(SimConfig::new(units, 1));
    if scenario.foreign() {
        let width = units.to_string().len();
        for k in 0..FOREIGN_UNITS {
            let unit = format!("u{:0width$}", k * units / FOREIGN_UNITS + units / 8);
            assert!(sim.hold_unit_with_token(&unit, "foreign-holder"));
        }
    }
    for _ in 0..workers {
        sim.join();
    }
    if scenario.foreign() {
        // Never balanced (the held units stay held): settle on time alone, renewing meanwhile.
        let settle = Duration::from_secs(120);
        drive(&mut sim, &schedule(Scenario::ForeignSteady, settle), settle);
    } else {
        sim.run_until_balanced(Duration::from_secs(600))
            .expect("the fleet balances");
        sim.run_for(Duration::from_secs(60));
    }
    sim
}

/// KCL, preassigned and settled.
fn kcl_for(units: usize, workers: usize) -> KclSimulation {
    let mut k = kcl(units, workers, 1);
    k.run_for(Duration::from_secs(60));
    k
}

/// Steady state and churn, per worker per tick and per minute, ours beside KCL.
pub(crate) fn section(out: &mut String, quick: bool) {
    let window = Duration::from_secs(if quick { 200 } else { 600 });
    let ours_tick = SimConfig::new(1, 0).interval;
    let kcl_tick = KclConfig::new(1, 0).failover / 3;
    let _ = writeln!(
        out,
        "### Cost per worker: steady state and churn ({:.0} simulated minutes each)\n",
        secs(window) / MINUTE
    );
    let _ = writeln!(
        out,
        "| L | W | scenario | ours req/worker/tick | ours records/worker/tick | ours ticks with a units listing | ours req/worker/min | ours records/worker/min | KCL req/worker/tick | KCL records/worker/tick | KCL req/worker/min | KCL records/worker/min | requests ours/KCL | records ours/KCL | units moved ours / KCL |"
    );
    let _ = writeln!(
        out,
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    // A smoke test (`cargo test --all-targets` builds benches unoptimised) needs the small ones.
    let settings = if quick {
        &COST_SETTINGS[..2]
    } else {
        &COST_SETTINGS[..]
    };
    let mut rows = Vec::new();
    for &(units, workers) in settings {
        rows.push((units, workers, Scenario::Steady));
        rows.push((units, workers, Scenario::Churn));
        if (units, workers) == FOREIGN_SETTING {
            rows.push((units, workers, Scenario::ForeignSteady));
            rows.push((units, workers, Scenario::ForeignChurn));
        }
    }
    for (units, workers, scenario) in rows {
        let actions = schedule(scenario, window);
        let mut sim = ours_for(units, workers, scenario);
        let ours = drive(&mut sim, &actions, window);
        let o = ours.counters;
        let listing_share = o.unit_lists as f64 / o.ticks.max(1) as f64;
        let (o_req, o_rec) = (
            ours.per_worker_minute(o.requests),
            ours.per_worker_minute(o.records_read),
        );
        let mut row = format!(
            "| {units} | {workers} | {} | {:.2} | {:.1} | {:.1} % | {o_req:.1} | {o_rec:.0} |",
            scenario.label(),
            ours.per_worker_tick(o.requests, ours_tick),
            ours.per_worker_tick(o.records_read, ours_tick),
            100.0 * listing_share,
        );
        if scenario.foreign() {
            // The KCL model has no foreign holders.
            let _ = write!(row, " – | – | – | – | – | – | {} / – |", o.moves);
        } else {
            let mut k = kcl_for(units, workers);
            let theirs = drive(&mut k, &actions, window);
            let c = theirs.counters;
            let (k_req, k_rec) = (
                theirs.per_worker_minute(c.requests),
                theirs.per_worker_minute(c.records_read),
            );
            let _ = write!(
                row,
                " {:.1} | {:.0} | {k_req:.1} | {k_rec:.0} | {:.3} | {:.2} | {} / {} |",
                theirs.per_worker_tick(c.requests, kcl_tick),
                theirs.per_worker_tick(c.records_read, kcl_tick),
                o_req / k_req,
                o_rec / k_rec,
                o.moves,
                c.moves
            );
        }
        let _ = writeln!(out, "{row}");
    }
    let _ = writeln!(
        out,
        "\nA tick is 2.5 s for ours (its interval) and 3.3 s for KCL (its renewal interval); \
         \"per worker\" divides by the running workers integrated over the window. *steady*: a \
         balanced fleet left alone. *churn*: the same fleet while one worker flaps (it leaves, \
         alternately cleanly and by crashing, a new process joins in its place {fl} s later, \
         and leaves again {fl} s after that) and every {cr} s another worker crashes and a new \
         process replaces it at once (lowest id first, so the sweeper is among them); KCL's clean leave is a crash (it \
         hands nothing over). *foreign holds*: {fu} of the {L} units are held by something \
         outside the fleet that renews every {fr} s, so they are never taken and some workers \
         stay below their share (the KCL model has no such holder). A units listing reads all \
         `L` unit records; KCL's scan every 20 s reads all `L` leases. Seed 1 everywhere: the \
         figures are identical from run to run.\n",
        fl = FLAP_EVERY.as_secs(),
        cr = CRASH_EVERY.as_secs(),
        fu = FOREIGN_UNITS,
        L = FOREIGN_SETTING.0,
        fr = FOREIGN_RENEW_EVERY.as_secs(),
    );
}
