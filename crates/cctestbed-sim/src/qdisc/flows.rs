//! What fq_codel and fq share: the flow hash that files packets into queues, and the two
//! round-robin lists that serve the queues holding packets (RFC 8290 section 4.2; Linux
//! `sch_fq_codel.c` and `sch_fq.c` keep the same *new flows* and *old flows*).

use crate::rng::SimRng;
use std::collections::VecDeque;

/// A 64-bit mixing function (SplitMix64's finaliser); the flow hash before scaling.
pub fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The flow hash's perturbation, drawn from the discipline's stream (standing in for the
/// kernel's boot-time hash key).
pub fn perturbation(rng: &mut SimRng) -> u64 {
    ((rng.below(u32::MAX) as u64) << 32) | rng.below(u32::MAX) as u64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    New,
    Old,
}

/// Deficit round robin over the queues: the new-flows and old-flows lists of queue indices,
/// which list holds each queue (`flowchain`; a queue on neither is idle), and each queue's
/// credit in bytes.
#[derive(Debug)]
pub struct Rounds {
    new: VecDeque<usize>,
    old: VecDeque<usize>,
    on: Vec<Option<List>>,
    /// Bytes each queue may still send this round (`deficit`, fq's `credit`).
    pub credit: Vec<i64>,
    /// Credit a queue gets each round.
    quantum: i64,
}

impl Rounds {
    /// Lists for `queues` queues, all idle with no credit; `quantum` bytes a round.
    pub fn new(queues: usize, quantum: i64) -> Self {
        Rounds { new: VecDeque::new(), old: VecDeque::new(), on: vec![None; queues], credit: vec![0; queues], quantum }
    }

    pub fn quantum(&self) -> i64 {
        self.quantum
    }

    /// The queue to serve next, and whether it is a new one: the head of new flows, else of
    /// old flows; a head whose credit is spent gets a quantum and moves to the tail of old flows
    /// first.
    pub fn next(&mut self) -> Option<(bool, usize)> {
        loop {
            let (from_new, idx) = self.head()?;
            if self.credit[idx] > 0 {
                return Some((from_new, idx));
            }
            self.credit[idx] += self.quantum;
            self.rotate(from_new);
        }
    }

    /// A packet of `bytes` left queue `idx`.
    pub fn spend(&mut self, idx: usize, bytes: u32) {
        self.credit[idx] -= bytes as i64;
    }

    fn head(&self) -> Option<(bool, usize)> {
        match (self.new.front(), self.old.front()) {
            (Some(&i), _) => Some((true, i)),
            (None, Some(&i)) => Some((false, i)),
            (None, None) => None,
        }
    }

    /// Whether queue `idx` is on a list.
    pub fn is_listed(&self, idx: usize) -> bool {
        self.on[idx].is_some()
    }

    /// An idle queue that receives a packet joins the tail of new flows.
    pub fn push_new(&mut self, idx: usize) {
        self.new.push_back(idx);
        self.on[idx] = Some(List::New);
    }

    pub fn has_old(&self) -> bool {
        !self.old.is_empty()
    }

    /// The head (of new flows if `from_new`) moves to the tail of old flows: its credit is
    /// spent, or it is a new queue that emptied and passes through old flows once.
    pub fn rotate(&mut self, from_new: bool) {
        let idx = self.pop(from_new);
        self.old.push_back(idx);
        self.on[idx] = Some(List::Old);
    }

    /// The head (of new flows if `from_new`) leaves the lists: its queue is empty.
    pub fn detach(&mut self, from_new: bool) {
        let idx = self.pop(from_new);
        self.on[idx] = None;
    }

    fn pop(&mut self, from_new: bool) -> usize {
        let list = if from_new { &mut self.new } else { &mut self.old };
        list.pop_front().expect("the head was served")
    }
}
