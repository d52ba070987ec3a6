//! Re-running this test binary as a helper process (the probe, the pauser): one test of the
//! binary turns into the helper when its arguments are in an environment variable, so the
//! published package carries no helper binaries.

use std::process::Command;

/// A command that runs this test binary again with only the test `test`, handing it `args`
/// (joined by U+001F) in the environment variable `env`.
pub(crate) fn command<S: AsRef<str>>(test: &str, env: &str, args: &[S]) -> Command {
    let joined: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(env, joined.join("\u{1f}"));
    command
}

/// In a process started by [`command`], the helper's arguments (`name` first, as `argv[0]`);
/// elsewhere `None`.
pub(crate) fn args_if_asked(env: &str, name: &str) -> Option<Vec<String>> {
    let joined = std::env::var(env).ok()?;
    let mut args = vec![name.to_owned()];
    args.extend(joined.split('\u{1f}').map(str::to_owned));
    Some(args)
}

/// Ends the helper process: status 0 on success, 1 with the error on standard error.
pub(crate) fn exit_with(name: &str, outcome: Result<(), String>) -> ! {
    let code = match outcome {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("{name}: {error}");
            1
        }
    };
    std::process::exit(code);
}
