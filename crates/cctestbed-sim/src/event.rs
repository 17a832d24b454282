//! The event queue and lazily re-armed timers.
//!
//! Events are ordered by (time, insertion sequence), so equal times run first-in first-out and
//! a run is fully determined by its inputs. The queue only ever holds O(links + flows + timers)
//! entries: packets in flight wait in [`crate::link::DelayLine`]s with one event for the head.
//!
//! The two events that come once per packet through the bottleneck (its next departure and the
//! forward line's next arrival) are nearly always single: each waits in a lane of its own beside
//! the heap, and a pop takes the least key of heap top and lanes. The order is the same as with
//! every event in the heap (one key decides wherever an entry is kept); only the heap's work per
//! packet goes.
//!
//! Events for the current time (a packet put on an access line without delay or rate is at
//! its head at once) skip the heap too: they wait in a FIFO, which is in key order because
//! they all share the current time and come in insertion order.

use crate::time::Nanos;
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerKind {
    /// Retransmission timeout.
    Rto = 0,
    /// Pacing: the next packet may leave.
    Pace = 1,
    /// RACK reordering window expired.
    Reorder = 2,
    /// Receiver's delayed-ACK timer.
    DelAck = 3,
}
pub const TIMER_KINDS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    FlowStart(u32),
    /// A datagram flow's next packet is due.
    DatagramDue(u32),
    /// The head of a flow's access line reaches the router.
    AccessHead(u32),
    /// The bottleneck finishes a transmission or may begin one (tokens, idle link).
    BottleneckWake,
    /// The head of the line from the router to the receivers arrives.
    ForwardHead,
    /// The reverse bottleneck finishes a transmission or may begin one.
    ReverseWake,
    /// The head of the line from the reverse path to the reverse flows' receivers arrives.
    BackwardHead,
    /// The head of a flow's ACK line reaches its sender.
    AckHead(u32),
    /// A flow's aggregated ACKs leave for its ACK line.
    AckRelease(u32),
    Timer(u32, TimerKind),
    Sample,
    CapacityChange(u32),
    DelayChange(u32),
}

/// One queued event; `key` orders it: time in the high 64 bits, insertion number in the low,
/// so one integer comparison gives (earliest, then first inserted).
#[derive(Debug, Clone, Copy)]
struct Entry {
    key: u128,
    ev: Event,
}

impl Entry {
    fn at(&self) -> Nanos {
        (self.key >> 64) as Nanos
    }
}

/// The pending events: a 4-ary min-heap on [`Entry::key`] (half the levels of a binary heap,
/// and the four children of a node share a cache line or two) and the [`LANES`]. Times are
/// never negative, so the key's unsigned order is the time order.
///
/// The heap's vector holds `len` entries followed by at least [`ARITY`] `EMPTY` ones, so every
/// node inside the heap has four child slots to read: a sift-down picks the least child
/// without bounds checks or a count of children, with selects rather than branches (which
/// child is least is a coin toss, and mispredicted branches were most of a pop's cost).
pub struct EventQueue {
    heap: Vec<Entry>,
    /// Entries in the heap; `heap[len..]` is `EMPTY` padding.
    len: usize,
    /// One pending event of each lane's kind ([`lane`]), `EMPTY` when none; a second pending
    /// event of a lane's kind goes to the heap.
    lanes: [Entry; LANES],
    /// Events pushed for `now`, in insertion order: after every other event of `now` (theirs
    /// are the newest keys of that time) and before every later one, so time cannot move on
    /// while one waits here.
    due: VecDeque<Entry>,
    seq: u64,
    now: Nanos,
    /// Events popped so far (for benchmarks).
    pub processed: u64,
}

const ARITY: usize = 4;

/// Lanes beside the heap, one per event kind that [`lane`] names ([`EventQueue::first_lane`]
/// compares the two).
const LANES: usize = 2;

/// A free lane or heap slot: no key is this large (the time part would be past `Nanos::MAX`).
const EMPTY: Entry = Entry { key: u128::MAX, ev: Event::Sample };

/// The lane an event kind waits in, if it has one.
fn lane(ev: &Event) -> Option<usize> {
    match ev {
        Event::BottleneckWake => Some(0),
        Event::ForwardHead => Some(1),
        _ => None,
    }
}

impl Default for EventQueue {
    fn default() -> Self {
        EventQueue { heap: vec![EMPTY; ARITY], len: 0, lanes: [EMPTY; LANES], due: VecDeque::new(), seq: 0, now: 0, processed: 0 }
    }
}

impl EventQueue {
    pub fn push(&mut self, at: Nanos, ev: Event) {
        debug_assert!(at >= self.now, "event scheduled in the past: {at} < {}", self.now);
        debug_assert!(at >= 0);
        self.seq += 1;
        let e = Entry { key: ((at as u64 as u128) << 64) | self.seq as u128, ev };
        if at == self.now {
            self.due.push_back(e);
            return;
        }
        if let Some(l) = lane(&ev) {
            if self.lanes[l].key == u128::MAX {
                self.lanes[l] = e;
                return;
            }
        }
        // Keep ARITY padding slots past the last entry.
        if self.heap.len() < self.len + 1 + ARITY {
            self.heap.resize(self.len + 1 + ARITY, EMPTY);
        }
        // Sift up: move parents down until e's place is found.
        let mut i = self.len;
        self.len += 1;
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if self.heap[parent].key <= e.key {
                break;
            }
            self.heap[i] = self.heap[parent];
            i = parent;
        }
        self.heap[i] = e;
    }

    /// The lane whose event comes before the heap's top, if one does (of the two lanes).
    fn first_lane(&self) -> Option<usize> {
        let top = self.heap[0].key;
        let (l, k) = if self.lanes[1].key < self.lanes[0].key { (1, self.lanes[1].key) } else { (0, self.lanes[0].key) };
        (k < top).then_some(l)
    }

    pub fn pop(&mut self) -> Option<(Nanos, Event)> {
        self.pop_until(Nanos::MAX)
    }

    /// Pops the next event if it is due at or before `t`.
    pub fn pop_until(&mut self, t: Nanos) -> Option<(Nanos, Event)> {
        if let Some(d) = self.due.front() {
            // An event of `now` from the heap or a lane has an older key and goes first.
            let other = self.heap[0].key.min(self.lanes[0].key).min(self.lanes[1].key);
            if d.key < other {
                if d.at() > t {
                    return None;
                }
                let d = self.due.pop_front().expect("checked");
                self.processed += 1;
                return Some((d.at(), d.ev));
            }
        }
        let top = match self.first_lane() {
            Some(l) if self.lanes[l].at() <= t => std::mem::replace(&mut self.lanes[l], EMPTY),
            Some(_) => return None,
            None if self.len > 0 && self.heap[0].at() <= t => self.pop_heap(),
            None => return None,
        };
        let at = top.at();
        assert!(at >= self.now, "time went backwards");
        self.now = at;
        self.processed += 1;
        Some((at, top.ev))
    }

    /// Removes the heap's top; the heap must not be empty.
    fn pop_heap(&mut self) -> Entry {
        let top = self.heap[0];
        self.len -= 1;
        let n = self.len;
        let last = std::mem::replace(&mut self.heap[n], EMPTY);
        if n == 0 {
            return top;
        }
        // Sift the last entry down from the root. `first + 3 < n + ARITY <= heap.len()`, so
        // the four child slots exist; padding slots are `EMPTY` and never the least.
        let h = &mut self.heap[..];
        let mut i = 0;
        loop {
            let first = i * ARITY + 1;
            if first >= n {
                break;
            }
            let c = &h[first..first + ARITY];
            let (a, ka) = if c[1].key < c[0].key { (1, c[1].key) } else { (0, c[0].key) };
            let (b, kb) = if c[3].key < c[2].key { (3, c[3].key) } else { (2, c[2].key) };
            let (best, kbest) = if kb < ka { (b, kb) } else { (a, ka) };
            if kbest >= last.key {
                break;
            }
            let child = c[best];
            h[i] = child;
            i = first + best;
        }
        h[i] = last;
        top
    }

    /// Events pushed so far. [`Self::peek_time`] changes only by a push or a pop, so a caller
    /// that pops nothing may keep what it returned while this count stays the same.
    pub fn pushed(&self) -> u64 {
        self.seq
    }

    pub fn peek_time(&self) -> Option<Nanos> {
        if !self.due.is_empty() {
            return Some(self.now);
        }
        match self.first_lane() {
            Some(l) => Some(self.lanes[l].at()),
            None => (self.len > 0).then(|| self.heap[0].at()),
        }
    }

    pub fn len(&self) -> usize {
        self.len + self.due.len() + self.lanes.iter().filter(|e| e.key != u128::MAX).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A timer that is re-armed far more often than it fires. Re-arming to a later time pushes
/// nothing; a stale pop finds the real deadline and re-queues itself once.
#[derive(Debug, Clone, Copy)]
pub struct Timer {
    deadline: Option<Nanos>,
    /// Earliest time for which an event of this timer is in the queue.
    queued: Nanos,
}

impl Default for Timer {
    fn default() -> Self {
        Timer { deadline: None, queued: Nanos::MAX }
    }
}

impl Timer {
    pub fn deadline(&self) -> Option<Nanos> {
        self.deadline
    }

    /// Arms the timer for `at`; returns the time of an event the caller must queue, if any.
    #[must_use]
    pub fn arm(&mut self, at: Nanos) -> Option<Nanos> {
        self.deadline = Some(at);
        if at < self.queued {
            self.queued = at;
            Some(at)
        } else {
            None
        }
    }

    pub fn cancel(&mut self) {
        self.deadline = None;
    }

    /// Called when one of this timer's events pops at `now`. Returns `Fire` if the timer is due,
    /// or `Requeue(t)` if the caller must queue an event at `t`.
    pub fn on_pop(&mut self, now: Nanos) -> TimerPop {
        if now == self.queued {
            self.queued = Nanos::MAX;
        }
        match self.deadline {
            Some(d) if d <= now => {
                self.deadline = None;
                TimerPop::Fire
            }
            Some(d) if d < self.queued => {
                self.queued = d;
                TimerPop::Requeue(d)
            }
            _ => TimerPop::Stale,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum TimerPop {
    Fire,
    Requeue(Nanos),
    Stale,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_times_pop_in_insertion_order() {
        let mut q = EventQueue::default();
        q.push(5, Event::Sample);
        q.push(3, Event::FlowStart(1));
        q.push(5, Event::FlowStart(2));
        q.push(5, Event::ForwardHead);
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![(3, Event::FlowStart(1)), (5, Event::Sample), (5, Event::FlowStart(2)), (5, Event::ForwardHead)]
        );
    }

    proptest::proptest! {
        /// Any interleaving of pushes (never before the last pop) and pops comes out as a
        /// stable sort by time would give it, lane events (`BottleneckWake`, `ForwardHead`,
        /// several pending at once) among heap events, and a third of the pushes for the
        /// current time (the FIFO of due events).
        #[test]
        fn pops_follow_time_then_insertion_order(ops in proptest::collection::vec((0u8..6, 0i64..50), 1..400)) {
            let mut q = EventQueue::default();
            let mut reference: Vec<(Nanos, usize, Event)> = vec![];
            let mut now = 0;
            for (i, (op, dt)) in ops.into_iter().enumerate() {
                let dt = (dt - 16).max(0);
                let ev = match op {
                    0 | 1 => Some(Event::FlowStart(i as u32)),
                    2 => Some(Event::BottleneckWake),
                    3 => Some(Event::ForwardHead),
                    _ => None,
                };
                if let Some(ev) = ev {
                    q.push(now + dt, ev);
                    reference.push((now + dt, i, ev));
                } else if let Some((t, ev)) = q.pop() {
                    let k = (0..reference.len()).min_by_key(|&k| (reference[k].0, reference[k].1)).unwrap();
                    let (rt, _, rev) = reference.remove(k);
                    proptest::prop_assert_eq!((t, ev), (rt, rev));
                    now = t;
                }
                proptest::prop_assert_eq!(q.len(), reference.len());
            }
        }
    }

    #[test]
    fn timer_rearmed_later_fires_once_at_the_last_deadline() {
        let mut t = Timer::default();
        assert_eq!(t.arm(10), Some(10));
        assert_eq!(t.arm(20), None);
        assert_eq!(t.arm(30), None);
        assert_eq!(t.on_pop(10), TimerPop::Requeue(30));
        assert_eq!(t.on_pop(30), TimerPop::Fire);
        assert_eq!(t.deadline(), None);
    }

    #[test]
    fn timer_rearmed_earlier_fires_early_and_ignores_stale_entry() {
        let mut t = Timer::default();
        assert_eq!(t.arm(30), Some(30));
        assert_eq!(t.arm(10), Some(10));
        assert_eq!(t.on_pop(10), TimerPop::Fire);
        assert_eq!(t.on_pop(30), TimerPop::Stale);
    }

    #[test]
    fn cancelled_timer_does_not_fire() {
        let mut t = Timer::default();
        let _ = t.arm(10);
        t.cancel();
        assert_eq!(t.on_pop(10), TimerPop::Stale);
    }
}
