//! Drop-tail FIFO, as Linux `bfifo`/`pfifo` (net/sched/sch_fifo.c): a packet is admitted if
//! the backlog with it stays within the byte and packet limits, else dropped at the tail;
//! packets leave in arrival order. No marking.

use crate::time::Nanos;
use super::{Counters, DropCause, Limit, Qdisc, Queued};
use std::collections::VecDeque;

pub struct DropTail {
    limit: Limit,
    q: VecDeque<Queued>,
    bytes: u64,
}

impl DropTail {
    pub fn new(limit: Limit) -> Self {
        DropTail { limit, q: VecDeque::new(), bytes: 0 }
    }
}

impl Qdisc for DropTail {
    fn enqueue(&mut self, _now: Nanos, q: Queued, c: &mut Counters) {
        if self.limit.holds(self.q.len() as u64 + 1, self.bytes + q.pkt.size as u64) {
            self.bytes += q.pkt.size as u64;
            self.q.push_back(q);
        } else {
            c.drop_queued(&q.pkt, DropCause::Overflow);
        }
    }

    fn dequeue(&mut self, _now: Nanos, _c: &mut Counters) -> Option<Queued> {
        let q = self.q.pop_front()?;
        self.bytes -= q.pkt.size as u64;
        Some(q)
    }

    fn peek(&mut self, _now: Nanos, _c: &mut Counters) -> Option<&Queued> {
        self.q.front()
    }

    fn backlog(&self) -> (u64, u64) {
        (self.q.len() as u64, self.bytes)
    }
}
