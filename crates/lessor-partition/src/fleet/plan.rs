//! The deterministic, sticky assignment every worker computes from the same inputs.
//!
//! One entry point, [`plan_with`], in one of two modes chosen from what every planner sees alike
//! (the member list):
//!
//! * **count** (the default, and whenever some member reports no load): every member gets a
//!   target number of units, a function of the member list alone (see [`capped_targets`]), keeps
//!   its lowest-id units up to it and hands the surplus to members below theirs;
//! * **load** (every member reports a load): members balance the sum of their units' loads, as
//!   KCL 3.x balances worker utilisation (see the `load` module).
//!
//! [`plan`] and [`targets`] are the count mode without caps, as the worker has always used it.

use std::collections::BTreeMap;

mod load;

/// Who holds a unit, as the planner sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Holding {
    /// Nobody, or a dead session: free to take.
    Free,
    /// A live member of the plan.
    Member(String),
    /// Someone this planner cannot place yet (a session newer than its view, one whose record is
    /// missing but not yet for a session duration, a foreign token not yet unchanged for one):
    /// left alone, but counted in the targets.
    Pinned,
}

/// One member's part of the plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MemberPlan {
    /// How many units the member should end with. In load mode: how many it holds once this
    /// round's `give` and `take` are done (see the `load` module).
    pub(crate) target: usize,
    /// Units it holds and should give away. Count mode: highest ids go first. Load mode: in the
    /// order to release them; any prefix of the list is itself a valid give.
    pub(crate) give: Vec<String>,
    /// Units it should take, free ones first, then ones others give away.
    pub(crate) take: Vec<String>,
}

/// A member of the plan, as every planner learns it from the member's session record, so that
/// all planners that see the same members see the same caps and loads.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Member {
    /// The worker id.
    pub(crate) id: String,
    /// The most units it will hold (KCL `maxLeasesForWorker`); `None`: no limit.
    pub(crate) max_units: Option<usize>,
    /// The load it last published: the sum of its units' reported loads, added in `units` order
    /// (the order a giver predicts it in). `None`, negative or not finite: not reporting.
    pub(crate) load: Option<f64>,
}

impl Member {
    /// A member with no cap that reports no load: what [`plan`] and [`targets`] plan with.
    #[cfg(test)]
    pub(crate) fn new(id: impl Into<String>) -> Self {
        Member {
            id: id.into(),
            ..Member::default()
        }
    }
}

/// The targets of `members` (sorted ids) for `units` units, with no caps: every member gets
/// `floor(L/W)` and the `L mod W` members with the lowest ids one more.
///
/// A function of the member list alone, so every worker that sees the same members computes the
/// same targets, and they sum to `L`: while any unit is not held by a member, some member is
/// below its target and keeps planning until the unit is taken. When a member leaves, no
/// survivor's target falls (survivors only take); when one joins, no existing member's target
/// rises (existing members only give). [`capped_targets`] with no caps.
#[cfg_attr(not(test), allow(dead_code, reason = "kept for the worker's callers"))]
pub(crate) fn targets(units: usize, members: &[String]) -> BTreeMap<&str, usize> {
    let ids: Vec<&str> = members.iter().map(String::as_str).collect();
    by_id(units, &ids, &vec![None; ids.len()])
}

/// The targets of `members` for `units` units under each member's cap (KCL `maxLeasesForWorker`):
/// water-filling.
///
/// Think of member `m` as owning seats `1..=cap(m)`; the targets are the first `min(L, sum of
/// caps)` seats in the order (seat number, member id). So every member gets the same share
/// `floor`/`ceil` as without caps, except that a member's share stops at its cap and what it
/// cannot take goes to the others, one more each to the lowest ids first. Hence:
///
/// * a function of the member list alone (ids and caps), agreed by every planner that sees it;
/// * the targets sum to `min(L, sum of caps)`, none above its cap, and differ by at most one
///   among members below their cap: while a unit is unowned and some member is below its cap,
///   some member is below its target and keeps planning. When the caps sum below `L`, every
///   member ends at its cap and the remaining units stay unowned by design, as in KCL (whose
///   workers stop taking leases at `maxLeasesForWorker`);
/// * a leave never lowers a survivor's target and a join never raises an existing member's,
///   caps or not: removing a member's seats leaves the others in the same order, so the first
///   `L` seats of the whole, less the leaver's, are among the first `L` of the rest. Likewise
///   raising one member's cap never raises another's target and lowering it never lowers
///   another's.
#[cfg_attr(
    not(test),
    allow(dead_code, reason = "for the worker: the count plan uses water_fill")
)]
pub(crate) fn capped_targets(units: usize, members: &[Member]) -> BTreeMap<&str, usize> {
    let ids: Vec<&str> = members.iter().map(|m| m.id.as_str()).collect();
    let caps: Vec<Option<usize>> = members.iter().map(|m| m.max_units).collect();
    by_id(units, &ids, &caps)
}

/// [`water_fill`] over `ids` in id order, whatever order they come in.
fn by_id<'a>(units: usize, ids: &[&'a str], caps: &[Option<usize>]) -> BTreeMap<&'a str, usize> {
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_by_key(|&i| ids[i]);
    let sorted_caps: Vec<Option<usize>> = order.iter().map(|&i| caps[i]).collect();
    let filled = water_fill(units, &sorted_caps);
    order.iter().map(|&i| ids[i]).zip(filled).collect()
}

/// The first `min(units, sum of caps)` seats in the order (seat number, position), counted per
/// position; `caps` in id order, `None` for no cap.
///
/// Finds the highest level `k <= units` with `sum min(cap, k) <= units`, gives everyone
/// `min(cap, k)`, and one more to the first positions whose cap is above `k` while units last.
fn water_fill(units: usize, caps: &[Option<usize>]) -> Vec<usize> {
    let cap = |c: &Option<usize>| c.unwrap_or(usize::MAX);
    let filled = |level: usize| {
        caps.iter()
            .map(|c| cap(c).min(level))
            .fold(0usize, usize::saturating_add)
    };
    let (mut low, mut high) = (0, units);
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if filled(mid) <= units {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    let mut extra = units - filled(low);
    caps.iter()
        .map(|c| {
            let share = cap(c).min(low);
            if extra > 0 && cap(c) > low {
                extra -= 1;
                share + 1
            } else {
                share
            }
        })
        .collect()
}

/// The count plan without caps for `members`: [`plan_with`] with every member [`Member::new`].
#[cfg(test)]
pub(crate) fn plan(
    units: &[String],
    members: &[String],
    holdings: &BTreeMap<String, Holding>,
) -> BTreeMap<String, MemberPlan> {
    let members: Vec<Member> = members.iter().map(Member::new).collect();
    plan_with(units, &members, holdings, None, "")
}

/// The plan for every member, as the member `me` computes it.
///
/// `members` in any order (planned in id order); `holdings` as the last units listing showed
/// them (a unit missing is free); `own_loads` the load of each unit `me` holds, known to `me`
/// only. Count mode unless every member reports a load, then load mode (the `load` module);
/// `own_loads` and `me` matter in load mode only.
///
/// Count mode:
///
/// * Targets: see [`capped_targets`]; every unit counts, including units this planner cannot
///   place yet ([`Holding::Pinned`]), so the targets of one member list always sum to
///   `min(L, sum of caps)`.
/// * Sticky: a member keeps its lowest-id units up to its target; only the surplus moves.
/// * The pool (free units first, then surplus) is dealt to members under target in id order.
///   Pinned units are never dealt. With caps summing below `L`, what the pool has left stays
///   free (a member above its cap still gives its surplus up).
pub(crate) fn plan_with(
    units: &[String],
    members: &[Member],
    holdings: &BTreeMap<String, Holding>,
    own_loads: Option<&BTreeMap<String, f64>>,
    me: &str,
) -> BTreeMap<String, MemberPlan> {
    let mut sorted: Vec<&Member> = members.iter().collect();
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    sorted.dedup_by(|a, b| a.id == b.id);
    let split = Split::new(units, &sorted, holdings);
    match load::shared_loads(&sorted) {
        Some(loads) => load::plan(&sorted, &loads, &split, own_loads, me),
        None => count_plan(units.len(), &sorted, &split),
    }
}

/// The count mode of [`plan_with`] for `members` in id order.
fn count_plan(
    units: usize,
    members: &[&Member],
    split: &Split<'_>,
) -> BTreeMap<String, MemberPlan> {
    let caps: Vec<Option<usize>> = members.iter().map(|m| m.max_units).collect();
    let targets = water_fill(units, &caps);
    let beyond = |list: &[&String], target: usize| -> Vec<String> {
        let over = list.get(target..).unwrap_or_default();
        over.iter().map(|u| (*u).clone()).collect()
    };
    let mut plans: Vec<MemberPlan> = split
        .held
        .iter()
        .zip(&targets)
        .map(|(list, &target)| MemberPlan {
            target,
            give: beyond(list, target),
            take: Vec::new(),
        })
        .collect();
    let mut surplus: Vec<String> = plans.iter().flat_map(|p| p.give.clone()).collect();
    surplus.sort();
    let mut pool = split.free.iter().map(|u| (*u).clone()).chain(surplus);
    for ((plan, list), &target) in plans.iter_mut().zip(&split.held).zip(&targets) {
        plan.take = pool
            .by_ref()
            .take(target.saturating_sub(list.len()))
            .collect();
    }
    members.iter().map(|m| m.id.clone()).zip(plans).collect()
}

/// What a planner sees of the units: each member's units and the free ones, in `units` order.
#[derive(Debug)]
struct Split<'u> {
    /// The units each member holds, by position in the id-sorted member list.
    held: Vec<Vec<&'u String>>,
    /// The units nobody (or a dead session) holds.
    free: Vec<&'u String>,
}

impl<'u> Split<'u> {
    /// Sorts `units` by their holding; units of non-members and pinned units are in neither.
    fn new(units: &'u [String], members: &[&Member], holdings: &BTreeMap<String, Holding>) -> Self {
        let index: BTreeMap<&str, usize> = members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.id.as_str(), i))
            .collect();
        let mut held = vec![Vec::new(); members.len()];
        let mut free = Vec::new();
        for unit in units {
            match holdings.get(unit).unwrap_or(&Holding::Free) {
                Holding::Pinned => {}
                Holding::Member(m) => {
                    if let Some(&i) = index.get(m.as_str()) {
                        held[i].push(unit);
                    }
                }
                Holding::Free => free.push(unit),
            }
        }
        Split { held, free }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i:03}")).collect()
    }

    proptest! {
        /// Executing a plan yields a balanced, complete assignment that plans no further moves,
        /// and moves no more units than the minimum.
        #[test]
        fn plans_balance_in_one_step_and_then_stay(
            units in 1usize..60,
            members in 1usize..8,
            owners in proptest::collection::vec(0usize..10, 60),
        ) {
            let unit_ids = names("u", units);
            let member_ids = names("w", members);
            let holdings: BTreeMap<String, Holding> = unit_ids.iter().zip(&owners).map(|(u, o)| {
                let h = member_ids.get(*o).map_or(Holding::Free, |m| Holding::Member(m.clone()));
                (u.clone(), h)
            }).collect();
            let p = plan(&unit_ids, &member_ids, &holdings);
            let mut after = holdings.clone();
            let mut moved = 0;
            for (m, mp) in &p {
                for u in &mp.take {
                    if after.get(u) != Some(&Holding::Free) { moved += 1; }
                    after.insert(u.clone(), Holding::Member(m.clone()));
                }
            }
            let mut counts: BTreeMap<&String, usize> = BTreeMap::new();
            for h in after.values() {
                match h {
                    Holding::Member(m) => *counts.entry(m).or_default() += 1,
                    _ => prop_assert!(false, "unit left unowned"),
                }
            }
            let (lo, hi) = (units / members, units.div_ceil(members));
            for m in &member_ids {
                let c = counts.get(m).copied().unwrap_or(0);
                prop_assert!(c >= lo && c <= hi, "{m} has {c}, want {lo}..={hi}");
            }
            // Minimum moves: units above each member's ceiling must move, at least.
            let again = plan(&unit_ids, &member_ids, &after);
            prop_assert!(again.values().all(|mp| mp.take.is_empty() && mp.give.is_empty()));
            let over: usize = member_ids.iter().map(|m| {
                holdings.values().filter(|h| **h == Holding::Member(m.clone())).count()
            }).map(|c| c.saturating_sub(hi)).sum();
            let gives: usize = p.values().map(|mp| mp.give.len()).sum();
            prop_assert_eq!(gives, moved);
            prop_assert!(moved <= over + members, "moved {} > {} + {}", moved, over, members);
        }
    }

    #[test]
    fn a_join_moves_only_the_share() {
        let units = names("u", 12);
        let old = names("w", 3);
        let holdings: BTreeMap<String, Holding> = units
            .iter()
            .enumerate()
            .map(|(i, u)| (u.clone(), Holding::Member(old[i % 3].clone())))
            .collect();
        let mut members = old.clone();
        members.push("w999".into());
        let p = plan(&units, &members, &holdings);
        assert_eq!(p["w999"].take.len(), 3);
        assert_eq!(p.values().map(|mp| mp.give.len()).sum::<usize>(), 3);
    }

    #[test]
    fn targets_sum_to_every_unit_even_with_pinned_ones() {
        let units = names("u", 32);
        let members = names("w", 3);
        let mut holdings: BTreeMap<String, Holding> = units
            .iter()
            .enumerate()
            .map(|(i, u)| (u.clone(), Holding::Member(members[i % 3].clone())))
            .collect();
        // Two units held by someone this planner cannot place yet.
        holdings.insert(units[0].clone(), Holding::Pinned);
        holdings.insert(units[5].clone(), Holding::Pinned);
        let p = plan(&units, &members, &holdings);
        assert_eq!(p.values().map(|mp| mp.target).sum::<usize>(), 32);
        assert_eq!(
            p.values().map(|mp| mp.target).collect::<Vec<_>>(),
            [11, 11, 10]
        );
        // Pinned units are never dealt.
        assert!(p.values().all(|mp| !mp.take.contains(&units[0])));
    }

    proptest! {
        /// A leave never lowers a survivor's target; a join never raises an existing member's.
        #[test]
        fn targets_are_sticky_across_membership_changes(
            units in 0usize..2000,
            members in 2usize..12,
            who in 0usize..12,
        ) {
            let all = names("w", members);
            let who = who % members;
            let fewer: Vec<String> =
                all.iter().enumerate().filter(|(i, _)| *i != who).map(|(_, m)| m.clone()).collect();
            let (big, small) = (targets(units, &all), targets(units, &fewer));
            prop_assert_eq!(big.values().sum::<usize>(), units);
            prop_assert_eq!(small.values().sum::<usize>(), units);
            for (m, t) in &small {
                prop_assert!(*t >= big[m], "{} falls from {} to {}", m, big[m], t);
            }
        }
    }

    /// `members` named `w000`.. with the given caps, reporting no load.
    fn capped(caps: &[Option<usize>]) -> Vec<Member> {
        caps.iter()
            .enumerate()
            .map(|(i, &max_units)| Member {
                max_units,
                ..Member::new(format!("w{i:03}"))
            })
            .collect()
    }

    /// The definition the targets implement: member `m` owns seats `1..=cap(m)`, and the first
    /// `L` seats in the order (seat number, id) are taken.
    fn seat_model(units: usize, members: &[Member]) -> BTreeMap<&str, usize> {
        let mut seats: Vec<(usize, &str)> = members
            .iter()
            .flat_map(|m| (1..=m.max_units.unwrap_or(units)).map(move |s| (s, m.id.as_str())))
            .collect();
        seats.sort();
        let mut out: BTreeMap<&str, usize> = members.iter().map(|m| (m.id.as_str(), 0)).collect();
        for (_, m) in seats.into_iter().take(units) {
            *out.entry(m).or_default() += 1;
        }
        out
    }

    fn caps_strategy() -> impl Strategy<Value = Vec<Option<usize>>> {
        proptest::collection::vec(proptest::option::weighted(0.6, 0usize..40), 1..10)
    }

    proptest! {
        /// Capped targets are the water-filling of the seat model: none above its cap, summing
        /// to `min(L, sum of caps)`, shares differing by at most one among members below cap.
        #[test]
        fn capped_targets_fill_like_water(units in 0usize..300, caps in caps_strategy()) {
            let members = capped(&caps);
            let t = capped_targets(units, &members);
            prop_assert_eq!(&t, &seat_model(units, &members));
            let room: usize = caps.iter().map(|c| c.unwrap_or(units)).fold(0, usize::saturating_add);
            prop_assert_eq!(t.values().sum::<usize>(), units.min(room));
            let top = t.values().copied().max().unwrap_or(0);
            for m in &members {
                let got = t[m.id.as_str()];
                prop_assert!(m.max_units.is_none_or(|c| got <= c));
                if m.max_units.is_none_or(|c| got < c) {
                    prop_assert!(got + 1 >= top, "{} has {} below cap, another has {}", m.id, got, top);
                }
            }
            // Without caps, the same as before.
            let ids: Vec<String> = members.iter().map(|m| m.id.clone()).collect();
            let plain: Vec<Member> = ids.iter().map(Member::new).collect();
            prop_assert_eq!(capped_targets(units, &plain), targets(units, &ids));
        }

        /// With caps, a leave never lowers a survivor's target, a join never raises an existing
        /// member's, and one member's cap going up never raises another's target.
        #[test]
        fn capped_targets_are_sticky(
            units in 0usize..300,
            caps in caps_strategy(),
            who in 0usize..10,
            raise in 0usize..20,
        ) {
            let all = capped(&caps);
            let who = who % all.len();
            let fewer: Vec<Member> =
                all.iter().enumerate().filter(|(i, _)| *i != who).map(|(_, m)| m.clone()).collect();
            let (big, small) = (capped_targets(units, &all), capped_targets(units, &fewer));
            for (m, t) in &small {
                prop_assert!(*t >= big[m], "{} falls from {} to {} on a leave", m, big[m], t);
            }
            let mut raised = all.clone();
            raised[who].max_units = raised[who].max_units.map(|c| c + raise);
            let higher = capped_targets(units, &raised);
            for (m, t) in &higher {
                if *m != all[who].id.as_str() {
                    prop_assert!(*t <= big[m], "{} rises from {} to {} on a cap raise", m, big[m], t);
                }
            }
        }

        /// With caps, executing a count plan gives every member exactly its target, leaves
        /// `L - min(L, sum of caps)` units free, and plans nothing more.
        #[test]
        fn capped_plans_settle_in_one_step(
            units in 1usize..60,
            caps in caps_strategy(),
            owners in proptest::collection::vec(0usize..12, 60),
        ) {
            let unit_ids = names("u", units);
            let members = capped(&caps);
            let holdings: BTreeMap<String, Holding> = unit_ids.iter().zip(&owners).map(|(u, o)| {
                let h = members.get(*o).map_or(Holding::Free, |m| Holding::Member(m.id.clone()));
                (u.clone(), h)
            }).collect();
            let p = plan_with(&unit_ids, &members, &holdings, None, "w000");
            let mut after = holdings.clone();
            for mp in p.values() {
                for u in &mp.give {
                    after.insert(u.clone(), Holding::Free);
                }
            }
            for (m, mp) in &p {
                for u in &mp.take {
                    after.insert(u.clone(), Holding::Member(m.clone()));
                }
            }
            let t = capped_targets(units, &members);
            for m in &members {
                let held = after.values().filter(|h| **h == Holding::Member(m.id.clone())).count();
                prop_assert_eq!(held, t[m.id.as_str()], "{} ends off target", &m.id);
            }
            let free = after.values().filter(|h| **h == Holding::Free).count();
            prop_assert_eq!(free, units - t.values().sum::<usize>());
            let again = plan_with(&unit_ids, &members, &after, None, "w000");
            prop_assert!(again.values().all(|mp| mp.take.is_empty() && mp.give.is_empty()));
        }
    }
}
