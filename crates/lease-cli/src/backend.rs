//! Opening the store named on the command line, behind one small abstraction.

use std::fmt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use lease_core::{FencingToken, LeaseBackend, LeaseKey};

use crate::exit::Failure;

/// A descriptor sharing the kernel lock of the lease held on a key with a fencing token, for
/// the command to inherit (file store).
pub(crate) type LockSharer =
    Arc<dyn Fn(&LeaseKey, FencingToken) -> Option<std::os::fd::OwnedFd> + Send + Sync>;

/// Lists every key of a store that can enumerate them.
pub(crate) type KeyLister = Arc<dyn Fn() -> Result<Vec<LeaseKey>, String> + Send + Sync>;

/// An open store: the contract every command uses (listing and fenced values are probed on it:
/// [`LeaseBackend::as_listing`], [`LeaseBackend::as_fenced_values`]).
#[derive(Clone)]
pub(crate) struct Backend {
    /// The store.
    pub(crate) leases: Arc<dyn LeaseBackend>,
    /// Every key in the store, for stores that can enumerate them cheaply (a directory).
    pub(crate) all_keys: Option<KeyLister>,
    /// What to call the store in messages: `file store /tmp/lease-1000`.
    pub(crate) description: String,
    /// Shares a held lease's kernel lock with the command (file store, kernel mode).
    pub(crate) kernel_lock: Option<LockSharer>,
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backend")
            .field("leases", &self.leases)
            .field("lists", &self.leases.as_listing().is_some())
            .field("description", &self.description)
            .finish_non_exhaustive()
    }
}

impl Backend {
    /// An opened store, described as `description` in messages.
    pub(crate) fn new(store: impl LeaseBackend + 'static, description: String) -> Self {
        Self {
            leases: Arc::new(store),
            all_keys: None,
            description,
            kernel_lock: None,
        }
    }
}

/// The default file store directory: `$LEASE_DIR` if set, else `/tmp/lease-$UID`.
///
/// Deliberately not `$XDG_RUNTIME_DIR` or `$TMPDIR`: a cron job, a systemd unit and a login shell
/// of the same user see different values of those, and would then not exclude each other.
pub(crate) fn default_dir() -> PathBuf {
    match std::env::var_os("LEASE_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(format!("/tmp/lease-{}", nix::unistd::getuid())),
    }
}

/// Creates the shared default store directory (`private`) if needed and checks it: mode 0700,
/// belonging to this user and writable by nobody else: in `/tmp`, another user could otherwise
/// create it first and read or break our leases. A directory named with `--file` is created
/// and checked by the store itself (`DirectoryStore`'s ownership checks), through descriptors.
///
/// Either way at most the last component of the path is created: a missing parent is refused
/// (exit 69), so that a typo (`--file /var/lib/jbos/leases`) does not make a second store in
/// which every lease is free.
pub(crate) fn prepare_dir(dir: &Path, private: bool) -> Result<PathBuf, Failure> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty())
        && std::fs::symlink_metadata(dir).is_err()
        && !std::fs::metadata(parent).is_ok_and(|m| m.is_dir())
    {
        tracing::debug!(dir = %dir.display(), "the store's parent directory is missing");
        return Err(Failure::unavailable(format!(
            "cannot use {} as the lease directory: its parent {} does not exist; lease creates \
             only the last component of a store's path (a mistyped path must not make a second \
             store): create the parent first, or check the path",
            dir.display(),
            parent.display()
        )));
    }
    if !private {
        return Ok(dir.to_path_buf());
    }
    let cannot = |what: &str, error: &dyn fmt::Display| {
        Failure::unavailable(format!(
            "cannot use {} as the lease directory: {what}: {error}",
            dir.display()
        ))
    };
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => tracing::info!(dir = %dir.display(), "created the lease directory"),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(cannot("cannot create it", &error)),
    }
    let meta = std::fs::metadata(dir).map_err(|e| cannot("cannot read it", &e))?;
    if !meta.is_dir() {
        return Err(cannot("not a directory", &"exists as a file"));
    }
    let uid = nix::unistd::getuid().as_raw();
    if meta.uid() != uid {
        return Err(cannot(
            "owned by another user",
            &format!("uid {} (set LEASE_DIR or pass --file)", meta.uid()),
        ));
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Err(cannot(
            "writable by other users",
            &format!(
                "mode {:o} (chmod 700 it)",
                meta.permissions().mode() & 0o777
            ),
        ));
    }
    Ok(dir.to_path_buf())
}

/// Parses a key as written on the command line: `name`, or `partition#sort` (how keys print).
///
/// A key that begins with `-` is refused: on a command line it is a forgotten value followed by
/// the next option (`--key --ttl 5s`) far more often than a name.
pub(crate) fn parse_key(text: &str) -> Result<LeaseKey, Failure> {
    if text.starts_with('-') {
        return Err(Failure::usage(format!(
            "bad --key {}: a key given to lease must not begin with '-' (is a value missing \
             before the next option?)",
            shown(text)
        )));
    }
    let key = match text.split_once('#') {
        Some((partition, sort)) => LeaseKey::with_sort_key(partition, sort),
        None => LeaseKey::new(text),
    };
    key.map_err(|error| Failure::usage(format!("bad --key {}: {error}", shown(text))))
}

/// The most characters of a user's value a message quotes.
const SHOWN_CHARS: usize = 64;

/// `text` quoted for a message, cut to its first [`SHOWN_CHARS`] characters when longer (a
/// 100 KB key must not become a 100 KB message): `"aaaa"...` (3000 bytes)`.
pub(crate) fn shown(text: &str) -> String {
    match text.char_indices().nth(SHOWN_CHARS) {
        None => format!("{text:?}"),
        Some((end, _)) => format!("{:?}... ({} bytes)", &text[..end], text.len()),
    }
}

/// `key` as a message names it: whole up to [`SHOWN_CHARS`] characters, else cut like
/// [`shown`] (a valid key may still be too long for a store, and is then refused by it).
pub(crate) fn shown_key(key: &LeaseKey) -> String {
    let text = key.to_string();
    if text.chars().nth(SHOWN_CHARS).is_none() {
        text
    } else {
        shown(&text)
    }
}

/// The lease a command names: `--key KEY` in the store, or `--path PATH`, the lock at exactly
/// PATH, which is the key named PATH's file name in a store with verbatim names on PATH's
/// directory (opened by `stores::open_for`).
///
/// In the file store, a key that looks like a lock file's name (`x.lock`, `.x`) is refused with
/// a pointer to `--path`: it would name `DIR/<encoded KEY>.lease`, never the file an operator
/// moving from flock(1) or Go kit/lockfile means, and a Go process holding that file would not
/// keep `lease` out.
pub(crate) fn lease_key(
    key: Option<&str>,
    path: Option<&Path>,
    file_store: bool,
) -> Result<LeaseKey, Failure> {
    match (key, path) {
        (Some(text), _) => {
            if file_store && (text.starts_with('.') || text.ends_with(".lock")) {
                return Err(Failure::usage(format!(
                    "--key {text:?} names the lease DIR/<encoded key>.lease in the file store, \
                     not a file named {text:?}; for a lock at an exact path (flock(1)'s, or a \
                     Go kit/lockfile's such as ./.wave-dev.lock) pass --path PATH instead, or \
                     pick a key that does not look like a lock file's name"
                )));
            }
            parse_key(text)
        }
        (None, Some(path)) => {
            let name = path
                .file_name()
                .and_then(|name| name.to_str())
                .ok_or_else(|| {
                    Failure::usage(format!(
                        "bad --path {}: it must end in a file name in UTF-8",
                        path.display()
                    ))
                })?;
            LeaseKey::new(name)
                .map_err(|error| Failure::usage(format!("bad --path {}: {error}", path.display())))
        }
        (None, None) => Err(Failure::usage("pass --key KEY or --path PATH")),
    }
}

/// `pid 4242 on host build-7`: how this process describes itself as a holder.
pub(crate) fn owner_description() -> String {
    format!("pid {} on host {}", std::process::id(), hostname())
}

/// This host's name, or `unknown` if the system does not say.
pub(crate) fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_like_they_print() {
        let key = parse_key("tenant#job").expect("valid");
        assert_eq!(key.partition(), "tenant");
        assert_eq!(key.sort(), Some("job"));
        assert_eq!(key.to_string(), "tenant#job");
        assert_eq!(parse_key("deploy").expect("valid").sort(), None);
        assert_eq!(parse_key("").expect_err("empty").code, crate::exit::USAGE);
        assert!(parse_key("a#").is_err());
    }

    #[test]
    fn unusable_directories_are_refused_with_the_reason() {
        let err = prepare_dir(Path::new("/proc/lease-cannot-be-here"), true).expect_err("/proc");
        assert_eq!(err.code, crate::exit::UNAVAILABLE);
        assert!(err.message.contains("/proc/lease-cannot-be-here"), "{err}");

        let dir = tempfile::tempdir().expect("tempdir");
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).expect("mkdir");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = prepare_dir(&shared, true).expect_err("world-writable default");
        assert!(err.message.contains("writable by other users"), "{err}");

        let private = dir.path().join("private");
        prepare_dir(&private, true).expect("created");
        let mode = std::fs::metadata(&private)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}
