//! The receiving host's network interface: interrupt coalescing, the NAPI poll and GRO.
//!
//! Follows Linux 6.18: a NIC raises its interrupt `rx-usecs` after the first frame of a batch
//! (ethtool's interrupt coalescing), and the NAPI poll then takes up to `budget` frames
//! (`NAPI_POLL_WEIGHT`, 64) from the ring before polling again. Each frame goes through
//! `napi_gro_receive` (net/core/gro.c) and `tcp_gro_receive` (net/ipv4/tcp_offload.c): a TCP
//! segment joins the held skb of its flow when it continues it exactly, and the skb reaches
//! TCP (`tcp_v4_rcv`, one ACK decision) when it is flushed:
//! - by the segment itself when it does not continue it: another sequence number, another TCP
//!   timestamp option (TSval and TSecr are compared as option bytes, so only segments sent in
//!   the same millisecond tick join), another IP ECN field (`inet_gro_receive` compares the
//!   TOS byte), the CWR flag (`flush = flags & TCP_FLAG_CWR`), or the skb reaching
//!   `gro_max_size` (`skb_gro_receive`'s `-E2BIG`: 65536 bytes from the IP header). The
//!   segment then starts a new held skb;
//! - by a segment shorter than the skb's MSS, which joins and ends it (`flush = len < mss`);
//! - at the end of each poll (`napi_complete_done` / `gro_flush`; with CONFIG_HZ=250 a poll
//!   that spent its whole budget flushes everything too), oldest skb first.
//!
//! Frames that are not TCP data (the handshake, datagram flows' packets) go up as they come
//! (UDP GRO is off by default in Linux), and so does a frame alone in its poll.
//!
//! Deviations: no PSH flag is modelled (a bulk sender's PSH at the end of each `sendmsg` would
//! end an skb a little earlier); the GRO table's limit of 8 held skbs per hash bucket
//! (`MAX_GRO_SKBS`) is not, as a poll holds at most `budget` frames of a handful of flows; the
//! poll takes no CPU time, so frames that arrive while it runs wait for the next interrupt.

use crate::packet::DataPacket;
use crate::problem::{Path, Problem};
use crate::tcp::TCP_TS_TICK;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// `gro_max_size`'s default (`GRO_LEGACY_MAX_SIZE`): an skb stops growing below this many
/// bytes, counted from its IP header.
pub const GRO_MAX_SIZE: u64 = 65536;
/// IPv4 (20) and TCP with the timestamp option (32): the headers a GRO skb keeps once.
const IP_TCP_HEADERS: u64 = 52;
/// `NAPI_POLL_WEIGHT`: frames a driver's poll takes before the next poll.
pub const NAPI_POLL_WEIGHT: u32 = 64;

/// The receiving hosts' NIC (`link.receiver_nic`): GRO on or off, the interrupt coalescing
/// delay and the NAPI budget. By default GRO is on (Linux's default on a NIC; a veth has it off
/// until `ethtool -K gro on`) and each frame is polled as it arrives (a veth's way; a NIC
/// coalesces for some microseconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiverNicConfig {
    /// `ethtool -K gro`: in-order segments of one flow in one poll reach TCP as one skb.
    #[serde(default = "yes")]
    pub gro: bool,
    /// `ethtool -C rx-usecs`: the interrupt (and so the poll) comes this long after the first
    /// frame of a batch; 0 polls at each arrival.
    #[serde(default)]
    pub coalesce_ns: Nanos,
    /// Frames per NAPI poll (`NAPI_POLL_WEIGHT`).
    #[serde(default = "weight")]
    pub budget: u32,
}

fn yes() -> bool {
    true
}
fn weight() -> u32 {
    NAPI_POLL_WEIGHT
}

impl Default for ReceiverNicConfig {
    fn default() -> Self {
        ReceiverNicConfig { gro: true, coalesce_ns: 0, budget: NAPI_POLL_WEIGHT }
    }
}

impl ReceiverNicConfig {
    /// Problems are at `at` (`link.receiver_nic`).
    pub fn check(&self, at: &Path, out: &mut Vec<Problem>) {
        if self.coalesce_ns < 0 {
            out.push(at.field("coalesce_ns").problem(format!("{}: must be >= 0", self.coalesce_ns)));
        }
        if self.budget == 0 {
            out.push(at.field("budget").problem("0: must be >= 1 frame per poll"));
        }
    }
}

/// What reaches TCP at once: `segs` consecutive segments of one flow from `first` on
/// (a GRO skb, or a single segment), each the size of the first but the last, which carries
/// `last_payload` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skb {
    /// The first segment: its sequence number, timestamps, ECN field and CWR flag stand for
    /// the whole skb.
    pub first: DataPacket,
    pub segs: u64,
    pub last_payload: u32,
}

impl Skb {
    pub fn single(p: DataPacket) -> Self {
        Skb { first: p, segs: 1, last_payload: p.payload }
    }

    /// Payload bytes in all (only a short segment, which ends an skb, differs from the first).
    pub fn bytes(&self) -> u64 {
        (self.segs - 1) * self.first.payload as u64 + self.last_payload as u64
    }

    /// Whether `p` continues this skb as `tcp_gro_receive` requires (see the module header).
    fn continued_by(&self, p: &DataPacket) -> bool {
        let f = &self.first;
        p.flow == f.flow
            && p.seq == f.seq + self.segs
            && self.last_payload == f.payload
            && p.payload <= f.payload
            // (segments of one train share both stamps: equal stamps need no division)
            && (p.sent_at == f.sent_at || p.sent_at / TCP_TS_TICK == f.sent_at / TCP_TS_TICK)
            && (p.ts_echo == f.ts_echo || p.ts_echo.map(|e| e / TCP_TS_TICK) == f.ts_echo.map(|e| e / TCP_TS_TICK))
            && p.ecn == f.ecn
            && !p.cwr
            && IP_TCP_HEADERS + self.bytes() + (p.payload as u64) < GRO_MAX_SIZE
    }
}

/// The GRO table of one poll: the skbs held, oldest first, at most one per flow.
#[derive(Debug, Default)]
pub struct Gro {
    held: Vec<Skb>,
    /// Where the last segment went: segments come in trains of one flow, so the next one's
    /// skb is most often there (checked before use, so any value is safe).
    last: usize,
}

impl Gro {
    /// A TCP data segment arrives in a poll; returns the skb it releases, if any: its flow's
    /// held skb, which it either does not continue (and then starts the next) or ends.
    pub fn receive(&mut self, p: DataPacket) -> Option<Skb> {
        // The flow's one held skb: at `last` when the flow is the last segment's, else found.
        let i = match self.held.get(self.last) {
            Some(s) if s.first.flow == p.flow => Some(self.last),
            _ => self.held.iter().position(|s| s.first.flow == p.flow),
        };
        if let Some(i) = i {
            let s = &mut self.held[i];
            if s.continued_by(&p) {
                s.segs += 1;
                s.last_payload = p.payload;
                self.last = i;
                // a segment shorter than the skb's MSS ends it (`flush = len < mss`)
                return (p.payload < s.first.payload).then(|| self.held.remove(i));
            }
        }
        let out = i.map(|i| self.held.remove(i));
        // A new skb: held whatever its size (`tcp_gro_receive`'s `mss` is 1 with no skb to join).
        self.last = self.held.len();
        self.held.push(Skb::single(p));
        out
    }

    /// The end of a poll: every held skb, oldest first.
    pub fn flush(&mut self) -> std::vec::Drain<'_, Skb> {
        self.held.drain(..)
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Ecn;

    const MSS: u32 = 1448;

    fn seg(flow: u32, seq: u64) -> DataPacket {
        DataPacket { flow, seq, size: MSS + 52, payload: MSS, sent_at: 5_000_000, ecn: Ecn::NotEct, cwr: false, ts_echo: Some(4_000_000) }
    }

    /// Feeds `pkts` to one poll and returns every skb as (flow, first seq, segments), in the
    /// order TCP gets them.
    fn poll(pkts: &[DataPacket]) -> Vec<(u32, u64, u64)> {
        let mut g = Gro::default();
        let mut out: Vec<Skb> = pkts.iter().filter_map(|&p| g.receive(p)).collect();
        out.extend(g.flush());
        out.iter().map(|s| (s.first.flow, s.first.seq, s.segs)).collect()
    }

    #[test]
    fn consecutive_segments_of_a_flow_become_one_skb_beside_other_flows() {
        let pkts = [seg(0, 10), seg(1, 3), seg(0, 11), seg(1, 4), seg(0, 12)];
        assert_eq!(poll(&pkts), [(0, 10, 3), (1, 3, 2)]);
    }

    #[test]
    fn a_gap_another_tick_another_echo_ecn_field_or_cwr_starts_a_new_skb() {
        assert_eq!(poll(&[seg(0, 1), seg(0, 3)]), [(0, 1, 1), (0, 3, 1)]);
        let later = DataPacket { sent_at: 6_000_000, ..seg(0, 2) };
        assert_eq!(poll(&[seg(0, 1), later]), [(0, 1, 1), (0, 2, 1)]);
        // the same millisecond tick on the wire: joins
        let same_tick = DataPacket { sent_at: 5_999_999, ts_echo: Some(4_500_000), ..seg(0, 2) };
        assert_eq!(poll(&[seg(0, 1), same_tick]), [(0, 1, 2)]);
        let echo = DataPacket { ts_echo: Some(7_000_000), ..seg(0, 2) };
        assert_eq!(poll(&[seg(0, 1), echo]), [(0, 1, 1), (0, 2, 1)]);
        let ce = DataPacket { ecn: Ecn::Ce, ..seg(0, 2) };
        assert_eq!(poll(&[seg(0, 1), ce, seg(0, 3)]), [(0, 1, 1), (0, 2, 1), (0, 3, 1)]);
        let cwr = DataPacket { cwr: true, ..seg(0, 2) };
        // the CWR segment heads the next skb, which later segments may join
        assert_eq!(poll(&[seg(0, 1), cwr, seg(0, 3)]), [(0, 1, 1), (0, 2, 2)]);
    }

    #[test]
    fn an_skb_stops_below_gro_max_size() {
        let pkts: Vec<DataPacket> = (0..100).map(|i| seg(0, i)).collect();
        let skbs = poll(&pkts);
        // 52 + 45 x 1448 = 65,212 < 65,536 <= 52 + 46 x 1448
        assert_eq!(skbs, [(0, 0, 45), (0, 45, 45), (0, 90, 10)]);
    }

    #[test]
    fn a_short_segment_ends_its_skb_and_nothing_joins_a_short_one() {
        let short = DataPacket { payload: 100, size: 152, ..seg(0, 2) };
        let mut g = Gro::default();
        assert_eq!(g.receive(seg(0, 1)), None);
        let ended = g.receive(short).expect("a short segment ends the skb at once");
        assert_eq!((ended.segs, ended.bytes(), ended.last_payload), (2, 1548, 100));
        assert!(g.is_empty());
        assert_eq!(poll(&[short, seg(0, 3)]), [(0, 2, 1), (0, 3, 1)]);
    }
}
