//! Drop-tail FIFO, as Linux `bfifo`/`pfifo` (net/sched/sch_fifo.c): a packet is admitted if
//! the backlog with it stays within the byte and packet limits, else dropped at the tail;
//! packets leave in arrival order. No marking. Its queue, [`Fifo`], is also the one queue of
//! codel, pie and red.

use super::{Counters, DropCause, Limit, Qdisc, Queued};
use crate::packet::DataPacket;
use crate::time::Nanos;
use std::collections::VecDeque;

/// Packets in arrival order and their bytes. A sender's GSO train reaches the router at one
/// instant and is admitted packet by packet; the admitted packets that continue the one
/// before them (the same flow's next segment, alike in all else, enqueued at the same time)
/// are kept as one entry with a count, so a 64-KB train costs the queue one entry, not 45.
/// Packets still leave one at a time, exactly as they would from a queue of single packets.
#[derive(Debug, Default)]
pub struct Fifo {
    q: VecDeque<(Queued, u32)>,
    len: u64,
    bytes: u64,
}

impl Fifo {
    /// Whether `q` fits within `limit` beside the queue and `held` (packets and bytes a peek
    /// holds outside it).
    pub fn fits(&self, limit: &Limit, q: &Queued, held: (u64, u64)) -> bool {
        limit.holds(self.len + held.0 + 1, self.bytes + held.1 + q.pkt.size as u64)
    }

    pub fn push(&mut self, q: Queued) {
        self.bytes += q.pkt.size as u64;
        self.len += 1;
        if let Some((last, n)) = self.q.back_mut() {
            let p = &last.pkt;
            if q.enqueued_at == last.enqueued_at
                && q.pkt.seq == p.seq.wrapping_add(*n as u64)
                && (DataPacket { seq: p.seq, ..q.pkt }) == *p
            {
                *n += 1;
                return;
            }
        }
        self.q.push_back((q, 1));
    }

    pub fn pop(&mut self) -> Option<Queued> {
        let (head, n) = self.q.front_mut()?;
        let out = *head;
        if *n == 1 {
            self.q.pop_front();
        } else {
            head.pkt.seq += 1;
            *n -= 1;
        }
        self.len -= 1;
        self.bytes -= out.pkt.size as u64;
        Some(out)
    }

    pub fn front(&self) -> Option<&Queued> {
        self.q.front().map(|(q, _)| q)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Packets and bytes queued.
    pub fn backlog(&self) -> (u64, u64) {
        (self.len, self.bytes)
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
