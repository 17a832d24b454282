//! The TCP receiver: cumulative ACK plus SACK blocks, Linux-like delayed ACKs.
//!
//! ACK policy follows `__tcp_ack_snd_check` (net/ipv4/tcp_input.c): ACK at once while in
//! quick-ack mode (the first `quickacks` ACKs of the connection, TCP_MAX_QUICKACKS = 16, and
//! 16 more after a duplicate segment, which is itself ACKed at once), when
//! out-of-order data is held, when the arriving segment fills a hole, or once
//! `segments_per_ack` full segments are unacknowledged (2 in Linux: "more than one full
//! frame"); otherwise the delayed-ACK timer (TCP_DELACK_MIN, 40 ms) sends it.
//! SACK blocks: the block holding the latest segment first, then the others from the highest
//! down (RFC 2018 section 4 asks for the most recently changed first).
//!
//! Timestamps (RFC 7323 as `tcp_replace_ts_recent`): every ACK echoes `ts_recent`, the send
//! time of the latest segment that arrived at or below `rcv_wup` (the ACK point last
//! advertised), so a delayed ACK echoes the earliest segment it covers and an out-of-order
//! one the last in-order segment; `ts_recent` never goes back (PAWS).
//!
//! Deviations: the application reads instantly, so the advertised window is the configured
//! buffer, constant; Linux's adaptive ACK timeout (ato) is a fixed timeout; no D-SACK.

use crate::config::{DelayedAckConfig, Nanos};
use crate::packet::{AckPacket, DataPacket, MAX_SACK_BLOCKS};
use crate::ranges::RangeSet;

/// Quick ACKs granted when a duplicate arrives (`TCP_MAX_QUICKACKS`).
const TCP_MAX_QUICKACKS: u32 = 16;

pub struct Receiver {
    flow: u32,
    cfg: DelayedAckConfig,
    /// Next in-order segment expected.
    pub rcv_nxt: u64,
    ooo: RangeSet,
    unacked: u32,
    quickacks_left: u32,
    /// In-order payload bytes handed to the application.
    pub delivered_bytes: u64,
    /// Every data packet that arrived, duplicates included.
    pub arrived_pkts: u64,
    pub duplicate_pkts: u64,
    /// Payload of each segment we hold out of order is needed to count bytes once in order.
    mss: u32,
    last_seg: Option<(u64, u32)>,
    /// `rcv_wup`: rcv_nxt when the last ACK was sent.
    rcv_wup: u64,
    /// `ts_recent`: the timestamp to echo.
    ts_recent: Option<Nanos>,
}

pub enum AckDecision {
    Now(AckPacket),
    /// Arm the delayed-ACK timer for this time (if not already armed).
    Delay(Nanos),
}

impl Receiver {
    pub fn new(flow: u32, cfg: DelayedAckConfig, mss: u32) -> Self {
        let quickacks_left = if cfg.enabled { cfg.quickacks } else { 0 };
        Receiver {
            flow,
            cfg,
            rcv_nxt: 0,
            ooo: RangeSet::default(),
            unacked: 0,
            quickacks_left,
            delivered_bytes: 0,
            arrived_pkts: 0,
            duplicate_pkts: 0,
            mss,
            last_seg: None,
            rcv_wup: 0,
            ts_recent: None,
        }
    }

    pub fn on_data(&mut self, now: Nanos, p: &DataPacket) -> AckDecision {
        self.arrived_pkts += 1;
        let had_ooo = !self.ooo.is_empty();
        let seq = p.seq;
        // tcp_replace_ts_recent: only a segment at or below rcv_wup updates ts_recent.
        if seq <= self.rcv_wup && self.ts_recent.is_none_or(|t| p.sent_at >= t) {
            self.ts_recent = Some(p.sent_at);
        }
        if p.payload < self.mss {
            self.last_seg = Some((seq, p.payload));
        }
        let mut latest_block = None;
        let mut duplicate = false;
        if seq < self.rcv_nxt || self.ooo.contains(seq) {
            self.duplicate_pkts += 1;
            duplicate = true;
        } else if seq == self.rcv_nxt {
            self.rcv_nxt += 1;
            if let Some(end) = self.ooo.pop_starting_at(self.rcv_nxt) {
                self.rcv_nxt = end;
            }
            self.delivered_bytes = self.bytes_below(self.rcv_nxt);
        } else {
            latest_block = Some(self.ooo.insert(seq, seq + 1));
        }
        self.unacked += 1;
        // tcp_data_queue: a duplicate forces an immediate ACK and quick-ack mode
        // (tcp_enter_quickack_mode(sk, TCP_MAX_QUICKACKS)).
        if duplicate && self.cfg.enabled {
            self.quickacks_left = self.quickacks_left.max(TCP_MAX_QUICKACKS);
        }
        let immediate = !self.cfg.enabled
            || duplicate
            || self.quickacks_left > 0
            || had_ooo
            || !self.ooo.is_empty()
            || self.unacked >= self.cfg.segments_per_ack;
        if immediate {
            self.quickacks_left = self.quickacks_left.saturating_sub(1);
            AckDecision::Now(self.make_ack(latest_block, false))
        } else {
            AckDecision::Delay(now + self.cfg.timeout_ns)
        }
    }

    /// The delayed-ACK timer fired.
    pub fn on_delack_timer(&mut self) -> Option<AckPacket> {
        (self.unacked > 0).then(|| self.make_ack(None, true))
    }

    pub fn has_unacked(&self) -> bool {
        self.unacked > 0
    }

    fn bytes_below(&self, seq: u64) -> u64 {
        match self.last_seg {
            Some((s, len)) if s < seq => s * self.mss as u64 + len as u64,
            _ => seq * self.mss as u64,
        }
    }

    fn make_ack(&mut self, latest: Option<(u64, u64)>, delayed: bool) -> AckPacket {
        self.unacked = 0;
        self.rcv_wup = self.rcv_nxt;
        let mut sacks = [(0, 0); MAX_SACK_BLOCKS];
        let mut n = 0;
        if let Some(b) = latest {
            sacks[0] = b;
            n = 1;
        }
        for &r in self.ooo.ranges().iter().rev() {
            if n == MAX_SACK_BLOCKS {
                break;
            }
            if Some(r) != latest {
                sacks[n] = r;
                n += 1;
            }
        }
        AckPacket { flow: self.flow, ack: self.rcv_nxt, sacks, n_sacks: n as u8, delayed, tsecr: self.ts_recent }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(seq: u64) -> DataPacket {
        DataPacket { flow: 0, seq, size: 1500, payload: 1448, sent_at: 0 }
    }

    fn cfg(quickacks: u32) -> DelayedAckConfig {
        DelayedAckConfig { enabled: true, timeout_ns: 40_000_000, segments_per_ack: 2, quickacks }
    }

    #[test]
    fn acks_every_second_segment_after_quickacks() {
        let mut r = Receiver::new(0, cfg(1), 1448);
        assert!(matches!(r.on_data(0, &data(0)), AckDecision::Now(_)));
        assert!(matches!(r.on_data(0, &data(1)), AckDecision::Delay(40_000_000)));
        match r.on_data(0, &data(2)) {
            AckDecision::Now(a) => assert_eq!(a.ack, 3),
            _ => panic!("second unacked segment must be ACKed at once"),
        }
    }

    #[test]
    fn out_of_order_data_is_sacked_at_once_and_hole_fill_acks_all() {
        let mut r = Receiver::new(0, cfg(0), 1448);
        let _ = r.on_data(0, &data(0));
        let _ = r.on_data(0, &data(1));
        match r.on_data(0, &data(3)) {
            AckDecision::Now(a) => {
                assert_eq!(a.ack, 2);
                assert_eq!(a.sack_blocks(), &[(3, 4)]);
            }
            _ => panic!(),
        }
        let _ = r.on_data(0, &data(5));
        match r.on_data(0, &data(4)) {
            AckDecision::Now(a) => assert_eq!(a.sack_blocks(), &[(3, 6)]),
            _ => panic!(),
        }
        match r.on_data(0, &data(2)) {
            AckDecision::Now(a) => {
                assert_eq!(a.ack, 6);
                assert_eq!(a.n_sacks, 0);
            }
            _ => panic!("filling the hole must be ACKed at once"),
        }
        assert_eq!(r.delivered_bytes, 6 * 1448);
    }
}
