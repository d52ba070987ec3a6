//! The report of a chaos run: `target/chaos-report.md` (also appended to the bench report),
//! and the verdict.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use super::attacker::AttackerReport;
use super::check::{Assumptions, check};
use super::faults::Kind;
use super::history::{History, Surface};
use super::slots::DYNAMO_SKEW;
use super::{Options, Outcome};
use crate::Result;

/// Checks the run's history, writes the report, prints it, and fails on any violation or on a
/// surface that did nothing (a run that exercised nothing proves nothing).
pub(crate) fn write(options: &Options, run: &Path, outcome: &Outcome) -> Result {
    let history = History::load(run)?;
    let assumptions = Assumptions {
        dynamo_max_skew_ms: u64::try_from(DYNAMO_SKEW.as_millis()).unwrap_or(500),
    };
    let checked = check(&history, &assumptions);
    let mut text = header(options, outcome);
    text.push_str(&processes(outcome));
    text.push_str(&faults(options, outcome));
    text.push_str(&checked.to_markdown(options.seed, &history.faults));
    if let Some(attacker) = &outcome.attacker {
        text.push_str(&attacker_section(attacker));
    }
    let idle = idle_surfaces(options, &history);
    if !idle.is_empty() {
        let _ = writeln!(
            text,
            "\n**Surfaces that did nothing:** {}\n",
            idle.join(", ")
        );
    }
    if history.malformed() > 0 {
        println!(
            "    {} malformed history lines skipped (see the report)",
            history.malformed()
        );
    }
    // A sabotaged run is a self-test: its report never replaces a real run's.
    let name = if options.sabotage {
        "chaos-sabotage-report.md"
    } else {
        "chaos-report.md"
    };
    let path = crate::project_root().join("target").join(name);
    fs::write(&path, &text)?;
    let bench = crate::project_root().join("target").join("bench-report.md");
    if let Ok(report) = fs::read_to_string(&bench)
        && !options.sabotage
    {
        fs::write(&bench, crate::bench::with_chaos_section(&report, &text))?;
    }
    println!("\n{}:\n\n{text}", path.display());
    if options.sabotage {
        return if checked.failed() {
            println!(
                "    --sabotage: the FileLock (and Redis kept-lease) actors claimed without \
                 checking, and the checker caught it, as it must"
            );
            Ok(())
        } else {
            Err(
                "--sabotage: the FileLock (and Redis kept-lease) actors claimed without \
                 checking, yet the checker found no violation: the chaos run would miss a real \
                 double holder"
                    .into(),
            )
        };
    }
    if outcome
        .attacker
        .as_ref()
        .is_some_and(AttackerReport::failed)
    {
        return Err(format!(
            "the chaos run's attacker (seed {}) made root touch something outside the store: \
             see {}",
            options.seed,
            path.display()
        )
        .into());
    }
    if checked.failed() {
        return Err(format!(
            "the chaos run (seed {}) broke a guarantee:\n  {}\nsee {}; replay with \
             `cargo xtask chaos --seed {}`",
            options.seed,
            checked.failure_lines().join("\n  "),
            path.display(),
            options.seed
        )
        .into());
    }
    if !idle.is_empty() {
        return Err(format!(
            "the chaos run (seed {}) found no violation, but these surfaces did nothing, so \
             it proves nothing about them: {} (their logs: {})",
            options.seed,
            idle.join(", "),
            run.join("logs").display()
        )
        .into());
    }
    Ok(())
}

fn header(options: &Options, outcome: &Outcome) -> String {
    let backends: Vec<&str> = options.backends.iter().map(|b| b.name()).collect();
    let mut text = String::from("## Chaos run\n\n");
    if options.sabotage {
        text.push_str(
            "**Sabotaged** (`--sabotage`): the `FileLock` actors claim without checking their \
             lease and hold it 400 ms, and the Redis kept-lease actors hold a bare grant for \
             two lease lengths without renewing or checking it; violations are expected, and \
             their absence fails the run.\n\n",
        );
    }
    let _ = writeln!(
        text,
        "`cargo xtask chaos --minutes {} --backend {} --seed {}`: {:.0} s under faults on {} \
         cores, {} processes started. Replay with the same seed: the fault schedule is the \
         seed's, the interleavings are the machine's.\n",
        options.duration.as_secs_f64() / 60.0,
        if backends.len() > 1 {
            "all"
        } else {
            backends[0]
        },
        options.seed,
        outcome.elapsed.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, usize::from),
        outcome.spawned,
    );
    text
}

fn processes(outcome: &Outcome) -> String {
    let mut text = String::from(
        "### Processes\n\n| slot | backend | role | started | exits |\n|---|---|---|---|---|\n",
    );
    for slot in &outcome.slots {
        let exits: Vec<String> = slot
            .exits
            .iter()
            .map(|(what, n)| format!("{what}: {n}"))
            .collect();
        let _ = writeln!(
            text,
            "| {} | {} | {:?} | {} | {} |",
            slot.name,
            slot.backend.name(),
            slot.role,
            slot.incarnation,
            exits.join(", ")
        );
    }
    text.push('\n');
    text
}

fn faults(options: &Options, outcome: &Outcome) -> String {
    let mut text = String::from("### Fault schedule by backend\n\n| fault | ");
    for backend in &options.backends {
        let _ = write!(text, "{} | ", backend.name());
    }
    text.push_str("skipped (no target at the time) |\n|---|");
    text.push_str(&"---|".repeat(options.backends.len() + 1));
    text.push('\n');
    let mut kinds: BTreeMap<Kind, ()> = BTreeMap::new();
    for backend in &options.backends {
        for kind in Kind::for_backend(*backend) {
            kinds.insert(*kind, ());
        }
    }
    for kind in kinds.keys() {
        let _ = write!(text, "| {} | ", kind.name());
        let mut skipped = 0;
        for backend in &options.backends {
            let applies = Kind::for_backend(*backend).contains(kind);
            let done = outcome
                .faults
                .done
                .get(&(*backend, *kind))
                .copied()
                .unwrap_or(0);
            skipped += outcome
                .faults
                .skipped
                .get(&(*backend, *kind))
                .copied()
                .unwrap_or(0);
            let cell = if applies {
                done.to_string()
            } else {
                "-".to_owned()
            };
            let _ = write!(text, "{cell} | ");
        }
        let _ = writeln!(text, "{skipped} |");
    }
    let _ = writeln!(
        text,
        "\nClock steps beyond the DynamoDB skew allowance ({} ms): {}.",
        DYNAMO_SKEW.as_millis(),
        outcome.faults.steps_beyond
    );
    for (proxy, server) in [
        (&outcome.proxy, "DynamoDB Local"),
        (&outcome.pg_proxy, "PostgreSQL"),
        (&outcome.redis_proxy, "Redis"),
    ] {
        let Some(proxy) = proxy else {
            continue;
        };
        let hits: Vec<String> = [
            "delay",
            "drop",
            "reset",
            "blackhole",
            "lost-reply",
            "throttle",
        ]
        .iter()
        .map(|kind| format!("{kind} {}", proxy.hits(kind)))
        .collect();
        let _ = writeln!(
            text,
            "\nThe {server} proxy read {} requests on {} connections and forwarded {}; requests \
             hit by each fault: {}; connections closed because {server} was down: {}; \
             malformed: {}; proxy threads that panicked: {}.",
            proxy.requests,
            proxy.connections,
            proxy.forwarded,
            hits.join(", "),
            proxy.upstream_down,
            proxy.malformed,
            proxy.panicked
        );
    }
    text.push('\n');
    text
}

fn attacker_section(attacker: &AttackerReport) -> String {
    let mut text = String::from("### Attacker\n\n");
    match attacker {
        AttackerReport::Skipped(reason) => {
            let _ = writeln!(text, "Skipped: {reason}.\n");
        }
        AttackerReport::Ran { actions, problems } => {
            let _ = writeln!(
                text,
                "`nobody`, owner of `files/shared`, raced links to a root-owned 0600 sentinel \
                 there: {actions}.\n"
            );
            if problems.is_empty() {
                text.push_str(
                    "The sentinel's mode, owner, size and content are unchanged, and nothing \
                     was created outside the stores.\n\n",
                );
            } else {
                for problem in problems {
                    let _ = writeln!(text, "- **{problem}**");
                }
                text.push('\n');
            }
        }
    }
    text
}

/// The surfaces of the run's backends that recorded no tenure (no acquisition, no claim).
fn idle_surfaces(options: &Options, history: &History) -> Vec<String> {
    Surface::ALL
        .iter()
        .map(|(surface, _)| surface)
        .filter(|surface| {
            options.has(surface.backend())
                && !history.acqs.iter().any(|acq| acq.surface == **surface)
                && !history.claims.iter().any(|span| span.surface == **surface)
        })
        .map(|surface| surface.as_str().to_owned())
        .collect()
}
