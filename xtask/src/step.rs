//! Announced steps: a header per step, the exact command line, fail fast, timings at the end.

use std::fmt::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{Result, project_root};

/// The steps of one task run, in order, with how long each took.
#[derive(Debug)]
pub(crate) struct Steps {
    task: &'static str,
    total: usize,
    done: Vec<(String, Duration)>,
}

impl Steps {
    /// Starts a task run of `total` steps (used only for the `[n/total]` in headers).
    pub(crate) fn new(task: &'static str, total: usize) -> Self {
        Self {
            task,
            total,
            done: Vec::new(),
        }
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
        let elapsed = started.elapsed();
        println!("    ok: {title} ({:.1}s)", elapsed.as_secs_f64());
        self.done.push((title.to_owned(), elapsed));
    }

    /// Runs `command` in the workspace root as one step; a non-zero exit ends the task.
    pub(crate) fn run(&mut self, title: &str, command: &mut Command) -> Result {
        let started = self.announce(title);
        command.current_dir(project_root());
        println!("    $ {}", command_line(command));
        let status = command.status().map_err(|error| {
            format!(
                "{title}: could not start `{}`: {error}",
                command_line(command)
            )
        })?;
        if !status.success() {
            return Err(format!(
                "step `{title}` failed ({status}): {}",
                command_line(command)
            )
            .into());
        }
        self.finish(title, started);
        Ok(())
    }

    /// Prints how long every step took.
    pub(crate) fn summary(&self) {
        let mut text = format!(
            "\n==> xtask {}: all {} steps passed\n",
            self.task,
            self.done.len()
        );
        let total: Duration = self.done.iter().map(|(_, took)| *took).sum();
        for (title, took) in &self.done {
            let _ = writeln!(text, "    {:>7.1}s  {title}", took.as_secs_f64());
        }
        let _ = writeln!(text, "    {:>7.1}s  total", total.as_secs_f64());
        print!("{text}");
    }
}

/// `cargo` from `PATH`: the rustup proxy honours `rust-toolchain.toml`.
pub(crate) fn cargo(args: &[&str]) -> Command {
    let mut command = Command::new("cargo");
    command.args(args);
    command
}

/// The command as one copyable shell line, with the variables it sets in front.
pub(crate) fn command_line(command: &Command) -> String {
    let mut line = String::new();
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
