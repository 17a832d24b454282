//! A set of disjoint half-open ranges of sequence numbers, kept sorted. Used by the receiver
//! for out-of-order data and by the sender for its SACK scoreboard. In loss recovery at high
//! rates they number thousands (one per hole); the common changes are at either end (new data
//! arrives at the top, holes fill and the cumulative ACK advances at the bottom), so they live
//! in a ring buffer where both ends cost O(1).

use std::collections::VecDeque;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    r: VecDeque<(u64, u64)>,
}

impl RangeSet {
    pub fn is_empty(&self) -> bool {
        self.r.is_empty()
    }

    /// Gives back memory beyond what the ranges held now need.
    pub fn shrink_to_fit(&mut self) {
        self.r.shrink_to_fit();
    }

    /// The ranges, lowest first.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.r.iter().copied()
    }

    pub fn contains(&self, x: u64) -> bool {
        // Out-of-order data mostly arrives at or above the top range.
        match self.r.back() {
            None => return false,
            Some(&(s, e)) if s <= x || e <= x => return x < e,
            _ => {}
        }
        let i = self.r.partition_point(|&(_, e)| e <= x);
        i < self.r.len() && self.r[i].0 <= x
    }

    /// How many of `[s, e)` the set holds.
    pub fn covered_in(&self, s: u64, e: u64) -> u64 {
        let from = self.r.partition_point(|&(_, re)| re <= s);
        self.r.range(from..).take_while(|&&(rs, _)| rs < e).map(|&(rs, re)| re.min(e) - rs.max(s)).sum()
    }

    /// Adds `[s, e)` and calls `newly(x)` for every x not already present, in increasing order.
    /// Returns the merged range containing it.
    pub fn insert_with(&mut self, s: u64, e: u64, mut newly: impl FnMut(u64)) -> (u64, u64) {
        debug_assert!(s < e);
        // At or above the start of the top range (new data arriving in order after a hole,
        // the newest SACK block): only the top range can be touched, no search.
        if let Some(top) = self.r.back_mut().filter(|top| top.0 <= s) {
            if top.1 < s {
                (s..e).for_each(&mut newly);
                self.r.push_back((s, e));
                return (s, e);
            }
            (top.1.max(s)..e).for_each(&mut newly);
            top.1 = top.1.max(e);
            return *top;
        }
        // First range whose end reaches s (could merge), last range whose start <= e.
        let lo = self.r.partition_point(|&(_, re)| re < s);
        let mut hi = lo;
        let mut cur = s;
        while hi < self.r.len() && self.r[hi].0 <= e {
            let (rs, re) = self.r[hi];
            for x in cur..rs.max(cur).min(e) {
                newly(x);
            }
            cur = cur.max(re);
            hi += 1;
        }
        for x in cur..e {
            newly(x);
        }
        let merged = if lo < hi {
            (self.r[lo].0.min(s), self.r[hi - 1].1.max(e))
        } else {
            (s, e)
        };
        if lo < hi {
            self.r[lo] = merged;
            if hi > lo + 1 {
                self.r.drain(lo + 1..hi);
            }
        } else {
            self.r.insert(lo, merged);
        }
        merged
    }

    pub fn insert(&mut self, s: u64, e: u64) -> (u64, u64) {
        self.insert_with(s, e, |_| {})
    }

    /// Drops everything below `x`.
    pub fn remove_below(&mut self, x: u64) {
        while self.r.front().is_some_and(|&(_, e)| e <= x) {
            self.r.pop_front();
        }
        if let Some(first) = self.r.front_mut() {
            first.0 = first.0.max(x);
        }
    }

    /// If a range starts at `x`, removes and returns its end.
    pub fn pop_starting_at(&mut self, x: u64) -> Option<u64> {
        match self.r.front() {
            Some(&(s, _)) if s <= x => self.r.pop_front().map(|(_, e)| e),
            _ => None,
        }
    }

    pub fn clear(&mut self) {
        self.r.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn matches_a_plain_set(ops in proptest::collection::vec((0u64..200, 1u64..20), 1..60)) {
            let mut rs = RangeSet::default();
            let mut set = std::collections::BTreeSet::new();
            for (s, len) in ops {
                let mut newly = Vec::new();
                rs.insert_with(s, s + len, |x| newly.push(x));
                let expect: Vec<u64> = (s..s + len).filter(|x| !set.contains(x)).collect();
                prop_assert_eq!(newly, expect);
                set.extend(s..s + len);
                // Disjoint, sorted, non-adjacent, and the same members.
                let ranges: Vec<(u64, u64)> = rs.ranges().collect();
                for w in ranges.windows(2) { prop_assert!(w[0].1 < w[1].0); }
                let members: Vec<u64> = ranges.iter().flat_map(|&(a, b)| a..b).collect();
                prop_assert_eq!(members, set.iter().copied().collect::<Vec<_>>());
                for x in 0..230 {
                    prop_assert_eq!(rs.contains(x), set.contains(&x));
                }
                for (a, b) in [(0, 230), (s, s + len), (s / 2, s / 2 + 7), (s + 3, s + 40)] {
                    prop_assert_eq!(rs.covered_in(a, b), (a..b).filter(|x| set.contains(x)).count() as u64);
                }
            }
        }
    }

    #[test]
    fn remove_below_trims() {
        let mut rs = RangeSet::default();
        rs.insert(5, 10);
        rs.insert(20, 30);
        rs.remove_below(7);
        assert_eq!(rs.ranges().collect::<Vec<_>>(), [(7, 10), (20, 30)]);
        rs.remove_below(25);
        assert_eq!(rs.ranges().collect::<Vec<_>>(), [(25, 30)]);
        assert!(rs.contains(29) && !rs.contains(30) && !rs.contains(24));
    }
}
