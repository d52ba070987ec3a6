//! Reads and plants lock directories the way the protocol writes them, independently of the
//! crate's own code: a lock at `P` is a directory holding exactly one state entry whose *name*
//! is the lease state, `free.<gen>` or
//! `held.<gen>.<seq>.<token16hex>.<kernel16hex|n>.<scale16hex|n>.<deadline_ns>.<duration_ns>`,
//! and whose content is the holder's diagnostic record.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

/// The holder's description as the protocol writes it (JSON, schema version 1): read here with
/// its own definition, so the tests do not lean on the crate's private one.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub struct Record {
    pub version: u32,
    #[serde(default)]
    pub owner: Option<String>,
    #[serde(default)]
    pub label: Option<String>,
    pub pid: u32,
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub heartbeat: u64,
    #[serde(default)]
    pub written_at_ns: u64,
    #[serde(default)]
    pub acquired_at_ns: u64,
    #[serde(default)]
    pub expires_at_ns: u64,
    pub generation: u64,
    #[serde(default)]
    pub tenure: bool,
    #[serde(default)]
    pub protocol: Option<String>,
}

/// The record schema version the protocol writes.
pub const SCHEMA_VERSION: u32 = 1;

impl Record {
    /// Parses a description (JSON, maybe padded with spaces).
    pub fn parse(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

/// A held lease as its state entry's name says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub generation: u64,
    pub seq: u64,
    pub token: u64,
    pub kernel: Option<u64>,
    pub scale: Option<u64>,
    pub deadline_ns: u64,
    pub duration_ns: u64,
}

/// The lease state a directory's state entry names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    Free(u64),
    Held(Held),
}

impl State {
    pub fn generation(&self) -> u64 {
        match self {
            Self::Free(g) => *g,
            Self::Held(h) => h.generation,
        }
    }

    pub fn held(&self) -> Option<&Held> {
        match self {
            Self::Free(_) => None,
            Self::Held(h) => Some(h),
        }
    }
}

fn hex_or_n(value: Option<u64>) -> String {
    value.map_or_else(|| "n".to_owned(), |v| format!("{v:016x}"))
}

impl Held {
    /// A hung holder on a clock nobody shares (`scale` = `n`): it can only expire by being
    /// observed unchanged for `duration`.
    pub fn hung(generation: u64, duration: Duration) -> Self {
        Self {
            generation,
            seq: 7,
            token: fnv(b"hung-owner"),
            kernel: None,
            scale: None,
            deadline_ns: 0,
            duration_ns: u64::try_from(duration.as_nanos()).unwrap(),
        }
    }

    pub fn name(&self) -> String {
        format!(
            "held.{}.{}.{:016x}.{}.{}.{}.{}",
            self.generation,
            self.seq,
            self.token,
            hex_or_n(self.kernel),
            hex_or_n(self.scale),
            self.deadline_ns,
            self.duration_ns
        )
    }
}

/// Parses a state entry name; `None` for anything else.
pub fn parse(name: &str) -> Option<State> {
    if let Some(g) = name.strip_prefix("free.") {
        return g.parse().ok().map(State::Free);
    }
    let fields: Vec<&str> = name.strip_prefix("held.")?.split('.').collect();
    let [generation, seq, token, kernel, scale, deadline, duration] = fields[..] else {
        return None;
    };
    let hex = |s: &str| (s.len() == 16).then(|| u64::from_str_radix(s, 16).ok())?;
    let opt = |s: &str| {
        if s == "n" {
            Some(None)
        } else {
            hex(s).map(Some)
        }
    };
    Some(State::Held(Held {
        generation: generation.parse().ok()?,
        seq: seq.parse().ok()?,
        token: hex(token)?,
        kernel: opt(kernel)?,
        scale: opt(scale)?,
        deadline_ns: deadline.parse().ok()?,
        duration_ns: duration.parse().ok()?,
    }))
}

/// Every entry of the lock directory, sorted.
pub fn entries(path: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        // Windows: the `cas` lock file every lock directory has there is no entry of the
        // protocol's (the platforms page, *Windows*).
        .filter(|name| !(cfg!(windows) && name == "cas"))
        .collect();
    names.sort();
    names
}

/// How often the readers below look again when a holder's heartbeat renamed the state entry
/// under them (the name is the state, so a renewal renames it): a few thousand renames away
/// from a real failure, which never goes away by looking again.
const RENAMED_RETRIES: usize = 2000;

/// The state entry of the lock directory at `path`: panics unless there is exactly one entry
/// and it is a state entry.
///
/// A listing taken while a heartbeat renames the entry may miss it or see it twice, so a
/// listing that is not exactly one state entry is taken again (bounded) before it fails.
pub fn state(path: &Path) -> (String, State) {
    let mut names = entries(path);
    for _ in 0..RENAMED_RETRIES {
        if let [name] = &names[..]
            && let Some(state) = parse(name)
        {
            return (name.clone(), state);
        }
        std::thread::sleep(Duration::from_micros(100));
        names = entries(path);
    }
    assert_eq!(
        names.len(),
        1,
        "one state entry in {}: {names:?}",
        path.display()
    );
    let state = parse(&names[0]).unwrap_or_else(|| panic!("not a state entry: {}", names[0]));
    (names[0].clone(), state)
}

/// The state entry of the lock directory at `path` with its content, read through one
/// descriptor: the name is listed, then opened, and when a heartbeat renamed it in between
/// (`ENOENT`), listed and opened again (bounded), so name and content belong together.
pub fn state_with_content(path: &Path) -> (String, State, Vec<u8>) {
    for _ in 0..RENAMED_RETRIES {
        let (name, state) = state(path);
        match std::fs::File::open(path.join(&name)) {
            Ok(mut file) => {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut file, &mut bytes).unwrap();
                return (name, state, bytes);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("{}: {e}", path.join(&name).display()),
        }
    }
    panic!(
        "the state entry of {} was renamed {RENAMED_RETRIES} times while being opened",
        path.display()
    )
}

/// The diagnostic record in the state entry (padded with spaces after the JSON).
pub fn description(path: &Path) -> Record {
    Record::parse(&state_with_content(path).2).unwrap()
}

/// Creates the lock directory `path` holding the single state entry `name` (content `bytes`),
/// as another process would have left it.
pub fn plant(path: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir(path).unwrap();
    std::fs::write(path.join(name), bytes).unwrap();
}

/// 64-bit FNV-1a, as state names hash owner tokens.
pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// This host's `CLOCK_MONOTONIC`, the scale holders on this host write deadlines on (Unix;
/// Windows has no shared scale).
#[cfg(unix)]
pub fn monotonic_ns() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    u64::try_from(now.tv_sec()).unwrap() * 1_000_000_000 + u64::try_from(now.tv_nsec()).unwrap()
}

/// The lock directory of a key in a store on `store` (names not verbatim), as the store names
/// it: each part of the key percent-encoded (every byte outside `[A-Za-z0-9_-]` as `%XX`), the
/// sort key after a `.`, then `.lease`.
pub fn key_dir(store: &Path, key: &lease_core::LeaseKey) -> std::path::PathBuf {
    let encode = |part: &str| -> String {
        part.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect()
    };
    let mut name = encode(key.partition());
    if let Some(sort) = key.sort() {
        name.push('.');
        name.push_str(&encode(sort));
    }
    store.join(format!("{name}.lease"))
}
