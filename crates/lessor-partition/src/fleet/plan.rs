//! The deterministic, sticky assignment every worker computes from the same inputs.

use std::collections::BTreeMap;

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
    /// How many units the member should end with.
    pub(crate) target: usize,
    /// Units it holds and should give away (highest ids first to go).
    pub(crate) give: Vec<String>,
    /// Units it should take, free ones first, then ones others give away.
    pub(crate) take: Vec<String>,
}

/// The targets of `members` (sorted ids) for `units` units: every member gets `floor(L/W)` and
/// the `L mod W` members with the lowest ids one more.
///
/// A function of the member list alone, so every worker that sees the same members computes the
/// same targets, and they sum to `L`: while any unit is not held by a member, some member is
/// below its target and keeps planning until the unit is taken. When a member leaves, no
/// survivor's target falls (survivors only take); when one joins, no existing member's target
/// rises (existing members only give).
pub(crate) fn targets(units: usize, members: &[String]) -> BTreeMap<&str, usize> {
    let Some(count) = std::num::NonZeroUsize::new(members.len()) else {
        return BTreeMap::new();
    };
    let (quota, extra) = (units / count, units % count);
    members
        .iter()
        .enumerate()
        .map(|(rank, m)| (m.as_str(), quota + usize::from(rank < extra)))
        .collect()
}

/// The plan for every member.
///
/// * Targets: see [`targets`]; every unit counts, including units this planner cannot place
///   yet ([`Holding::Pinned`]), so the targets of one member list always sum to `L`.
/// * Sticky: a member keeps its lowest-id units up to its target; only the surplus moves.
/// * The pool (free units first, then surplus) is dealt to members under target in id order.
///   Pinned units are never dealt.
pub(crate) fn plan(
    units: &[String],
    members: &[String],
    holdings: &BTreeMap<String, Holding>,
) -> BTreeMap<String, MemberPlan> {
    let mut out: BTreeMap<String, MemberPlan> = BTreeMap::new();
    if members.is_empty() {
        return out;
    }
    let mut held: BTreeMap<&str, Vec<&String>> =
        members.iter().map(|m| (m.as_str(), Vec::new())).collect();
    let mut free = Vec::new();
    for unit in units {
        match holdings.get(unit).unwrap_or(&Holding::Free) {
            Holding::Pinned => {}
            Holding::Member(m) => {
                if let Some(list) = held.get_mut(m.as_str()) {
                    list.push(unit);
                }
            }
            Holding::Free => free.push(unit),
        }
    }
    let targets = targets(units.len(), members);
    let quota = units.len() / members.len();
    let mut surplus = Vec::new();
    for (member, list) in &held {
        let target = targets.get(member).copied().unwrap_or(quota);
        let plan = out.entry((*member).to_owned()).or_default();
        plan.target = target;
        if list.len() > target {
            plan.give = list[target..].iter().map(|u| (*u).clone()).collect();
            surplus.extend(list[target..].iter().copied());
        }
    }
    surplus.sort();
    let mut pool = free.into_iter().chain(surplus);
    for (member, list) in &held {
        let target = targets.get(member).copied().unwrap_or(quota);
        let want = target.saturating_sub(list.len());
        let plan = out.entry((*member).to_owned()).or_default();
        plan.take = pool.by_ref().take(want).cloned().collect();
    }
    out
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
}
