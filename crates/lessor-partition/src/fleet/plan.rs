//! The deterministic, sticky assignment every worker computes from the same inputs.

use std::collections::BTreeMap;

/// Who holds a unit, as the planner sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Holding {
    /// Nobody, or a dead session: free to take.
    Free,
    /// A live member of the plan.
    Member(String),
    /// Someone live this planner cannot place (a session newer than its view): left alone.
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

/// The plan for every member.
///
/// * Quotas: with `L` placeable units and `W` members, every member gets `floor(L/W)` and
///   `L mod W` members get one more: first those above `floor(L/W)` now, then by id, so a
///   balanced fleet stays as it is.
/// * Sticky: a member keeps its lowest-id units up to its quota; only the surplus moves.
/// * The pool (free units first, then surplus) is dealt to members under quota in id order.
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
    let mut placeable = 0usize;
    for unit in units {
        match holdings.get(unit).unwrap_or(&Holding::Free) {
            Holding::Pinned => continue,
            Holding::Member(m) => match held.get_mut(m.as_str()) {
                Some(list) => list.push(unit),
                None => continue,
            },
            Holding::Free => free.push(unit),
        }
        placeable += 1;
    }
    let quota = placeable / members.len();
    let extra = placeable % members.len();
    // Members already above the quota keep their extra unit first (sticky); ties go by id. Only
    // "above the quota or not" counts, never the exact load, so the ranking does not change while
    // the plan is carried out: takers never rise above the quota unless ranked to, and givers
    // that drop to the quota were not ranked.
    let mut by_load: Vec<(&str, bool)> = held.iter().map(|(m, l)| (*m, l.len() > quota)).collect();
    by_load.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let targets: BTreeMap<&str, usize> = by_load
        .iter()
        .enumerate()
        .map(|(rank, (m, _))| (*m, quota + usize::from(rank < extra)))
        .collect();
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
}
