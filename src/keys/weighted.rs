//! Smooth weighted round robin (nginx's): a provider's keys by weight, and, through
//! `router::balance`, a step's deployments.

/// Picks one of the `(current, weight)` candidates, updating their running `current`
/// values (the caller keeps them between picks). Returns the chosen candidate's index, or
/// `None` when there are none.
pub fn smooth_pick(mut candidates: Vec<(&mut i64, u32)>) -> Option<usize> {
    let total: i64 = candidates.iter().map(|(_, w)| i64::from(*w)).sum();
    let mut best: Option<(usize, i64)> = None;
    for (index, (current, weight)) in candidates.iter_mut().enumerate() {
        **current += i64::from(*weight);
        if best.is_none_or(|(_, value)| **current > value) {
            best = Some((index, **current));
        }
    }
    let (best, _) = best?;
    *candidates[best].0 -= total;
    Some(best)
}
