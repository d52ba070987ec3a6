//! Take lists: what the assigner planned for each other member, so that a membership change
//! costs the followers `O(units moved)` records instead of a listing of all `L` units each.
//!
//! The assigner lists the units when it plans (as every planner does) and writes, for each
//! other member whose part changed, one fenced value `fleet/F/takes` / worker id: the digest of
//! the membership it planned for, the member's target and the units the plan deals it. A
//! follower that must plan again reads its own list (one request, one record) instead of the
//! units listing; when the digest is that of its own view, it reads each listed unit's record
//! (one request each) and judges it by exactly the rule it applies to a listing (its own
//! verdicts, its own conditional release and acquire), and gives its surplus above the target.
//!
//! A list only decides *what* a follower looks at. The values are fenced by the assigner
//! lease's fencing token, so a paused or deposed assigner cannot overwrite a newer one's list;
//! and a wrong or stale list (an old membership, a confused assigner) can only make a follower
//! look at the wrong units, give too much, or fall back to listing: never trust a unit another
//! trusts.

use lease_core::{FencingToken, LeaseError, LeaseKey};

use super::builder::Config;
use super::counted::CountedStore;

/// The format tag of a take list.
const TAG: &str = "t1";

/// One member's part of a plan, as the assigner publishes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TakeList {
    /// The digest of the membership planned for ([`super::assigner::digest`] with no suspects).
    pub(crate) plan: u64,
    /// How many units the member should end with.
    pub(crate) target: usize,
    /// The units dealt to it, or `None` when they do not fit in a value (the member lists).
    pub(crate) units: Option<Vec<String>>,
}

impl TakeList {
    /// The value written: `t1 <plan hex> <target>` then one unit per line, or ` full` when the
    /// units do not fit in a fenced value or a name holds a line break.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let head = format!("{TAG} {:x} {}", self.plan, self.target);
        let fits = self.units.as_ref().filter(|units| {
            let bytes: usize = units.iter().map(|u| u.len() + 1).sum();
            head.len() + bytes <= lease_core::MAX_FENCED_VALUE_BYTES
                && units.iter().all(|u| !u.contains('\n'))
        });
        let mut value = head.into_bytes();
        match fits {
            Some(units) => {
                for unit in units {
                    value.push(b'\n');
                    value.extend_from_slice(unit.as_bytes());
                }
            }
            None => value.extend_from_slice(b" full"),
        }
        value
    }

    /// Parses a value written by [`encode`](Self::encode).
    pub(crate) fn decode(value: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(value).ok()?;
        let mut lines = text.split('\n');
        let mut head = lines.next()?.split(' ');
        if head.next()? != TAG {
            return None;
        }
        let plan = u64::from_str_radix(head.next()?, 16).ok()?;
        let target = head.next()?.parse().ok()?;
        let units = match head.next() {
            Some("full") => None,
            None => Some(lines.map(str::to_owned).collect()),
            Some(_) => return None,
        };
        Some(Self {
            plan,
            target,
            units,
        })
    }
}

/// The name of `worker`'s take list.
pub(crate) fn list_key(config: &Config, worker: &str) -> Option<LeaseKey> {
    let partition = config.takes_key.as_ref()?;
    LeaseKey::with_sort_key(partition.as_str(), worker).ok()
}

/// Reads this worker's take list: one request, a fenced read at `assigner`, the fencing of the
/// assigner lease this worker last heard (raising the fence to it only keeps older assigners
/// out; a newer one's fence refuses the read, and the worker lists). `None` when there is none,
/// it cannot be read, or the store keeps no fenced values.
pub(crate) async fn read(
    config: &Config,
    store: &CountedStore,
    assigner: FencingToken,
) -> Option<TakeList> {
    let key = list_key(config, &config.worker_id)?;
    let fenced = store.fenced()?;
    match fenced.fence_and_read(&key, assigner).await {
        Ok(value) => TakeList::decode(&value?),
        Err(error) => {
            tracing::debug!(worker = %config.worker_id, %error, "fleet: reading the take list failed; listing instead");
            None
        }
    }
}

/// Writes `worker`'s take list under the assigner lease's `fencing`: one request. Fails with
/// [`LeaseError::NotOwned`] when a newer assigner has written it.
pub(crate) async fn write(
    config: &Config,
    store: &CountedStore,
    fencing: FencingToken,
    worker: &str,
    list: &TakeList,
) -> Result<(), LeaseError> {
    let Some(key) = list_key(config, worker) else {
        return Ok(());
    };
    let Some(fenced) = store.fenced() else {
        return Ok(());
    };
    fenced.put_fenced(&key, fencing, &list.encode()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_survives_encoding() {
        let list = TakeList {
            plan: 0xabc,
            target: 7,
            units: Some(vec!["a".into(), "b-2".into()]),
        };
        assert_eq!(TakeList::decode(&list.encode()), Some(list));
        let empty = TakeList {
            plan: 1,
            target: 0,
            units: Some(Vec::new()),
        };
        // An empty list encodes as the head alone; it decodes as no units.
        let decoded = TakeList::decode(&empty.encode()).expect("decodes");
        assert_eq!(decoded.units.map(|u| u.len()), Some(0));
        let odd = TakeList {
            plan: 1,
            target: 1,
            units: Some(vec!["a\nb".into()]),
        };
        assert_eq!(TakeList::decode(&odd.encode()).map(|l| l.units), Some(None));
        assert_eq!(TakeList::decode(b"t2 1 1"), None);
    }
}
