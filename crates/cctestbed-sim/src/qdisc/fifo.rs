//! Drop-tail FIFO, as Linux `bfifo`/`pfifo` (net/sched/sch_fifo.c): a packet is admitted if
//! the backlog with it stays within the byte and packet limits, else dropped at the tail;
//! packets leave in arrival order. No marking. Its queue, [`Fifo`], is also the one queue of
//! codel, pie and red.

use super::{Counters, DropCause, Limit, Qdisc, Queued};
use crate::time::Nanos;
use std::collections::VecDeque;

/// Packets in arrival order and their bytes.
#[derive(Debug, Default)]
pub struct Fifo {
    q: VecDeque<Queued>,
    bytes: u64,
}

impl Fifo {
    /// Whether `q` fits within `limit` beside the queue and `held` (packets and bytes a peek
    /// holds outside it).
    pub fn fits(&self, limit: &Limit, q: &Queued, held: (u64, u64)) -> bool {
        limit.holds(self.q.len() as u64 + held.0 + 1, self.bytes + held.1 + q.pkt.size as u64)
    }

    pub fn push(&mut self, q: Queued) {
        self.bytes += q.pkt.size as u64;
        self.q.push_back(q);
    }

    pub fn pop(&mut self) -> Option<Queued> {
        let q = self.q.pop_front()?;
        self.bytes -= q.pkt.size as u64;
        Some(q)
    }

    pub fn front(&self) -> Option<&Queued> {
        self.q.front()
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Packets and bytes queued.
    pub fn backlog(&self) -> (u64, u64) {
        (self.q.len() as u64, self.bytes)
    }
}

pub struct DropTail {
    limit: Limit,
    fifo: Fifo,
}

impl DropTail {
    pub fn new(limit: Limit) -> Self {
        DropTail { limit, fifo: Fifo::default() }
    }
}

impl Qdisc for DropTail {
    fn enqueue(&mut self, _now: Nanos, q: Queued, c: &mut Counters) {
        if self.fifo.fits(&self.limit, &q, (0, 0)) {
            self.fifo.push(q);
        } else {
            c.drop_queued(&q.pkt, DropCause::Overflow);
        }
    }

    fn dequeue(&mut self, _now: Nanos, _c: &mut Counters) -> Option<Queued> {
        self.fifo.pop()
    }

    fn peek(&mut self, _now: Nanos, _c: &mut Counters) -> Option<&Queued> {
        self.fifo.front()
    }

    fn backlog(&self) -> (u64, u64) {
        self.fifo.backlog()
    }
}
