//! `cargo xtask bench`: runs the benches and joins their markdown sections into one report.
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
use crate::step::Steps;
use crate::test::with_dynamo;
use crate::{Result, parse_flags, project_root};

/// Absolute path of the folder the benches write their sections into.
const OUT_VAR: &str = "LEASE_BENCH_OUT";
/// Set to `1` by `--quick`: the benches run fewer iterations.
const QUICK_VAR: &str = "LEASE_BENCH_QUICK";

/// `cargo xtask bench [--quick]`.
pub(crate) fn bench(flags: &[&str]) -> Result {
    let quick = parse_flags("bench", flags, &["--quick"])?[0];
    let target = project_root().join("target");
    let out = target.join("bench");
    fs::create_dir_all(&out)?;
    for stale in sections(&out)? {
        fs::remove_file(stale)?;
    }

    let mut steps = Steps::new("bench", 3);
    let dynamo = Dynamo::provision(&mut steps)?;
    // `--bench '*'`: the bench targets only, not every library's unit tests in release mode.
    let mut command = with_dynamo(&dynamo, &["bench", "--workspace", "--bench", "*"]);
    command.env(OUT_VAR, &out);
    if quick {
        command.env(QUICK_VAR, "1");
    } else {
        command.env_remove(QUICK_VAR);
    }
    steps.run("benchmarks", &mut command)?;
    let dynamo_used = dynamo.describe();
    drop(dynamo);

    let title = "report";
    let started = steps.announce(title);
    let mut report = join_sections(&out, &header(quick, &dynamo_used))?;
    if let Ok(chaos) = fs::read_to_string(target.join("chaos-report.md")) {
        report = with_chaos_section(&report, &chaos);
    }
    let report_path = target.join("bench-report.md");
    fs::write(&report_path, &report)?;
    steps.finish(title, started);
    steps.summary();
    println!("\n{}:\n\n{report}", report_path.display());
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

/// Title and the facts a reader needs to compare two reports: when, on what, against what.
fn header(quick: bool, dynamo: &str) -> String {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let mut text = String::from("# Benchmark report\n\n");
    let _ = writeln!(text, "- date: {}", utc_now());
    let _ = writeln!(text, "- machine: {cores} cores, {}", cpu_model());
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
        if quick {
            "quick (LEASE_BENCH_QUICK=1)"
        } else {
            "full"
        }
    );
    let _ = writeln!(text, "- DynamoDB: {dynamo}");
    text
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
    use super::{civil_from_days, join_sections, with_chaos_section};

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
