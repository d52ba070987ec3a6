//! Announced steps: a header per step, the exact command line, fail fast, timings at the end,
//! with the time spent building kept apart from the time spent running tests.

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Result, project_root};

/// What a step spends its time on, so the summary can add up build time and test time apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Compiling (`cargo build`, `cargo test --no-run`).
    Build,
    /// Running tests (test binaries, doc tests, which rustdoc compiles as it runs them, and
    /// the chaos run).
    Test,
    /// Anything else: formatting and lint checks, docs, starting services.
    Other,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Self::Build => "build",
            Self::Test => "test",
            Self::Other => "other",
        }
    }
}

/// Whether this runs in CI (`CI=true`, as `.ci/run` is run): a fresh clone, whose builds no
/// later run reuses, so steps may remove what they alone needed ([`free_in_ci`]).
pub(crate) fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|ci| ci == "true")
}

/// In CI ([`in_ci`]), removes `paths` (files, or folders with all they hold) and says how much
/// room that made, naming them `what`; elsewhere does nothing, so that a developer's next run
/// reuses them. A CI run on 0a6b391 ran out of disk building the README quick starts.
pub(crate) fn free_in_ci(what: &str, paths: &[std::path::PathBuf]) {
    if !in_ci() {
        return;
    }
    let (removed, bytes) = remove_all(paths);
    println!(
        "    CI: removed {what}, {removed} of {} ({:.0} MB)",
        paths.len(),
        bytes as f64 / 1e6
    );
}

/// Removes `paths` (files, or folders with all they hold): how many were removed and the bytes
/// they held. One already gone is skipped; one that cannot be removed is named and kept.
fn remove_all(paths: &[std::path::PathBuf]) -> (usize, u64) {
    let (mut removed, mut bytes) = (0, 0);
    for path in paths {
        let size = size_of(path);
        let gone = if path.is_dir() {
            std::fs::remove_dir_all(path)
        } else {
            std::fs::remove_file(path)
        };
        match gone {
            Ok(()) => (removed, bytes) = (removed + 1, bytes + size),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => println!("    CI: could not remove {}: {e}", path.display()),
        }
    }
    (removed, bytes)
}

/// The bytes of the file at `path`, or of the files under the folder (links not followed);
/// what cannot be read counts 0.
fn size_of(path: &std::path::Path) -> u64 {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::read_dir(path).map_or(0, |entries| {
            entries.flatten().map(|entry| size_of(&entry.path())).sum()
        }),
        Ok(meta) => meta.len(),
        Err(_) => 0,
    }
}

/// The most test time `cargo xtask test` may take on 2 cores (issue 25), builds excluded.
pub(crate) const TEST_TIME_BUDGET: Duration = Duration::from_secs(480);

/// The steps of one task run, in order, with how long each took.
#[derive(Debug)]
pub(crate) struct Steps {
    task: &'static str,
    total: usize,
    done: Vec<(String, Kind, Duration)>,
    budget: Option<Duration>,
}

impl Steps {
    /// Starts a task run of `total` steps (used only for the `[n/total]` in headers).
    pub(crate) fn new(task: &'static str, total: usize) -> Self {
        Self {
            task,
            total,
            done: Vec::new(),
            budget: None,
        }
    }

    /// Makes the summary compare the total test time with `budget`.
    pub(crate) fn with_test_budget(mut self, budget: Duration) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Prints the header of the next step and returns when it started.
    pub(crate) fn announce(&self, title: &str) -> Instant {
        let number = self.done.len() + 1;
        println!(
            "\n==> [{number}/{total}] xtask {task}: {title}",
            total = self.total,
            task = self.task
        );
        Instant::now()
    }

    /// Records that the step announced at `started` finished well.
    pub(crate) fn finish(&mut self, title: &str, started: Instant) {
        self.finish_as(Kind::Other, title, started);
    }

    /// Records that the step of `kind` announced at `started` finished well.
    pub(crate) fn finish_as(&mut self, kind: Kind, title: &str, started: Instant) {
        let elapsed = started.elapsed();
        println!("    ok: {title} ({:.1}s)", elapsed.as_secs_f64());
        self.done.push((title.to_owned(), kind, elapsed));
    }

    /// Runs `command` in the workspace root as one step of [`Kind::Other`]; a non-zero exit
    /// ends the task.
    pub(crate) fn run(&mut self, title: &str, command: &mut Command) -> Result {
        self.run_as(Kind::Other, title, command)
    }

    /// Runs `command` as one step of `kind`, in the workspace root unless it names its own
    /// directory; a non-zero exit ends the task.
    pub(crate) fn run_as(&mut self, kind: Kind, title: &str, command: &mut Command) -> Result {
        self.run_all_as(kind, title, std::slice::from_mut(command))
    }

    /// Runs `commands` one after another as one step of `kind`, each in the workspace root
    /// unless it names its own directory; the first non-zero exit ends the task.
    pub(crate) fn run_all_as(
        &mut self,
        kind: Kind,
        title: &str,
        commands: &mut [Command],
    ) -> Result {
        let started = self.announce(title);
        for command in commands {
            if command.get_current_dir().is_none() {
                command.current_dir(project_root());
            }
            run_command(title, command)?;
        }
        self.finish_as(kind, title, started);
        Ok(())
    }

    /// Runs `command` as one step of `kind`, its standard output captured and returned (its
    /// standard error goes to the terminal); a non-zero exit ends the task.
    pub(crate) fn run_capturing_as(
        &mut self,
        kind: Kind,
        title: &str,
        command: &mut Command,
    ) -> Result<String> {
        let started = self.announce(title);
        if command.get_current_dir().is_none() {
            command.current_dir(project_root());
        }
        println!("    $ {}", command_line(command));
        let output = command.stdout(Stdio::piped()).output().map_err(|error| {
            format!(
                "{title}: could not start `{}`: {error}",
                command_line(command)
            )
        })?;
        if !output.status.success() {
            return Err(format!(
                "step `{title}` failed ({}): {}",
                output.status,
                command_line(command)
            )
            .into());
        }
        self.finish_as(kind, title, started);
        String::from_utf8(output.stdout)
            .map_err(|_| format!("{title}: the output is not UTF-8").into())
    }

    /// Runs `work` as one step of `kind`: for steps that are not one command.
    pub(crate) fn run_fn_as(
        &mut self,
        kind: Kind,
        title: &str,
        work: impl FnOnce() -> Result,
    ) -> Result {
        let started = self.announce(title);
        work().map_err(|error| format!("step `{title}` failed: {error}"))?;
        self.finish_as(kind, title, started);
        Ok(())
    }

    /// Prints how long every step took, the totals by kind and, with a budget, whether the
    /// test time kept to it.
    pub(crate) fn summary(&self) {
        print!("{}", self.summary_text());
    }

    fn summary_text(&self) -> String {
        let mut text = format!(
            "\n==> xtask {}: all {} steps passed\n",
            self.task,
            self.done.len()
        );
        for (title, kind, took) in &self.done {
            let _ = writeln!(
                text,
                "    {:>7.1}s  {:<5}  {title}",
                took.as_secs_f64(),
                kind.label()
            );
        }
        let of = |wanted: Kind| -> Duration {
            self.done
                .iter()
                .filter(|(_, kind, _)| *kind == wanted)
                .map(|(_, _, took)| *took)
                .sum()
        };
        for kind in [Kind::Build, Kind::Test, Kind::Other] {
            let _ = writeln!(
                text,
                "    {:>7.1}s  {} time",
                of(kind).as_secs_f64(),
                kind.label()
            );
        }
        let total: Duration = self.done.iter().map(|(_, _, took)| *took).sum();
        let _ = writeln!(text, "    {:>7.1}s  total", total.as_secs_f64());
        if let Some(budget) = self.budget {
            let test = of(Kind::Test);
            let verdict = if test <= budget { "within" } else { "OVER" };
            let _ = writeln!(
                text,
                "    test time {:.1}s of a {:.0}s budget: {verdict} (builds excluded)",
                test.as_secs_f64(),
                budget.as_secs_f64()
            );
        }
        text
    }
}

/// `cargo` from `PATH`: the rustup proxy honours `rust-toolchain.toml`.
pub(crate) fn cargo(args: &[&str]) -> Command {
    let mut command = Command::new("cargo");
    command.args(args);
    command
}

/// Runs one command of the step `title`, printing its line; a failure names the step and the
/// command.
pub(crate) fn run_command(title: &str, command: &mut Command) -> Result {
    println!("    $ {}", command_line(command));
    let status = command.status().map_err(|error| {
        format!(
            "{title}: could not start `{}`: {error}",
            command_line(command)
        )
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "step `{title}` failed ({status}): {}",
            command_line(command)
        )
        .into())
    }
}

/// The command as one copyable shell line, with the variables it sets in front (and a `cd` to
/// its folder when that is not the workspace root).
pub(crate) fn command_line(command: &Command) -> String {
    let mut line = String::new();
    if let Some(dir) = command
        .get_current_dir()
        .filter(|dir| *dir != project_root())
    {
        let _ = write!(line, "cd {} && ", shell_quote(&dir.to_string_lossy()));
    }
    for (name, value) in command.get_envs() {
        if let Some(value) = value {
            let _ = write!(
                line,
                "{}={} ",
                name.to_string_lossy(),
                shell_quote(&value.to_string_lossy())
            );
        }
    }
    line.push_str(&shell_quote(&command.get_program().to_string_lossy()));
    for arg in command.get_args() {
        line.push(' ');
        line.push_str(&shell_quote(&arg.to_string_lossy()));
    }
    line
}

/// Quotes `word` for a POSIX shell when it holds anything but plain characters.
fn shell_quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=,@+%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_folders_are_removed_and_their_bytes_counted() {
        let dir = project_root().join("target/xtask-remove-all-test");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("folder/inner")).expect("folders");
        std::fs::write(dir.join("file"), [0u8; 10]).expect("file");
        std::fs::write(dir.join("folder/a"), [0u8; 20]).expect("file");
        std::fs::write(dir.join("folder/inner/b"), [0u8; 30]).expect("file");
        let paths = [
            dir.join("file"),
            dir.join("folder"),
            dir.join("never-there"),
        ];
        assert_eq!(remove_all(&paths), (2, 60));
        assert!(!dir.join("file").exists() && !dir.join("folder").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_summary_adds_up_build_and_test_time_apart_and_holds_tests_to_the_budget() {
        let mut steps = Steps::new("test", 3).with_test_budget(Duration::from_secs(480));
        for (title, kind, secs) in [
            ("build tests", Kind::Build, 100),
            ("tests", Kind::Test, 300),
            ("doc tests", Kind::Test, 200),
            ("rustdoc", Kind::Other, 7),
        ] {
            steps
                .done
                .push((title.to_owned(), kind, Duration::from_secs(secs)));
        }
        let text = steps.summary_text();
        assert!(text.contains("  100.0s  build time"), "{text}");
        assert!(text.contains("  500.0s  test time"), "{text}");
        assert!(text.contains("    7.0s  other time"), "{text}");
        assert!(text.contains("  607.0s  total"), "{text}");
        assert!(
            text.contains("test time 500.0s of a 480s budget: OVER"),
            "{text}"
        );
        steps.done.pop();
        steps.done.pop();
        assert!(steps.summary_text().contains("budget: within"));
    }
}
