//! Half-open ranges over the 128-bit keyspace, and sorted sets of them.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// The exclusive upper end of a [`Partition`]: a key, or the end of the keyspace (2^128).
///
/// 2^128 does not fit a `u128`, so the end of the universe is a variant of its own; it sorts after
/// every `At`. Callers see it as [`Partition::high`]: `None` for `Max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum End {
    /// The range ends before this key.
    At(u128),
    /// The range runs to the end of the keyspace: 2^128, exclusive.
    Max,
}

impl End {
    /// Whether `key` lies before this end.
    fn is_after(self, key: u128) -> bool {
        match self {
            Self::At(end) => key < end,
            Self::Max => true,
        }
    }

    /// The last key before this end (`end - 1`); `None` for `At(0)`.
    fn last_key(self) -> Option<u128> {
        match self {
            Self::At(end) => end.checked_sub(1),
            Self::Max => Some(u128::MAX),
        }
    }

    /// `self <= key` as ends: whether a range ending here stops at or before `key`.
    fn is_at_or_before(self, key: u128) -> bool {
        match self {
            Self::At(end) => end <= key,
            Self::Max => false,
        }
    }
}

/// A non-empty half-open range `[low, high)` of 128-bit keys.
///
/// `high` may be 2^128 ([`Partition::to_end`], whose [`high`](Partition::high) is `None`), so the
/// whole keyspace, [`Partition::universe`], is representable. The text form is `"<low>_<high>"`
/// in lowercase hex without padding, as LUCI writes it; the universe is
/// `"0_100000000000000000000000000000000"`.
///
/// ```
/// use lessor_partition::Partition;
///
/// let all = Partition::universe();
/// let halves = all.split(2);
/// assert_eq!(halves[0].to_string(), "0_80000000000000000000000000000000");
/// assert_eq!(halves[1].to_string(), "80000000000000000000000000000000_100000000000000000000000000000000");
///
/// let p: Partition = "10_20".parse()?;
/// assert_eq!((p.low(), p.high()), (0x10, Some(0x20)));
/// assert_eq!(p.subtract(&"14_18".parse()?), vec!["10_14".parse()?, "18_20".parse()?]);
/// # Ok::<(), lessor_partition::ParsePartitionError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Partition {
    low: u128,
    end: End,
}

impl Partition {
    /// `[low, high)`, or `None` if it would be empty (`high <= low`).
    pub fn new(low: u128, high: u128) -> Option<Self> {
        (low < high).then_some(Self {
            low,
            end: End::At(high),
        })
    }

    /// `[low, 2^128)`: from `low` to the end of the keyspace.
    pub fn to_end(low: u128) -> Self {
        Self { low, end: End::Max }
    }

    /// `[low, end)`, or `None` if empty.
    pub(crate) fn with_end(low: u128, end: End) -> Option<Self> {
        end.is_after(low).then_some(Self { low, end })
    }

    /// The whole keyspace `[0, 2^128)`.
    pub fn universe() -> Self {
        Self::to_end(0)
    }

    /// The first key in the range.
    pub fn low(&self) -> u128 {
        self.low
    }

    /// The exclusive upper bound, `None` when it is 2^128.
    pub fn high(&self) -> Option<u128> {
        match self.end {
            End::At(high) => Some(high),
            End::Max => None,
        }
    }

    /// The last key in the range.
    pub(crate) fn last(&self) -> u128 {
        // Non-empty, so `end > low >= 0` and `end - 1` exists.
        self.end.last_key().unwrap_or(self.low)
    }

    /// How many keys the range holds, minus one (the universe holds 2^128 keys, which does not fit
    /// a `u128`).
    pub(crate) fn len_minus_one(&self) -> u128 {
        self.last() - self.low
    }

    /// Whether `key` is in the range.
    pub fn contains(&self, key: u128) -> bool {
        self.low <= key && self.end.is_after(key)
    }

    /// Whether the two ranges share a key.
    pub(crate) fn overlaps(&self, other: &Self) -> bool {
        self.intersection(other).is_some()
    }

    /// The keys in both ranges, if any.
    pub fn intersection(&self, other: &Self) -> Option<Self> {
        Self::with_end(self.low.max(other.low), self.end.min(other.end))
    }

    /// The keys of `self` not in `other`: zero, one or two ranges, in order.
    pub fn subtract(&self, other: &Self) -> Vec<Self> {
        if !self.overlaps(other) {
            return vec![*self];
        }
        let mut out = Vec::with_capacity(2);
        if self.low < other.low {
            out.push(Self {
                low: self.low,
                end: End::At(other.low),
            });
        }
        if let End::At(other_end) = other.end
            && let Some(right) = Self::with_end(other_end, self.end)
        {
            out.push(right);
        }
        out
    }

    /// The union of two ranges that overlap or touch (`[a, b)` and `[b, c)`), else `None`.
    pub fn merge(&self, other: &Self) -> Option<Self> {
        let (first, second) = if self.low <= other.low {
            (self, other)
        } else {
            (other, self)
        };
        // They touch or overlap iff the second starts no later than the first ends.
        if first.end.is_at_or_before(second.low) && first.end != End::At(second.low) {
            return None;
        }
        Some(Self {
            low: first.low,
            end: first.end.max(second.end),
        })
    }

    /// Splits into `n` contiguous ranges whose sizes differ by at most one key, in order. A range
    /// with fewer than `n` keys splits into single keys; `n == 0` gives nothing.
    pub fn split(&self, n: usize) -> Vec<Self> {
        if n <= 1 {
            return if n == 1 { vec![*self] } else { Vec::new() };
        }
        let n = n as u128;
        let len_m1 = self.len_minus_one();
        // len = len_m1 + 1 may be 2^128: compute len / n and len % n without overflow.
        let (mut size, mut extra) = (len_m1 / n, len_m1 % n + 1);
        if extra == n {
            size += 1;
            extra = 0;
        }
        let parts = if size == 0 { extra } else { n };
        let mut out = Vec::with_capacity(usize::try_from(parts).unwrap_or(0));
        let mut low = self.low;
        for i in 0..parts {
            let this = size + u128::from(i < extra);
            // `this >= 1`; the last part ends at the range's end even when that is 2^128.
            let end = if i + 1 == parts {
                self.end
            } else {
                End::At(low + this)
            };
            out.push(Self { low, end });
            if let End::At(next) = end {
                low = next;
            }
        }
        out
    }
}

impl Ord for Partition {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.low, self.end).cmp(&(other.low, other.end))
    }
}

impl PartialOrd for Partition {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.end {
            End::At(high) => write!(f, "{:x}_{:x}", self.low, high),
            End::Max => write!(f, "{:x}_1{:032x}", self.low, 0u128),
        }
    }
}

impl fmt::Debug for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Partition({self})")
    }
}

/// Why a text form is not a partition.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid partition {text:?}: {reason}")]
pub struct ParsePartitionError {
    text: String,
    reason: &'static str,
}

impl ParsePartitionError {
    fn new(text: &str, reason: &'static str) -> Self {
        Self {
            text: text.chars().take(80).collect(),
            reason,
        }
    }
}

fn parse_hex(text: &str, whole: &str) -> Result<Option<u128>, ParsePartitionError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ParsePartitionError::new(
            whole,
            "bounds must be non-empty hex numbers",
        ));
    }
    let trimmed = text.trim_start_matches('0');
    if trimmed.len() == 33 && trimmed.starts_with('1') && trimmed[1..].bytes().all(|b| b == b'0') {
        return Ok(None);
    }
    if trimmed.len() > 32 {
        return Err(ParsePartitionError::new(
            whole,
            "bound is larger than 2^128",
        ));
    }
    let digits = if trimmed.is_empty() { "0" } else { trimmed };
    u128::from_str_radix(digits, 16)
        .map(Some)
        .map_err(|_| ParsePartitionError::new(whole, "bound is not a hex number"))
}

impl FromStr for Partition {
    type Err = ParsePartitionError;

    /// Parses `"<low>_<high>"` in hex (either case, leading zeros allowed); `high` may be
    /// `100000000000000000000000000000000` (2^128).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (low, high) = text
            .split_once('_')
            .ok_or_else(|| ParsePartitionError::new(text, "expected \"<low>_<high>\""))?;
        let low = parse_hex(low, text)?
            .ok_or_else(|| ParsePartitionError::new(text, "low bound must be below 2^128"))?;
        let end = parse_hex(high, text)?.map_or(End::Max, End::At);
        Self::with_end(low, end)
            .ok_or_else(|| ParsePartitionError::new(text, "high bound must be above low bound"))
    }
}

/// A set of keys kept as sorted, disjoint, non-adjacent [`Partition`]s: adding merges neighbours,
/// removing splits.
///
/// ```
/// use lessor_partition::{Partition, PartitionSet};
///
/// let mut set = PartitionSet::new();
/// set.insert("0_10".parse()?);
/// set.insert("10_20".parse()?); // merges with its neighbour
/// set.remove(&"4_8".parse()?);
/// assert_eq!(set.to_string(), "0_4,8_20");
/// assert!(set.contains(0x9) && !set.contains(0x5));
/// # Ok::<(), lessor_partition::ParsePartitionError>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct PartitionSet {
    ranges: Vec<Partition>,
}

impl PartitionSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the set holds no key.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The ranges, sorted, disjoint and never adjacent (`&set` iterates the same).
    pub fn iter(&self) -> std::slice::Iter<'_, Partition> {
        self.ranges.iter()
    }

    /// Whether `key` is in the set.
    pub fn contains(&self, key: u128) -> bool {
        let index = self.ranges.partition_point(|p| p.last() < key);
        self.ranges.get(index).is_some_and(|p| p.contains(key))
    }

    /// Whether any key of `partition` is in the set.
    pub(crate) fn overlaps(&self, partition: &Partition) -> bool {
        let index = self.ranges.partition_point(|p| p.last() < partition.low);
        self.ranges
            .get(index)
            .is_some_and(|p| p.overlaps(partition))
    }

    /// Adds the keys of `partition`, merging with overlapping and adjacent ranges.
    pub fn insert(&mut self, partition: Partition) {
        let mut merged = partition;
        // Every range that overlaps or touches `partition` is contiguous in the sorted list.
        let start = self.ranges.partition_point(|p| {
            p.end.is_at_or_before(partition.low) && p.end != End::At(partition.low)
        });
        let mut stop = start;
        while let Some(next) = self.ranges.get(stop) {
            match merged.merge(next) {
                Some(m) => {
                    merged = m;
                    stop += 1;
                }
                None => break,
            }
        }
        self.ranges.splice(start..stop, [merged]);
    }

    /// Removes the keys of `partition`.
    pub fn remove(&mut self, partition: &Partition) {
        let start = self.ranges.partition_point(|p| p.last() < partition.low);
        let mut stop = start;
        let mut kept = Vec::with_capacity(2);
        while let Some(next) = self.ranges.get(stop) {
            if !next.overlaps(partition) {
                break;
            }
            kept.extend(next.subtract(partition));
            stop += 1;
        }
        self.ranges.splice(start..stop, kept);
    }

    /// The keys in both sets.
    pub fn intersection(&self, other: &Self) -> Self {
        let mut out = Vec::new();
        let (mut i, mut j) = (0, 0);
        while let (Some(a), Some(b)) = (self.ranges.get(i), other.ranges.get(j)) {
            if let Some(both) = a.intersection(b) {
                out.push(both);
            }
            if a.end <= b.end {
                i += 1;
            } else {
                j += 1;
            }
        }
        Self { ranges: out }
    }

    /// The keys of `self` not in `other`.
    pub fn difference(&self, other: &Self) -> Self {
        let mut out = self.clone();
        for p in &other.ranges {
            out.remove(p);
        }
        out
    }

    /// The keys in either set.
    pub fn union(&self, other: &Self) -> Self {
        let mut out = self.clone();
        for p in &other.ranges {
            out.insert(*p);
        }
        out
    }
}

impl From<Partition> for PartitionSet {
    /// The set holding one range.
    fn from(partition: Partition) -> Self {
        Self {
            ranges: vec![partition],
        }
    }
}

impl FromIterator<Partition> for PartitionSet {
    fn from_iter<I: IntoIterator<Item = Partition>>(iter: I) -> Self {
        let mut set = Self::new();
        for p in iter {
            set.insert(p);
        }
        set
    }
}

impl<'a> IntoIterator for &'a PartitionSet {
    type Item = &'a Partition;
    type IntoIter = std::slice::Iter<'a, Partition>;
    fn into_iter(self) -> Self::IntoIter {
        self.ranges.iter()
    }
}

impl fmt::Display for PartitionSet {
    /// The ranges' text forms joined by commas (`"0_4,8_20"`); the empty set is `""`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for PartitionSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PartitionSet[{self}]")
    }
}

impl FromStr for PartitionSet {
    type Err = ParsePartitionError;

    /// Parses the comma-separated form written by `Display`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.is_empty() {
            return Ok(Self::new());
        }
        text.split(',').map(str::parse).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(text: &str) -> Partition {
        text.parse().expect("valid partition")
    }

    #[test]
    fn universe_round_trips_and_splits_evenly() {
        let u = Partition::universe();
        assert_eq!(u.to_string().parse::<Partition>(), Ok(u));
        assert_eq!(u.len_minus_one(), u128::MAX);
        let parts = u.split(3);
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[2].end, End::Max);
        let sizes: Vec<u128> = parts.iter().map(Partition::len_minus_one).collect();
        assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
        assert_eq!(u.split(1), vec![u]);
        assert_eq!(p("0_3").split(5).len(), 3);
        assert!(u.split(0).is_empty());
    }

    #[test]
    fn rejects_bad_text() {
        for bad in [
            "",
            "_",
            "1_",
            "_1",
            "2_1",
            "1_1",
            "x_2",
            "0_200000000000000000000000000000000",
            "100000000000000000000000000000000_100000000000000000000000000000000",
            "1_2_3",
        ] {
            assert!(bad.parse::<Partition>().is_err(), "{bad}");
        }
        assert_eq!(p("00A_0F").to_string(), "a_f");
    }

    #[test]
    fn merge_needs_contact() {
        assert_eq!(p("0_5").merge(&p("5_9")), Some(p("0_9")));
        assert_eq!(p("5_9").merge(&p("0_6")), Some(p("0_9")));
        assert_eq!(p("0_5").merge(&p("6_9")), None);
        assert_eq!(
            Partition::to_end(5).merge(&p("0_5")),
            Some(Partition::universe())
        );
    }

    /// Keys near the interesting places: zero, small numbers, and the top of the keyspace.
    fn key() -> impl Strategy<Value = u128> {
        prop_oneof![0u128..40, (0u128..40).prop_map(|k| u128::MAX - k)]
    }

    fn partition() -> impl Strategy<Value = Partition> {
        (key(), key(), any::<bool>()).prop_map(|(a, b, to_end)| {
            let (lo, hi) = (a.min(b), a.max(b));
            if to_end || lo == hi {
                Partition::to_end(lo)
            } else {
                Partition::new(lo, hi).unwrap_or_else(|| Partition::to_end(lo))
            }
        })
    }

    /// The points where membership can change: every bound and its neighbours.
    fn probes(parts: &[Partition]) -> Vec<u128> {
        let mut out = vec![0, u128::MAX];
        for q in parts {
            for k in [q.low(), q.last()] {
                out.extend([k.saturating_sub(1), k, k.saturating_add(1)]);
            }
        }
        out
    }

    proptest! {
        #[test]
        fn text_form_round_trips(a in partition()) {
            prop_assert_eq!(a.to_string().parse::<Partition>(), Ok(a));
        }

        #[test]
        fn subtract_and_intersect_match_the_model(a in partition(), b in partition()) {
            let diff = a.subtract(&b);
            let both = a.intersection(&b);
            for k in probes(&[a, b]) {
                let in_diff = diff.iter().filter(|d| d.contains(k)).count();
                prop_assert_eq!(in_diff == 1, a.contains(k) && !b.contains(k));
                prop_assert!(in_diff <= 1);
                prop_assert_eq!(both.is_some_and(|x| x.contains(k)), a.contains(k) && b.contains(k));
            }
            prop_assert!(diff.windows(2).all(|w| w[0].last() < w[1].low()));
        }

        #[test]
        fn split_tiles_the_range(a in partition(), n in 1usize..9) {
            let parts = a.split(n);
            prop_assert!(!parts.is_empty() && parts.len() <= n);
            prop_assert_eq!(parts[0].low(), a.low());
            prop_assert_eq!(parts[parts.len() - 1].end, a.end);
            for w in parts.windows(2) {
                prop_assert_eq!(w[0].end, End::At(w[1].low()));
                let (x, y) = (w[0].len_minus_one(), w[1].len_minus_one());
                prop_assert!(x >= y && x - y <= 1);
            }
            let merged = parts.iter().try_fold(None::<Partition>, |acc, q| match acc {
                None => Some(Some(*q)),
                Some(m) => m.merge(q).map(Some),
            });
            prop_assert_eq!(merged, Some(Some(a)));
        }

        #[test]
        fn sets_match_the_model(ops in proptest::collection::vec((any::<bool>(), partition()), 0..12),
                                other in proptest::collection::vec(partition(), 0..4)) {
            let mut set = PartitionSet::new();
            let all: Vec<Partition> = ops.iter().map(|(_, q)| *q).chain(other.iter().copied()).collect();
            let points = probes(&all);
            let mut model: Vec<bool> = vec![false; points.len()];
            for (add, q) in &ops {
                if *add { set.insert(*q) } else { set.remove(q) }
                for (i, k) in points.iter().enumerate() {
                    if q.contains(*k) { model[i] = *add; }
                }
            }
            // Sorted, disjoint and never adjacent.
            for w in set.ranges.windows(2) {
                prop_assert!(w[0].last().checked_add(1).is_some_and(|next| next < w[1].low()));
            }
            for (i, k) in points.iter().enumerate() {
                prop_assert_eq!(set.contains(*k), model[i]);
            }
            let other: PartitionSet = other.into_iter().collect();
            let (inter, diff, uni) = (set.intersection(&other), set.difference(&other), set.union(&other));
            for (i, k) in points.iter().enumerate() {
                prop_assert_eq!(inter.contains(*k), model[i] && other.contains(*k));
                prop_assert_eq!(diff.contains(*k), model[i] && !other.contains(*k));
                prop_assert_eq!(uni.contains(*k), model[i] || other.contains(*k));
            }
            prop_assert_eq!(set.to_string().parse::<PartitionSet>(), Ok(set.clone()));
        }
    }
}
