//! Announced steps: a header per step, the exact command line, fail fast, timings at the end,
//! with the time spent building kept apart from the time spent running tests.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::thread::sleep;
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

    /// Runs `main` and `beside` at the same time as one step of `kind`, each in the workspace
    /// root unless it names its own directory: for suites that wait on servers, sleeps and child
    /// processes more than they compute, so that one's waits overlap the other's work. `main`
    /// prints to the terminal as it runs; `beside`'s output goes to `target/xtask-logs/<name>.log`
    /// and is printed whole when both have ended. The step fails, after both have ended, if
    /// either failed; it records the wall time, and prints each command's own.
    pub(crate) fn run_beside_as(
        &mut self,
        kind: Kind,
        title: &str,
        main: &mut Command,
        (name, beside): (&str, &mut Command),
    ) -> Result {
        let started = self.announce(title);
        let log = project_root()
            .join("target")
            .join("xtask-logs")
            .join(format!("{name}.log"));
        let mut running = Vec::new();
        for (command, output) in [(beside, Some(&log)), (main, None)] {
            if command.get_current_dir().is_none() {
                command.current_dir(project_root());
            }
            running.push(spawn(title, command, output)?);
        }
        let ended = wait_all(&mut running, started)?;
        let [(beside_took, beside_status), (main_took, main_status)] = ended[..] else {
            return Err(format!("{title}: expected two commands to end").into());
        };
        println!(
            "\n    --- {name}, run beside the above (log {}) ---",
            log.display()
        );
        print!("{}", fs::read_to_string(&log).unwrap_or_default());
        println!(
            "    {name}: {:.1}s; the rest: {:.1}s; both at once: {:.1}s",
            beside_took.as_secs_f64(),
            main_took.as_secs_f64(),
            started.elapsed().as_secs_f64()
        );
        for (status, which) in [(main_status, "the main command"), (beside_status, name)] {
            if !status.success() {
                return Err(format!("step `{title}` failed ({status}) in {which}").into());
            }
        }
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

/// Starts one command of the step `title`, printing its line; its stdout and stderr go to the
/// file `output` when given (created with its folder), else to the terminal.
fn spawn(title: &str, command: &mut Command, output: Option<&PathBuf>) -> Result<Child> {
    println!("    $ {}", command_line(command));
    if let Some(path) = output {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        let file = File::create(path)?;
        command.stdout(file.try_clone()?).stderr(file);
    }
    command.spawn().map_err(|error| {
        format!(
            "{title}: could not start `{}`: {error}",
            command_line(command)
        )
        .into()
    })
}

/// Waits for every child and returns, in their order, how long each ran since `started` and
/// how it ended.
fn wait_all(children: &mut [Child], started: Instant) -> Result<Vec<(Duration, ExitStatus)>> {
    let mut ended: Vec<Option<(Duration, ExitStatus)>> = vec![None; children.len()];
    while ended.iter().any(Option::is_none) {
        for (child, end) in children.iter_mut().zip(&mut ended) {
            if end.is_none()
                && let Some(status) = child.try_wait()?
            {
                *end = Some((started.elapsed(), status));
            }
        }
        sleep(Duration::from_millis(50));
    }
    Ok(ended.into_iter().flatten().collect())
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
    fn a_command_run_beside_another_runs_at_the_same_time_and_its_failure_fails_the_step() {
        let sh = |script: &str| {
            let mut command = Command::new("sh");
            command.args(["-c", script]);
            command
        };
        let mut steps = Steps::new("test", 2);
        let started = Instant::now();
        steps
            .run_beside_as(
                Kind::Test,
                "both pass",
                &mut sh("sleep 1"),
                ("xtask-step-test-beside", &mut sh("sleep 1; echo beside")),
            )
            .expect("both pass");
        assert!(
            started.elapsed() < Duration::from_millis(1900),
            "not at once"
        );
        let log = project_root().join("target/xtask-logs/xtask-step-test-beside.log");
        assert_eq!(fs::read_to_string(&log).expect("log"), "beside\n");
        let failed = steps
            .run_beside_as(
                Kind::Test,
                "beside fails",
                &mut sh("true"),
                ("xtask-step-test-beside", &mut sh("exit 3")),
            )
            .expect_err("fails");
        assert!(
            failed.to_string().contains("xtask-step-test-beside"),
            "{failed}"
        );
        assert_eq!(steps.done.len(), 1, "a failed step is not recorded as done");
        let _ = fs::remove_file(log);
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
