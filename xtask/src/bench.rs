//! `cargo xtask bench`: runs the benches and joins their markdown sections into one report,
//! `docs/benchmarks.md` (committed: the one place measured figures live; crate docs state costs
//! in requests and syscalls and link there) and `target/bench-report.md` (which `cargo xtask
//! chaos` adds its section to). The report says when, on what machine and under what load.
//!
//! Contract with the benches (`harness = false`): each writes one section,
//! `$LEASE_BENCH_OUT/<NN-name>.md`, starting with a `##` heading; sections appear in the report
//! in file name order. `LEASE_BENCH_QUICK=1` asks for fewer iterations. `cargo xtask test` also
//! runs every bench once, as a smoke test (`cargo test --all-targets`), with
//! `LEASE_BENCH_QUICK=1` and without `LEASE_BENCH_OUT`: a bench then writes nothing.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::dynamo_local::Dynamo;
use crate::postgres_local::Postgres;
use crate::redis_local::Redis;
use crate::step::Steps;
use crate::test::with_dynamo;
use crate::{Result, parse_flags, project_root};

/// Absolute path of the folder the benches write their sections into.
const OUT_VAR: &str = "LEASE_BENCH_OUT";
/// Set to `1` by `--quick`: the benches run fewer iterations.
const QUICK_VAR: &str = "LEASE_BENCH_QUICK";

/// The report committed to the repository.
const REPORT: &str = "docs/benchmarks.md";

/// The packages whose benches need no DynamoDB (and no AWS SDK build): `--no-dynamo` runs these.
const WITHOUT_DYNAMO: [&str; 2] = ["lease-core", "lease-file"];

/// `cargo xtask bench [--quick] [--no-dynamo] [--no-postgres] [--no-redis]`.
pub(crate) fn bench(flags: &[&str]) -> Result {
    let given = parse_flags(
        "bench",
        flags,
        &["--quick", "--no-dynamo", "--no-postgres", "--no-redis"],
    )?;
    let (quick, no_dynamo) = (given[0], given[1]);
    // `--no-dynamo` runs only benches that need no server.
    let no_postgres = given[2] || no_dynamo;
    let no_redis = given[3] || no_dynamo;
    let target = project_root().join("target");
    let out = target.join("bench");
    fs::create_dir_all(&out)?;
    for stale in sections(&out)? {
        fs::remove_file(stale)?;
    }

    let load_at_start = load_average();
    let servers = usize::from(!no_dynamo) + usize::from(!no_postgres) + usize::from(!no_redis);
    let mut steps = Steps::new("bench", 2 + servers);
    let dynamo = if no_dynamo {
        Dynamo::Disabled
    } else {
        Dynamo::provision(&mut steps)?
    };
    // lease-postgres's bench and lessor-partition's PostgreSQL fleet bench; without it they
    // write a section saying they were skipped.
    let postgres = if no_postgres {
        Postgres::Disabled
    } else {
        Postgres::provision(&mut steps)?
    };
    // lease-redis's bench and lessor-partition's Redis fleet bench; without it they write a
    // section saying they were skipped.
    let redis = if no_redis {
        Redis::Disabled
    } else {
        Redis::provision(&mut steps)?
    };
    // `--bench '*'`: the bench targets only, not every library's unit tests in release mode.
    let mut args = vec!["bench"];
    if no_dynamo {
        for package in WITHOUT_DYNAMO {
            args.extend(["--package", package]);
        }
    } else {
        args.push("--workspace");
    }
    args.extend(["--bench", "*"]);
    let mut command = with_dynamo(&dynamo, &args);
    postgres.set_env(&mut command);
    redis.set_env(&mut command);
    command.env(OUT_VAR, &out);
    if quick {
        command.env(QUICK_VAR, "1");
    } else {
        command.env_remove(QUICK_VAR);
    }
    steps.run("benchmarks", &mut command)?;
    let load_at_end = load_average();
    let dynamo_used = if no_dynamo {
        format!(
            "not run (--no-dynamo: only the benches of {})",
            WITHOUT_DYNAMO.join(" and ")
        )
    } else {
        dynamo.describe()
    };
    drop(dynamo);
    let postgres_used = if no_postgres {
        "not run (--no-postgres or --no-dynamo)".to_owned()
    } else {
        postgres.describe()
    };
    drop(postgres);
    let redis_used = if no_redis {
        "not run (--no-redis or --no-dynamo)".to_owned()
    } else {
        redis.describe()
    };
    drop(redis);

    let title = "report";
    let started = steps.announce(title);
    let facts = Facts {
        quick,
        dynamo: dynamo_used,
        postgres: postgres_used,
        redis: redis_used,
        load_at_start,
        load_at_end,
    };
    let mut report = join_sections(&out, &header(&facts))?;
    if let Ok(chaos) = fs::read_to_string(target.join("chaos-report.md")) {
        report = with_chaos_section(&report, &chaos);
    }
    let report_path = target.join("bench-report.md");
    fs::write(&report_path, &report)?;
    fs::write(project_root().join(REPORT), &report)?;
    steps.finish(title, started);
    steps.summary();
    println!("\n{REPORT} and {}:\n\n{report}", report_path.display());
    Ok(())
}

/// `header` followed by every section in `out`, in file name order; an error if there is none.
fn join_sections(out: &Path, header: &str) -> Result<String> {
    let found = sections(out)?;
    if found.is_empty() {
        return Err(format!(
            "no benchmark wrote a section: expected <{OUT_VAR}>/<NN-name>.md files in {}",
            out.display()
        )
        .into());
    }
    let mut report = header.to_owned();
    for section in &found {
        report.push('\n');
        report.push_str(fs::read_to_string(section)?.trim());
        report.push('\n');
    }
    Ok(report)
}

/// The heading that starts the chaos section of the bench report.
const CHAOS_HEADING: &str = "## Chaos run";

/// `report` with its chaos section (from [`CHAOS_HEADING`] to the end), if any, replaced by
/// `chaos`, the report of the last `cargo xtask chaos` run.
pub(crate) fn with_chaos_section(report: &str, chaos: &str) -> String {
    let kept = match report.find(&format!("\n{CHAOS_HEADING}")) {
        Some(at) => &report[..at],
        None => report,
    };
    format!("{}\n\n{}\n", kept.trim_end(), chaos.trim())
}

/// The `*.md` files in `dir`, sorted by file name.
fn sections(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_file() && path.extension().is_some_and(|extension| extension == "md") {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// What the header reports about the run besides the machine.
struct Facts {
    quick: bool,
    dynamo: String,
    postgres: String,
    redis: String,
    load_at_start: String,
    load_at_end: String,
}

/// Title and the facts a reader needs to compare two reports: when, on what, under what load,
/// against what.
fn header(facts: &Facts) -> String {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let mut text = String::from("# Benchmark report\n\n");
    text.push_str(
        "Written by `cargo xtask bench`; not edited by hand. The measured figures of this \
         project live here only: the crate docs state costs in requests and syscalls and link \
         to this page. Every figure is from the run described below, on a machine other work \
         may share (see the load averages).\n\n",
    );
    let _ = writeln!(text, "- date: {}", utc_now());
    let _ = writeln!(
        text,
        "- machine: {cores} cores, {}, {} memory",
        cpu_model(),
        memory()
    );
    let _ = writeln!(
        text,
        "- load average (1, 5, 15 min): {} at start, {} at end",
        facts.load_at_start, facts.load_at_end
    );
    let _ = writeln!(
        text,
        "- rustc: {}",
        first_line_of(Command::new("rustc").arg("-V"))
    );
    let _ = writeln!(
        text,
        "- commit: {}",
        first_line_of(Command::new("git").args(["rev-parse", "--short", "HEAD"]))
    );
    let _ = writeln!(
        text,
        "- mode: {}",
        if facts.quick {
            "quick (LEASE_BENCH_QUICK=1)"
        } else {
            "full"
        }
    );
    let _ = writeln!(text, "- DynamoDB: {}", facts.dynamo);
    let _ = writeln!(text, "- PostgreSQL: {}", facts.postgres);
    let _ = writeln!(text, "- Redis: {}", facts.redis);
    text
}

/// `/proc/loadavg`'s three averages, as `1.20 0.80 0.50`.
fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|averages| !averages.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Total memory from `/proc/meminfo`, in GiB.
fn memory() -> String {
    fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| memory_from_meminfo(&info))
        .unwrap_or_else(|| "unknown".to_owned())
}

fn memory_from_meminfo(info: &str) -> Option<String> {
    let kib: u64 = info
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(format!("{:.1} GiB", kib as f64 / (1024.0 * 1024.0)))
}

fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}

/// First line of what `command` prints, or `unknown` if it cannot run.
fn first_line_of(command: &mut Command) -> String {
    command
        .current_dir(project_root())
        .output()
        .ok()
        .filter(|output| output.status.success())
        .and_then(|output| {
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Now as `YYYY-MM-DD HH:MM:SS UTC`, without a date crate.
fn utc_now() -> String {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let (days, of_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

#[cfg(test)]
mod tests {
    use super::{civil_from_days, join_sections, memory_from_meminfo, with_chaos_section};

    #[test]
    fn memory_is_read_from_meminfo_in_gib() {
        let info = "MemFree:  100 kB\nMemTotal:       8388608 kB\n";
        assert_eq!(memory_from_meminfo(info).as_deref(), Some("8.0 GiB"));
        assert_eq!(memory_from_meminfo("nothing here"), None);
    }

    #[test]
    fn report_joins_sections_in_file_name_order_and_needs_at_least_one() {
        let out = std::env::temp_dir().join(format!("xtask-bench-report-{}", std::process::id()));
        std::fs::create_dir_all(&out).expect("create scratch folder");
        assert!(
            join_sections(&out, "# H\n").is_err(),
            "no section must be an error"
        );
        std::fs::write(out.join("20-b.md"), "## B\n").expect("write section");
        std::fs::write(out.join("10-a.md"), "## A\n\n| x |\n").expect("write section");
        std::fs::write(out.join("notes.txt"), "not a section").expect("write other file");
        let report = join_sections(&out, "# H\n");
        std::fs::remove_dir_all(&out).expect("remove scratch folder");
        assert_eq!(
            report.expect("two sections"),
            "# H\n\n## A\n\n| x |\n\n## B\n"
        );
    }

    #[test]
    fn the_chaos_section_is_appended_once_and_replaced() {
        let first = with_chaos_section("# Benchmark report\n\n## a\nx\n", "## Chaos run\n\nrun 1");
        assert_eq!(
            first,
            "# Benchmark report\n\n## a\nx\n\n## Chaos run\n\nrun 1\n"
        );
        let second = with_chaos_section(&first, "## Chaos run\n\nrun 2\n");
        assert_eq!(
            second,
            "# Benchmark report\n\n## a\nx\n\n## Chaos run\n\nrun 2\n"
        );
    }

    #[test]
    fn civil_from_days_matches_known_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }
}
