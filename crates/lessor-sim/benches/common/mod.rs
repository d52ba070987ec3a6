//! What the benches of this crate share: printing a markdown section and writing it to the bench
//! report.

/// Prints `out`, and writes it to `$LEASE_BENCH_OUT/<file>` when that variable is set (as
/// `cargo xtask bench` does, to join the sections into its report); exits 1 if it cannot.
pub(crate) fn publish(file: &str, out: &str) {
    print!("{out}");
    if let Ok(dir) = std::env::var("LEASE_BENCH_OUT") {
        let path = std::path::Path::new(&dir).join(file);
        if let Err(error) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, out))
        {
            eprintln!("cannot write {}: {error}", path.display());
            std::process::exit(1);
        }
    }
}
