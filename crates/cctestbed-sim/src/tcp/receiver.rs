//! The TCP receiver: cumulative ACK plus SACK blocks, sent when Linux 6.18 would send them.
//!
//! The ACK policy follows these Linux 6.18 functions (net/ipv4/tcp_input.c unless noted):
//! - `tcp_event_data_recv`: every in-order data segment adapts the ACK timeout `ato` (kept in
//!   jiffies, CONFIG_HZ=250) from the inter-arrival time `m`: the first segment sets
//!   `ato = TCP_ATO_MIN` (40 ms) and starts quick-ack mode; `m <= TCP_ATO_MIN/2` gives
//!   `ato/2 + TCP_ATO_MIN/2`; `m < ato` gives `ato/2 + m` (at most the RTO); `m > rto` restarts
//!   quick-ack mode (`tcp_incr_quickack`, ato unchanged).
//! - `tcp_incr_quickack` / `tcp_enter_quickack_mode`: quick ACKs = `rcv_wnd / (2 * rcv_mss)`
//!   (2 if that is 0), at most TCP_MAX_QUICKACKS (16), never lowering the count; entering the
//!   mode also resets `ato` to TCP_ATO_MIN. It is entered on old (duplicate) data
//!   (`tcp_data_queue`: "A retransmit ... Force an immediate ack").
//! - `tcp_dec_quickack_mode` (include/net/tcp.h, via `tcp_event_ack_sent`): each ACK sent while
//!   an ACK is scheduled uses one quick ACK; using the last one deflates `ato` to TCP_ATO_MIN.
//! - `__tcp_ack_snd_check`: ACK at once when more than one full frame is unacknowledged
//!   (`rcv_nxt - rcv_wup > rcv_mss`, i.e. `segments_per_ack` = 2 segments) and either the
//!   application has read everything (`rcv_nxt - copied_seq < sk_rcvlowat`, 1) or the window
//!   the free space allows, unread data charged, is not below the one offered
//!   (`__tcp_select_window(sk) >= tp->rcv_wnd`; an application that reads at once always passes
//!   the first), in quick-ack mode,
//!   or on ICSK_ACK_NOW (a segment that empties the out-of-order queue, RFC 5681 4.2). Otherwise,
//!   with the out-of-order queue empty, `tcp_send_delayed_ack`. With it non-empty, SACK
//!   compression (since 4.18, "defer SACK compression after DupThresh" since 5.5): the first
//!   TCP_FASTRETRANS_THRESH (3) ACKs for one `rcv_nxt` go out at once (`dup_ack_counter`), later
//!   ones are counted in `compressed_ack` and sent by a timer of
//!   `min(tcp_comp_sack_delay_ns = 1 ms, 5 % of the RTT)` with `tcp_comp_sack_slack_ns` (100 us)
//!   of hrtimer slack (fired at its hard expiry here), or at once when `compressed_ack` reaches
//!   `tcp_comp_sack_nr` (44). The RTT is `min(rcv_rtt_est, srtt)`; see deviations.
//! - `tcp_send_delayed_ack` (tcp_output.c): the delay is `ato`, bounded when `ato > TCP_DELACK_MIN`
//!   by HZ/2 (TCP_DELACK_MAX when ICSK_ACK_PUSHED or pingpong) and by the smoothed RTT (at least
//!   TCP_DELACK_MIN), then by `tcp_delack_max()` = min(TCP_DELACK_MAX, rto_min - 1 jiffy) =
//!   196 ms. An armed timer is kept if earlier, and if it would expire within `ato/4` the ACK
//!   goes out at once. The timer expires at `jiffies + ato` and fires, on the kernel's timer
//!   wheel, as the tick after it begins.
//! - `tcp_delack_timer_handler` (tcp_timer.c): a pending compressed SACK is sent as is; else a
//!   delayed ACK that fires inflates `ato` to `min(2 * ato, rto)` ("Delayed ACK missed").
//! - `tcp_compressed_ack_kick` (tcp_timer.c) sends the compressed SACK; `tcp_event_ack_sent`
//!   (tcp_output.c): any ACK sent clears `compressed_ack`, both timers and the scheduled flag.
//! - `__tcp_cleanup_rbuf` (tcp.c), after each read of an application that reads every
//!   `read_interval` (the flow's setting; 0 reads each segment as it arrives): with an ACK
//!   scheduled, ACK if more than one full frame is unacknowledged or a short (pushed) segment
//!   was read; else ACK if the read lets the window at least double from half the clamp or
//!   less. Once `tcp_grow_window` has raised `rcv_ssthresh` to the free space, an arrival behind
//!   unread data cannot keep the window offered, so such an application gets one ACK per read.
//!   Reads fall on multiples of the interval on the trial's clock, each after the last.
//!
//! The receiver's own RTT is the one it measured on the three-way handshake, from its SYN-ACK to
//! the final ACK (`tcp_synack_rtt_meas`): a bulk receiver sends no data, so Linux never updates its `srtt_us` or `icsk_rto` afterwards (`tcp_rtt_estimator`'s first sample:
//! rto = srtt + max(2 srtt, 200 ms)).
//!
//! Timestamps (RFC 7323 as `tcp_replace_ts_recent`): every ACK echoes `ts_recent`, the send
//! time of the latest segment that arrived at or below `rcv_wup` (the ACK point last
//! advertised), so a delayed ACK echoes the earliest segment it covers and an out-of-order
//! one the last in-order segment; `ts_recent` never goes back (PAWS).
//!
//! SACK blocks as `selective_acks` (`tcp_sack_new_ofo_skb`, `tcp_sack_extend`,
//! `tcp_sack_maybe_coalesce`, `tcp_sack_remove`): a list of at most TCP_NUM_SACKS (4) blocks,
//! most recently changed first; an out-of-order arrival, new or duplicate, extends a block and
//! moves it to the front, or opens a new block there and forgets the last one when the list is
//! full; blocks at or below `rcv_nxt` leave it. An ACK carries the first 3 (the timestamp option
//! takes the room of the fourth). Before a change that would push a block the sender may not
//! have seen out of the first TCP_SACK_BLOCKS_EXPECTED (2), a compressed SACK pending is sent
//! at once (`tcp_sack_compress_send_ack`): without that flush, at a few percent of random loss a
//! block's last extent is never reported and RACK retransmits what had arrived.
//!
//! The advertised window is the receive buffer's ([`super::rcvbuf`]): it opens from 64 KB as
//! `tcp_grow_window` raises `rcv_ssthresh` (each raise asking one quick ACK) and follows the
//! buffer's autotuning; the quick-ack count uses the window last offered.
//!
//! Deviations: the application reads instantly unless the flow sets `read_interval`, and then
//! on a fixed schedule (a real one wakes when data arrives and takes its own time a turn);
//! `ICSK_ACK_PUSHED2` is not kept apart from `ICSK_ACK_PUSHED`; no pingpong (interactive) mode, which needs
//! data sent by the receiver; the compressed-SACK timer uses the handshake RTT where Linux takes
//! min(`rcv_rtt_est`, srtt) (the buffer keeps `rcv_rtt_est` for its autotuning only); the jiffies
//! counter starts at simulated time 0; no D-SACK; a sub-MSS in-order segment (the last one of a
//! sized flow) is ACKed at once, as `tcp_cleanup_rbuf` does for a pushed segment an instant
//! reader consumes.
//!
//! ECN (for flows that negotiated it, see [`EcnEcho`]): the classic echo of RFC 3168 as
//! `__tcp_ecn_check_ce` and `tcp_ecn_accept_cwr`, or DCTCP's per-packet echo as
//! `dctcp_ece_ack_update` (net/ipv4/tcp_dctcp.h), chosen by the flow's
//! algorithm as both hosts run the same one. No AccECN.

use super::rcvbuf::RcvBuf;
use crate::jiffies::{self, TickClock};
use crate::nic::Skb;
use crate::packet::{AckPacket, DataPacket, Ecn, MAX_SACK_BLOCKS};
use crate::problem::{Path, Problem};
use crate::ranges::RangeSet;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// Linux `TCP_ATO_MIN` (= `TCP_DELACK_MIN`, HZ/25): the shortest delayed-ACK timeout.
pub const TCP_ATO_MIN_NS: Nanos = 40_000_000;
/// Linux `TCP_MAX_QUICKACKS`.
pub const TCP_MAX_QUICKACKS: u32 = 16;

/// The receiver's delayed-ACK settings (a flow's `delayed_ack`), Linux's by default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayedAckConfig {
    /// Off: every segment is ACKed at once.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Minimum ACK timeout (Linux TCP_ATO_MIN = TCP_DELACK_MIN, 40 ms); the receiver adapts its
    /// timeout from there as Linux does (this module's header).
    #[serde(default = "default_delack")]
    pub timeout_ns: Nanos,
    /// Segments covered by one ACK outside quick-ack mode (Linux: 2; more makes stretch ACKs).
    #[serde(default = "two")]
    pub segments_per_ack: u32,
    /// Most quick ACKs at a time (Linux TCP_MAX_QUICKACKS, 16); the count is
    /// rcv_wnd / (2 * MSS) up to this.
    #[serde(default = "sixteen")]
    pub quickacks: u32,
}

impl Default for DelayedAckConfig {
    fn default() -> Self {
        DelayedAckConfig {
            enabled: true,
            timeout_ns: default_delack(),
            segments_per_ack: two(),
            quickacks: sixteen(),
        }
    }
}

fn yes() -> bool {
    true
}
fn default_delack() -> Nanos {
    TCP_ATO_MIN_NS
}
fn two() -> u32 {
    2
}
fn sixteen() -> u32 {
    TCP_MAX_QUICKACKS
}

impl DelayedAckConfig {
    /// Problems are at `at` (`flows[1].delayed_ack`).
    pub fn check(&self, at: &Path, out: &mut Vec<Problem>) {
        if self.segments_per_ack == 0 {
            out.push(at.field("segments_per_ack").problem("0: must be >= 1"));
        }
    }
}

/// The reference kernel's CONFIG_HZ.
const HZ: i64 = jiffies::CONFIG_HZ as i64;
/// `tcp_delack_max()`: min(TCP_DELACK_MAX = HZ/5, TCP_RTO_MIN - 1 jiffy), in jiffies.
const DELACK_MAX_J: i64 = HZ / 5 - 1;
/// TCP_RTO_MIN.
const RTO_MIN_NS: Nanos = 200_000_000;
/// TCP_RTO_MAX.
const RTO_MAX_NS: Nanos = 120_000_000_000;
/// `tcp_comp_sack_nr` (default and the kernel hosts' setting).
pub const COMP_SACK_NR: u32 = 44;
/// `tcp_comp_sack_delay_ns` default.
pub const COMP_SACK_DELAY_NS: Nanos = 1_000_000;
/// `tcp_comp_sack_slack_ns` default in 6.18.
pub const COMP_SACK_SLACK_NS: Nanos = 100_000;
/// TCP_FASTRETRANS_THRESH.
const FASTRETRANS_THRESH: u32 = 3;
/// TCP_NUM_SACKS: blocks the receiver remembers.
const NUM_SACKS: usize = 4;
/// TCP_SACK_BLOCKS_EXPECTED (tcp_input.c): blocks an ACK is assumed to carry to the sender
/// ("given that SACK packets might be lost, be conservative and use 2").
const SACK_BLOCKS_EXPECTED: usize = 2;

pub struct Receiver {
    flow: u32,
    /// The host kernel's tick clock: the delayed-ACK timer and ATO run in its jiffies.
    ticks: TickClock,
    cfg: DelayedAckConfig,
    /// Next in-order segment expected.
    pub rcv_nxt: u64,
    /// `rcv_nxt` when the last ACK was sent.
    rcv_wup: u64,
    ooo: RangeSet,
    /// `selective_acks[..num_sacks]`: SACK blocks, most recently changed first.
    sacks: Vec<(u64, u64)>,
    /// ICSK_ACK_SCHED: data arrived that no ACK has covered yet.
    ack_sched: bool,
    /// ICSK_ACK_NOW.
    ack_now: bool,
    /// `icsk_ack.quick`.
    quick: u32,
    /// `icsk_ack.ato` in jiffies; 0 before the first in-order data.
    ato: i64,
    /// `icsk_ack.lrcvtime` in jiffies.
    lrcvtime: i64,
    /// Receiver's `icsk_rto` and `srtt` (from the handshake), in jiffies.
    rto_j: i64,
    srtt_j: i64,
    srtt_ns: Nanos,
    /// TCP_ATO_MIN = TCP_DELACK_MIN in jiffies.
    ato_min_j: i64,
    /// The receive buffer and the window it offers (`tcp_select_window`).
    buf: RcvBuf,
    /// Segments held out of order (each costs the buffer a truesize).
    ooo_segs: u64,
    /// The time of the event being handled, for the timestamp the ACKs carry.
    now: Nanos,
    /// Delayed-ACK timer expiry (`icsk_ack.timeout`), in jiffies.
    delack_j: Option<i64>,
    /// The jiffy whose tick fires it: the timer wheel's bucket after the expiry's
    /// (`jiffies::TickClock::wheel_expiry`; the tick after it, as delays are under 63 jiffies).
    delack_fire_j: Option<i64>,
    compressed_ack: u32,
    compressed_ack_rcv_nxt: u64,
    dup_ack_counter: u32,
    /// When the SYN-ACK went out, until the handshake's final ACK arrives.
    synack_sent_at: Option<Nanos>,
    /// Handshake packets that arrived, SYNs and the final ACK (not counted in `arrived_pkts`).
    pub handshake_pkts: u64,
    /// Compressed-SACK hrtimer expiry.
    comp_at: Option<Nanos>,
    /// In-order payload bytes received (`tcpi_bytes_received`).
    pub delivered_bytes: u64,
    /// Payload bytes the application has read (`copied_seq`): `delivered_bytes` for a reader
    /// that reads at once.
    pub read_bytes: u64,
    /// The receiving application reads every `read_interval` ns of the trial's clock (0: as
    /// data arrives); the next read, if in-order data waits unread; and `copied_seq` in
    /// segments.
    read_interval: Nanos,
    read_at: Option<Nanos>,
    last_read: Nanos,
    copied_seq: u64,
    /// ICSK_ACK_PUSHED: a segment shorter than the MSS waits unread.
    pushed: bool,
    /// Every data packet that arrived, duplicates included, and the skbs they came in (more
    /// packets than skbs when the NIC's GRO coalesced them).
    pub arrived_pkts: u64,
    pub arrived_skbs: u64,
    pub duplicate_pkts: u64,
    /// ACKs sent, and of those the ones sent by a timer.
    pub acks_sent: u64,
    pub timer_acks: u64,
    /// Payload of each segment we hold out of order is needed to count bytes once in order.
    mss: u32,
    last_seg: Option<(u64, u32)>,
    /// `ts_recent`: the timestamp to echo.
    ts_recent: Option<Nanos>,
    /// How CE marks are echoed; `Off` for a flow that did not negotiate ECN.
    ecn: EcnEcho,
    /// TCP_ECN_DEMAND_CWR: ECE is set on every ACK until a CWR arrives (classic), or while the
    /// last data packet was CE (per-packet echo).
    demand_cwr: bool,
    /// TCP_ECN_SEEN: an ECN-capable data packet has arrived.
    ecn_seen: bool,
    /// Per-packet echo (`dctcp_ece_ack_update`): CE state of the last data packet and
    /// `rcv_nxt` after it.
    ce_state: bool,
    prior_rcv_nxt: u64,
    /// An ACK to send before the one `on_data` returns (the per-packet echo's flush).
    extra_ack: Option<AckPacket>,
    /// CE-marked data packets that arrived.
    pub ce_pkts: u64,
}

/// How the receiver reports CE marks in ECE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EcnEcho {
    Off,
    /// RFC 3168 section 6.1.3 (Linux `__tcp_ecn_check_ce`, `tcp_ecn_accept_cwr`): after a CE
    /// mark, ECE on every ACK until the sender's CWR arrives; a CE mark (first of an episode)
    /// also enters quick-ack mode.
    Classic,
    /// DCTCP's (Linux `dctcp_ece_ack_update`, used when the algorithm wants CE events): ECE
    /// reflects the CE state of the data each ACK covers; when the state changes, a delayed
    /// ACK pending for earlier data is sent first with the old state, and the new data is
    /// ACKed at once.
    PerPacket,
}

impl Receiver {
    /// Gives back the memory of a finished flow's out-of-order and SACK buffers.
    pub fn release_buffers(&mut self) {
        self.ooo.shrink_to_fit();
        self.sacks.shrink_to_fit();
    }

    /// `handshake_rtt_ns` is the RTT the receiver measured on the three-way handshake;
    /// `rwnd_bytes` the configured receive window, if any; `rmem_max` `tcp_rmem[2]`.
    pub fn new(flow: u32, cfg: DelayedAckConfig, mss: u32, rwnd_bytes: Option<u64>, handshake_rtt_ns: Nanos, rmem_max: u64) -> Self {
        let mut r = Receiver {
            flow,
            rcv_nxt: 0,
            rcv_wup: 0,
            ooo: RangeSet::default(),
            sacks: Vec::with_capacity(NUM_SACKS),
            ack_sched: false,
            ack_now: false,
            quick: 0,
            ato: 0,
            lrcvtime: 0,
            rto_j: 0,
            ticks: TickClock::default(),
            srtt_j: 0,
            srtt_ns: 0,
            synack_sent_at: None,
            handshake_pkts: 0,
            ato_min_j: ceil_jiffies(cfg.timeout_ns).max(1),
            buf: RcvBuf::new(mss, rwnd_bytes, rmem_max),
            ooo_segs: 0,
            now: 0,
            delack_j: None,
            delack_fire_j: None,
            compressed_ack: 0,
            compressed_ack_rcv_nxt: 0,
            dup_ack_counter: 0,
            comp_at: None,
            delivered_bytes: 0,
            read_bytes: 0,
            read_interval: 0,
            read_at: None,
            last_read: 0,
            copied_seq: 0,
            pushed: false,
            arrived_pkts: 0,
            arrived_skbs: 0,
            duplicate_pkts: 0,
            acks_sent: 0,
            timer_acks: 0,
            mss,
            last_seg: None,
            ts_recent: None,
            ecn: EcnEcho::Off,
            demand_cwr: false,
            ecn_seen: false,
            ce_state: false,
            prior_rcv_nxt: 0,
            extra_ack: None,
            ce_pkts: 0,
            cfg,
        };
        r.set_handshake_rtt(handshake_rtt_ns);
        r
    }

    /// The receiver's RTT from the handshake (`tcp_synack_rtt_meas`, `tcp_rtt_estimator`'s
    /// first sample): srtt, and rto = srtt + max(2 srtt, 200 ms).
    fn set_handshake_rtt(&mut self, rtt_ns: Nanos) {
        self.srtt_ns = rtt_ns.max(1);
        self.srtt_j = ceil_jiffies(self.srtt_ns);
        self.rto_j = ceil_jiffies((self.srtt_ns + (2 * self.srtt_ns).max(RTO_MIN_NS)).min(RTO_MAX_NS));
    }

    /// A SYN arrived (the listener's `tcp_v4_conn_request`): answer with a SYN-ACK at once.
    pub fn on_syn(&mut self, now: Nanos, p: &DataPacket) -> AckPacket {
        self.handshake_pkts += 1;
        self.synack_sent_at = Some(now);
        AckPacket::syn_ack(self.flow, p.sent_at, self.buf.syn_window(), now)
    }

    /// The handshake's final ACK arrived: its RTT since the SYN-ACK is the receiver's.
    pub fn on_handshake_ack(&mut self, now: Nanos) {
        self.handshake_pkts += 1;
        if let Some(t) = self.synack_sent_at.take() {
            self.set_handshake_rtt(now - t);
        }
    }

    /// Sets the host kernel's tick clock (the trial's tick phase).
    pub fn with_ticks(mut self, ticks: TickClock) -> Self {
        self.ticks = ticks;
        self
    }

    /// A receiving application that reads every `interval` ns (0: as soon as data arrives).
    pub fn with_read_interval(mut self, interval: Nanos) -> Self {
        self.read_interval = interval;
        self
    }

    /// Sets how CE marks are echoed (a flow that negotiated ECN).
    pub fn with_ecn(mut self, mode: EcnEcho) -> Self {
        self.ecn = mode;
        self
    }

    /// `tcp_ecn_accept_cwr`: the sender's CWR ends the classic echo; a data segment carrying
    /// it is ACKed at once.
    fn ecn_accept_cwr(&mut self, p: &DataPacket) {
        if self.ecn != EcnEcho::Off && p.cwr {
            self.demand_cwr = false;
            self.ack_now = true;
        }
    }

    /// `__tcp_ecn_check_ce` for a new data segment, after rcv_nxt has moved past it.
    fn ecn_check_ce(&mut self, p: &DataPacket) {
        match self.ecn {
            EcnEcho::Off => {}
            EcnEcho::Classic => match p.ecn {
                // A Not-ECT segment after ECT ones is probably a retransmission: ACK quickly.
                Ecn::NotEct => {
                    if self.ecn_seen {
                        self.enter_quickack_mode_max(2);
                    }
                }
                Ecn::Ce => {
                    if !self.demand_cwr {
                        // The sender may have a very small window: do not delay the echo.
                        self.enter_quickack_mode_max(2);
                        self.demand_cwr = true;
                    }
                    self.ecn_seen = true;
                }
                Ecn::Ect0 | Ecn::Ect1 => self.ecn_seen = true,
            },
            EcnEcho::PerPacket => {
                if p.ecn == Ecn::NotEct {
                    if self.ecn_seen {
                        self.enter_quickack_mode_max(2);
                    }
                    return;
                }
                let ce = p.ecn == Ecn::Ce;
                if ce != self.ce_state {
                    // Flush a delayed ACK for the earlier data with its own CE state, then
                    // ACK this data at once.
                    if self.delack_j.is_some() {
                        self.demand_cwr = self.ce_state;
                        let mut a = self.make_ack(false);
                        a.ack = self.prior_rcv_nxt;
                        a.ece = self.demand_cwr;
                        self.acks_sent += 1;
                        self.extra_ack = Some(a);
                    }
                    self.ack_now = true;
                }
                self.prior_rcv_nxt = self.rcv_nxt;
                self.ce_state = ce;
                self.demand_cwr = ce;
                self.ecn_seen = true;
            }
        }
    }

    /// A data segment arrived; returns the ACKs to send now. Afterwards the caller (re)arms
    /// the receiver's timer for [`Receiver::timer_deadline`].
    #[inline]
    pub fn on_data(&mut self, now: Nanos, p: &DataPacket) -> DataAcks {
        self.on_skb(now, &Skb::single(*p))
    }

    /// An skb reaches TCP (`tcp_rcv_established` / `tcp_data_queue`): one segment, or the GRO
    /// skb of consecutive segments the NIC coalesced ([`crate::nic`]). Linux handles the skb as
    /// one: one `tcp_event_data_recv`, one `tcp_grow_window` with the skb's length and truesize,
    /// one ACK decision, the timestamp, ECN field and CWR flag of its first segment.
    #[inline]
    pub fn on_skb(&mut self, now: Nanos, skb: &Skb) -> DataAcks {
        let p = &skb.first;
        self.arrived_pkts += skb.segs;
        self.arrived_skbs += 1;
        self.now = now;
        let seq = p.seq;
        let end = seq + skb.segs;
        // tcp_replace_ts_recent: only a segment at or below rcv_wup updates ts_recent.
        if seq <= self.rcv_wup && self.ts_recent.is_none_or(|t| p.sent_at >= t) {
            self.ts_recent = Some(p.sent_at);
        }
        if skb.last_payload < self.mss {
            self.last_seg = Some((end - 1, skb.last_payload));
        }
        if p.ecn == Ecn::Ce {
            self.ce_pkts += skb.segs;
        }
        self.ecn_accept_cwr(p);
        // Every path schedules an ACK (inet_csk_schedule_ack) before the SACK list changes.
        self.ack_sched = true;
        let mut flushed = None;
        if end <= self.rcv_nxt {
            // Old data (tcp_data_queue): enter quick-ack mode, ACK at once.
            self.duplicate_pkts += skb.segs;
            self.enter_quickack_mode();
        } else if seq <= self.rcv_nxt {
            // In order, or partly old ("seq < rcv_next < end_seq": the new part is queued).
            self.duplicate_pkts += self.rcv_nxt - seq;
            let had_ooo = !self.ooo.is_empty();
            self.rcv_nxt = end;
            if !self.ooo.is_empty() {
                self.ooo_segs -= self.ooo.covered_in(seq, end);
                self.ooo.remove_below(end);
                if let Some(e) = self.ooo.pop_starting_at(self.rcv_nxt) {
                    self.ooo_segs -= e - self.rcv_nxt;
                    self.rcv_nxt = e;
                }
            }
            self.sack_remove();
            self.delivered_bytes = self.bytes_below(self.rcv_nxt);
            self.event_data_recv(now);
            self.ecn_check_ce(p);
            self.segment_buffered(now, skb);
            self.buf.on_in_order(now, self.delivered_bytes);
            if self.read_interval == 0 {
                self.read(now);
            } else if self.read_at.is_none() {
                // the first read time at or after now, after the last read
                let at = (now + self.read_interval - 1) / self.read_interval * self.read_interval;
                self.read_at = Some(at.max(self.last_read + self.read_interval));
            }
            if had_ooo && self.ooo.is_empty() {
                self.ack_now = true;
            }
            if skb.last_payload < self.mss {
                // tcp_cleanup_rbuf ACKs a pushed segment once the application has read it
                if self.read_interval == 0 {
                    self.ack_now = true;
                } else {
                    self.pushed = true;
                }
            }
        } else {
            self.ecn_check_ce(p);
            let held = self.ooo.covered_in(seq, end);
            if held == skb.segs {
                // Already held (tcp_data_queue_ofo drops it and goes on to add_sack).
                self.duplicate_pkts += skb.segs;
            } else {
                self.duplicate_pkts += held;
                self.ooo.insert(seq, end);
                self.ooo_segs += skb.segs - held;
                self.segment_buffered(now, skb);
                let last = self.ooo.ranges().last().map_or(end, |(_, e)| e);
                self.buf.on_out_of_order(self.delivered_bytes, self.bytes_below(last));
            }
            flushed = self.sack_new_ofo(seq, end);
        }
        let ack = if !self.cfg.enabled {
            Some(self.send_ack(false))
        } else {
            self.ack_snd_check(now)
        };
        DataAcks { ce_flushed: self.extra_ack.take(), flushed, ack }
    }

    /// The application reads every in-order byte (`tcp_recvmsg`): `tcp_rcv_space_adjust`.
    fn read(&mut self, now: Nanos) {
        self.copied_seq = self.rcv_nxt;
        self.read_bytes = self.delivered_bytes;
        let ooo_end = self.ooo.ranges().last().map(|(_, e)| self.bytes_below(e));
        self.buf.on_read(now, self.read_bytes, ooo_end);
    }

    /// A paced application's read (its first since data arrived), then `tcp_cleanup_rbuf`:
    /// an ACK if one is scheduled and more than one full frame is unacknowledged, or the
    /// segment read was pushed (short); else if the read at least doubles a window that had
    /// fallen to half the clamp or less.
    fn app_read(&mut self, now: Nanos) -> Option<AckPacket> {
        self.read_at = None;
        self.last_read = now;
        if self.copied_seq == self.rcv_nxt {
            return None;
        }
        self.read(now);
        let pushed = std::mem::take(&mut self.pushed);
        if self.ack_sched && (self.rcv_nxt - self.rcv_wup >= self.cfg.segments_per_ack as u64 || pushed) {
            return Some(self.send_ack(false));
        }
        let now_wnd = self.buf.receive_window(self.bytes_below(self.rcv_nxt));
        if 2 * now_wnd <= self.buf.buffer().1 {
            let (new, _) = self.buf.window_from_free_space(self.held_mem());
            if new > 0 && new >= 2 * now_wnd {
                return Some(self.send_ack(false));
            }
        }
        None
    }

    /// Truesize the buffer holds: out-of-order segments, and in-order ones a paced application
    /// has not read yet (an instant reader's are read before anything looks).
    fn held_mem(&self) -> u64 {
        (self.ooo_segs + self.unread_segs()) * self.buf.ooo_cost()
    }

    fn unread_segs(&self) -> u64 {
        if self.read_interval == 0 {
            0
        } else {
            self.rcv_nxt - self.copied_seq
        }
    }

    /// A new segment entered the buffer (in order or out of it): the receiver's RTT from its
    /// timestamp echo, and `tcp_grow_window`, which asks for one quick ACK while it opens the
    /// window.
    fn segment_buffered(&mut self, now: Nanos, skb: &Skb) {
        let held = self.held_mem();
        if self.buf.on_segment(now, skb.bytes(), skb.segs, skb.first.ts_echo, held) {
            self.quick |= 1;
        }
    }

    /// `tcp_sack_new_ofo_skb`: the SACK list after an out-of-order arrival of `[s, e)`; returns
    /// the compressed SACK flushed before the change (`tcp_sack_compress_send_ack`), if any.
    fn sack_new_ofo(&mut self, s: u64, e: u64) -> Option<AckPacket> {
        // tcp_sack_extend: the block touches or overlaps [s, e).
        let hit = self.sacks.iter().position(|&(bs, be)| bs <= e && s <= be);
        let pos = hit.unwrap_or(self.sacks.len());
        let flushed = (pos >= SACK_BLOCKS_EXPECTED && self.compressed_ack > 0).then(|| self.send_ack(false));
        match hit {
            Some(i) => {
                let (bs, be) = self.sacks.remove(i);
                let mut b = (bs.min(s), be.max(e));
                // tcp_sack_maybe_coalesce: blocks the grown one now touches merge into it.
                self.sacks.retain(|&(os, oe)| {
                    let touches = os <= b.1 && b.0 <= oe;
                    if touches {
                        b = (b.0.min(os), b.1.max(oe));
                    }
                    !touches
                });
                self.sacks.insert(0, b);
            }
            None => {
                self.sacks.truncate(NUM_SACKS - 1);
                self.sacks.insert(0, (s, e));
            }
        }
        flushed
    }

    /// `tcp_sack_remove`: blocks the cumulative ACK reached leave the list.
    fn sack_remove(&mut self) {
        if self.ooo.is_empty() {
            self.sacks.clear();
        } else {
            let rcv_nxt = self.rcv_nxt;
            self.sacks.retain(|&(s, _)| rcv_nxt < s);
        }
    }

    /// The receiver's timer (a paced application's read, the delayed ACK or the compressed
    /// SACK, whichever is earliest) fired.
    pub fn on_timer(&mut self, now: Nanos) -> Option<AckPacket> {
        self.now = now;
        if self.read_at.is_some_and(|at| at <= now) {
            if let Some(ack) = self.app_read(now) {
                return Some(ack);
            }
        }
        if let Some(at) = self.comp_at {
            if at <= now {
                // tcp_compressed_ack_kick
                self.comp_at = None;
                if self.compressed_ack > 0 {
                    return Some(self.send_ack(true));
                }
            }
        }
        if let Some(t) = self.delack_fire_j {
            if self.ticks.tick_start(t, jiffies::CONFIG_HZ) <= now {
                // tcp_delack_timer_handler
                self.delack_j = None;
                self.delack_fire_j = None;
                if self.compressed_ack > 0 {
                    return Some(self.send_ack(true));
                }
                if self.ack_sched {
                    self.ato = (self.ato << 1).min(self.rto_j);
                    return Some(self.send_ack(true));
                }
            }
        }
        None
    }

    /// When the receiver's timer must fire next, if it is armed.
    pub fn timer_deadline(&self) -> Option<Nanos> {
        let earlier = |a: Option<Nanos>, b: Option<Nanos>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let d = self.delack_fire_j.map(|j| self.ticks.tick_start(j, jiffies::CONFIG_HZ));
        earlier(earlier(d, self.comp_at), self.read_at)
    }

    pub fn has_unacked(&self) -> bool {
        self.ack_sched
    }

    /// `icsk_ack.ato` in jiffies (0 before the first in-order segment).
    pub fn ato_jiffies(&self) -> i64 {
        self.ato
    }

    /// Quick ACKs left (`icsk_ack.quick`).
    pub fn quickacks_left(&self) -> u32 {
        self.quick
    }

    fn event_data_recv(&mut self, now: Nanos) {
        let now_j = self.ticks.jiffies(now, jiffies::CONFIG_HZ) as i64;
        if self.ato == 0 {
            self.incr_quickack();
            self.ato = self.ato_min_j;
        } else {
            let m = now_j - self.lrcvtime;
            if m <= self.ato_min_j / 2 {
                self.ato = (self.ato >> 1) + self.ato_min_j / 2;
            } else if m < self.ato {
                self.ato = ((self.ato >> 1) + m).min(self.rto_j);
            } else if m > self.rto_j {
                self.incr_quickack();
            }
        }
        self.lrcvtime = now_j;
    }

    fn incr_quickack(&mut self) {
        let mut q = (self.buf.offered() / (2 * self.mss as u64)) as u32;
        if q == 0 {
            q = 2;
        }
        q = q.min(self.cfg.quickacks);
        if q > self.quick {
            self.quick = q;
        }
    }

    fn enter_quickack_mode(&mut self) {
        self.incr_quickack();
        self.ato = self.ato_min_j;
    }

    /// `tcp_enter_quickack_mode(sk, max)`: at most `max` quick ACKs.
    fn enter_quickack_mode_max(&mut self, max: u32) {
        let mut q = (self.buf.offered() / (2 * self.mss as u64)) as u32;
        if q == 0 {
            q = 2;
        }
        q = q.min(max).min(self.cfg.quickacks.max(1));
        if q > self.quick {
            self.quick = q;
        }
        self.ato = self.ato_min_j;
    }

    fn ack_snd_check(&mut self, now: Nanos) -> Option<AckPacket> {
        if !self.ack_sched {
            return None;
        }
        // More than one full frame, and the application has read everything or the window
        // the free space allows is still the one offered (else tcp_cleanup_rbuf ACKs after
        // the read).
        let more_than_one_frame = self.rcv_nxt - self.rcv_wup >= self.cfg.segments_per_ack as u64
            && (self.unread_segs() == 0 || self.buf.window_from_free_space(self.held_mem()).0 >= self.buf.offered());
        if more_than_one_frame || self.quick > 0 || self.ack_now {
            return Some(self.send_ack(false));
        }
        if self.ooo.is_empty() {
            return self.send_delayed_ack(now);
        }
        if self.compressed_ack >= COMP_SACK_NR {
            return Some(self.send_ack(false));
        }
        if self.compressed_ack_rcv_nxt != self.rcv_nxt {
            self.compressed_ack_rcv_nxt = self.rcv_nxt;
            self.dup_ack_counter = 0;
        }
        if self.dup_ack_counter < FASTRETRANS_THRESH {
            self.dup_ack_counter += 1;
            return Some(self.send_ack(false));
        }
        self.compressed_ack += 1;
        if self.comp_at.is_none() {
            let delay = COMP_SACK_DELAY_NS.min(self.srtt_ns / 20);
            self.comp_at = Some(now + delay + COMP_SACK_SLACK_NS);
        }
        None
    }

    fn send_delayed_ack(&mut self, now: Nanos) -> Option<AckPacket> {
        let now_j = self.ticks.jiffies(now, jiffies::CONFIG_HZ) as i64;
        let mut ato = self.ato;
        if ato > self.ato_min_j {
            // ICSK_ACK_PUSHED segments are ACKed at once here, and there is no pingpong mode.
            let mut max_ato = HZ / 2;
            let rtt = self.srtt_j.max(self.ato_min_j);
            if rtt < max_ato {
                max_ato = rtt;
            }
            ato = ato.min(max_ato);
        }
        ato = ato.min(DELACK_MAX_J);
        let mut timeout = now_j + ato;
        if let Some(old) = self.delack_j {
            if old <= now_j + (ato >> 2) {
                return Some(self.send_ack(false));
            }
            timeout = timeout.min(old);
        }
        self.delack_j = Some(timeout);
        self.delack_fire_j = Some(self.ticks.wheel_expiry(now_j as u64, timeout as u64) as i64);
        None
    }

    /// `tcp_send_ack` and `tcp_event_ack_sent`.
    fn send_ack(&mut self, by_timer: bool) -> AckPacket {
        self.compressed_ack = 0;
        self.comp_at = None;
        if self.quick > 0 && self.ack_sched {
            if self.quick <= 1 {
                self.quick = 0;
                self.ato = self.ato_min_j;
            } else {
                self.quick -= 1;
            }
        }
        self.delack_j = None;
        self.delack_fire_j = None;
        self.ack_sched = false;
        self.ack_now = false;
        self.rcv_wup = self.rcv_nxt;
        self.acks_sent += 1;
        if by_timer {
            self.timer_acks += 1;
        }
        self.make_ack(by_timer)
    }

    fn bytes_below(&self, seq: u64) -> u64 {
        match self.last_seg {
            Some((s, len)) if s < seq => s * self.mss as u64 + len as u64,
            _ => seq * self.mss as u64,
        }
    }

    fn make_ack(&mut self, delayed: bool) -> AckPacket {
        let mut sacks = [(0, 0); MAX_SACK_BLOCKS];
        let n = self.sacks.len().min(MAX_SACK_BLOCKS);
        // Block by block rather than `copy_from_slice`: a copy of variable length is a call
        // to `memcpy`, once per ACK, and nearly every ACK carries no block at all.
        for (slot, &b) in sacks.iter_mut().zip(&self.sacks) {
            *slot = b;
        }
        let (wnd, stop_quick) = self.buf.select_window(self.bytes_below(self.rcv_nxt), self.held_mem());
        if stop_quick {
            self.quick = 0;
        }
        AckPacket { flow: self.flow, ack: self.rcv_nxt, sacks, n_sacks: n as u8, delayed, tsecr: self.ts_recent, ece: self.demand_cwr, wnd, ts_val: self.now }
    }
}

/// The ACKs one data segment releases, in the order they leave: a delayed ACK flushed with the
/// earlier CE state when the CE state changes (DCTCP's `dctcp_ece_ack_update`), a compressed SACK
/// flushed before the SACK list changed (`tcp_sack_compress_send_ack`), then the ACK for the
/// segment itself.
#[derive(Debug, Default)]
pub struct DataAcks {
    pub ce_flushed: Option<AckPacket>,
    pub flushed: Option<AckPacket>,
    pub ack: Option<AckPacket>,
}

impl DataAcks {
    /// Hands each ACK to `send`, in the order above. One `if let` each rather than an iterator
    /// or an array of the three: this runs for every data segment, and either was a copy of
    /// all three ACKs.
    #[inline]
    pub fn send_each(self, mut send: impl FnMut(AckPacket)) {
        if let Some(a) = self.ce_flushed {
            send(a);
        }
        if let Some(a) = self.flushed {
            send(a);
        }
        if let Some(a) = self.ack {
            send(a);
        }
    }
}

fn ceil_jiffies(ns: Nanos) -> i64 {
    jiffies::nsecs_to_jiffies_ceil(ns, jiffies::CONFIG_HZ) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    fn data(seq: u64) -> DataPacket {
        DataPacket { flow: 0, seq, size: 1500, payload: 1448, sent_at: 0, ecn: Ecn::NotEct, cwr: false, ts_echo: None }
    }

    fn cfg(quickacks: u32) -> DelayedAckConfig {
        DelayedAckConfig { enabled: true, timeout_ns: 40 * MS, segments_per_ack: 2, quickacks }
    }

    /// A receiver with a 100 ms handshake RTT: rto = 100 + 200 = 300 ms = 75 jiffies,
    /// srtt = 25 jiffies. Its window is fixed at the first one Linux offers (65160), so that
    /// the ACK policy is seen without `tcp_grow_window`'s quick ACKs (tested on their own).
    fn rx(quickacks: u32) -> Receiver {
        Receiver::new(0, cfg(quickacks), 1448, Some(65160), 100 * MS, 6 << 20)
    }

    /// Fires the receiver's timer if due by `until`; returns the ACK and when it went out.
    fn run_timer(r: &mut Receiver, until: Nanos) -> Option<(Nanos, AckPacket)> {
        let at = r.timer_deadline()?;
        if at > until {
            return None;
        }
        r.on_timer(at).map(|a| (at, a))
    }

    fn marked(seq: u64, ecn: Ecn, cwr: bool) -> DataPacket {
        DataPacket { ecn, cwr, ..data(seq) }
    }

    /// RFC 3168 section 6.1.3 (`__tcp_ecn_check_ce`, `tcp_ecn_accept_cwr`): after a CE mark
    /// every ACK carries ECE until a segment with CWR arrives.
    #[test]
    fn classic_echo_repeats_ece_until_cwr() {
        let mut r = Receiver::new(0, DelayedAckConfig { enabled: false, ..cfg(16) }, 1448, None, 100 * MS, 6 << 20).with_ecn(EcnEcho::Classic);
        assert!(!r.on_data(0, &marked(0, Ecn::Ect0, false)).ack.unwrap().ece);
        assert!(r.on_data(MS, &marked(1, Ecn::Ce, false)).ack.unwrap().ece);
        assert!(r.on_data(2 * MS, &marked(2, Ecn::Ect0, false)).ack.unwrap().ece, "still echoing");
        assert!(!r.on_data(3 * MS, &marked(3, Ecn::Ect0, true)).ack.unwrap().ece, "CWR ends the echo");
        assert_eq!(r.ce_pkts, 1);
    }

    /// DCTCP's echo (`dctcp_ece_ack_update`): ECE follows each packet's CE state; when it
    /// changes, a delayed ACK for the earlier data goes out first with the old state.
    #[test]
    fn per_packet_echo_flushes_the_delayed_ack_on_a_ce_change() {
        let mut r = rx(0).with_ecn(EcnEcho::PerPacket);
        // No quick ACKs: the first segment's ACK is delayed.
        assert!(r.on_data(0, &marked(0, Ecn::Ect1, false)).ack.is_none());
        let d = r.on_data(MS, &marked(1, Ecn::Ce, false));
        let a = d.ack.expect("a CE change is ACKed at once");
        let flushed = d.ce_flushed.expect("the delayed ACK for segment 0 goes first");
        assert_eq!((flushed.ack, flushed.ece), (1, false));
        assert_eq!((a.ack, a.ece), (2, true));
        let b = r.on_data(2 * MS, &marked(2, Ecn::Ect1, false)).ack.expect("and back");
        assert_eq!((b.ack, b.ece), (3, false));
    }

    /// While `tcp_grow_window` opens the window (from 65160 towards the 81920 a 131072-byte
    /// buffer gives, 2 MSS a segment), each segment it grows on sets one quick ACK: segments
    /// that would otherwise wait for the delayed-ACK timer are ACKed at once until the window
    /// is open.
    #[test]
    fn window_growth_acks_at_once_until_the_window_is_open() {
        // at most one quick ACK from quick-ack mode itself (TCP_MAX_QUICKACKS = 1)
        let mut r = Receiver::new(0, cfg(1), 1448, None, 100 * MS, 6 << 20);
        // 65160 -> 81920 at 2896 a segment: the first 6 segments grow it, each ACKed at once
        for i in 0..6 {
            assert!(r.on_data(i as Nanos * 100 * MS, &data(i)).ack.is_some(), "segment {i} grows the window");
            assert!(run_timer(&mut r, i as Nanos * 100 * MS + 99 * MS).is_none());
        }
        assert_eq!(r.buf.offered(), 81_920);
        assert!(r.on_data(600 * MS, &data(6)).ack.is_none(), "the window is open: the ACK waits");
        // with the window fixed there is nothing to grow: only quick-ack mode's one
        let mut fixed = Receiver::new(0, cfg(1), 1448, Some(65160), 100 * MS, 6 << 20);
        assert!(fixed.on_data(0, &data(0)).ack.is_some());
        assert!(fixed.on_data(100 * MS, &data(1)).ack.is_none());
    }

    /// Segments every `gap` ns to a receiver whose application reads every `interval`: the
    /// ACKs sent, (time, cumulative ACK), timers run between arrivals (a read due at an
    /// arrival's time before it if `read_first`).
    fn paced(interval: Nanos, gap: Nanos, segs: u64, read_first: bool) -> Vec<(Nanos, u64)> {
        let mut r = Receiver::new(0, cfg(16), 1448, None, 10 * MS, 6 << 20).with_read_interval(interval);
        let mut acks = vec![];
        for i in 0..segs {
            let t = i as Nanos * gap;
            while let Some((at, a)) = run_timer(&mut r, if read_first { t } else { t - 1 }) {
                acks.push((at, a.ack));
            }
            if let Some(a) = r.on_data(t, &data(i)).ack {
                acks.push((t, a.ack));
            }
        }
        acks
    }

    #[test]
    fn a_paced_reader_gets_one_ack_per_read_once_the_window_is_open() {
        // 500 Mbit/s of full frames (24 us apart), read every 500 us, for 2 s: once
        // tcp_grow_window has raised rcv_ssthresh to the free space, an arrival with unread
        // data before it cannot keep the window offered, so the read ACKs (as Linux 6.18 did
        // on the kernel backend: its sink's reads and the ACKs matched within 0.2 %)
        for read_first in [false, true] {
            let acks = paced(500_000, 24_000, 2_000_000_000 / 24_000, read_first);
            let late: Vec<_> = acks.iter().filter(|&&(t, _)| t >= 1_000_000_000).collect();
            assert!(late.iter().all(|&&(t, _)| t % 500_000 == 0), "every ACK at a read: {:?}", &late[..10]);
            assert_eq!(late.len(), 2000, "one ACK per read");
            assert!(late.windows(2).all(|w| (20..=21).contains(&(w[1].1 - w[0].1))), "each ACK covers the read's 20-21 segments");
        }
        // a read that finds one segment: an ACK every second read, as from an instant reader
        let acks = paced(500_000, 800_000, 2_000_000_000 / 800_000, false);
        let late: Vec<_> = acks.iter().filter(|&&(t, _)| t >= 1_000_000_000).collect();
        assert!(late.windows(2).all(|w| w[1].1 - w[0].1 == 2 && w[1].0 - w[0].0 == 1_600_000), "{:?}", &late[..6]);
    }

    #[test]
    fn quickack_count_at_start_is_rcv_wnd_over_two_mss_capped() {
        // 65160 / (2 * 1448) = 22, capped at TCP_MAX_QUICKACKS = 16.
        let mut r = rx(16);
        let mut now = 0;
        for i in 0..16 {
            assert!(r.on_data(now, &data(i)).ack.is_some(), "quick ACK {i}");
            now += 100 * MS;
        }
        assert!(r.on_data(now, &data(16)).ack.is_none(), "the 17th lone segment is delayed");
        // A 10-segment receive window allows 10 * 1448 / 2896 = 5 quick ACKs.
        let mut r = Receiver::new(0, cfg(16), 1448, Some(10 * 1448), 100 * MS, 6 << 20);
        for i in 0..5 {
            assert!(r.on_data(i as Nanos * 100 * MS, &data(i)).ack.is_some());
        }
        assert!(r.on_data(500 * MS, &data(5)).ack.is_none());
    }

    #[test]
    fn acks_every_second_segment_after_quickacks() {
        let mut r = rx(1);
        assert!(r.on_data(0, &data(0)).ack.is_some());
        assert!(r.on_data(0, &data(1)).ack.is_none());
        // ato 10 jiffies: expiry jiffy 10, fired as tick 11 begins (the timer wheel).
        assert_eq!(r.timer_deadline(), Some(44 * MS));
        let a = r.on_data(0, &data(2)).ack.expect("second unacked segment must be ACKed at once");
        assert_eq!(a.ack, 3);
        assert_eq!(r.timer_deadline(), None, "an ACK sent cancels the delayed-ACK timer");
    }

    #[test]
    fn ack_delay_at_120ms_inter_arrival_follows_ato() {
        // One segment every 120 ms (1500 B at 100 kbit/s), after quick-ack mode: ato starts at
        // TCP_ATO_MIN, doubles each time the delayed ACK fires, and the delay used is capped by
        // the handshake srtt (25 jiffies = 100 ms).
        let mut r = rx(1);
        assert!(r.on_data(0, &data(0)).ack.is_some());
        let mut delays = Vec::new();
        let mut atos = Vec::new();
        for i in 1..8u64 {
            let t = i as Nanos * 120 * MS;
            assert!(r.on_data(t, &data(i)).ack.is_none());
            atos.push(r.ato_jiffies());
            let (at, ack) = run_timer(&mut r, t + 300 * MS).expect("delayed ACK");
            assert_eq!(ack.ack, i + 1);
            assert!(ack.delayed);
            delays.push((at - t) / MS);
        }
        // Inter-arrival 30 jiffies: ato 10 (40 ms); fired -> 20 (80 ms); fired -> 40, then
        // 40/2 + 30 = 50 > TCP_DELACK_MIN so the srtt bound (25 jiffies) applies; fired -> 75
        // (the rto); 75/2 + 30 = 67 -> 100 ms; and so on. Each fires one jiffy after its
        // expiry (the timer wheel's level 0), as the kernel's do: a kernel receiver's delayed
        // ACKs at 256 kbit/s came 40-44 ms and 104-108 ms after the segment.
        assert_eq!(atos, vec![10, 20, 50, 67, 67, 67, 67]);
        assert_eq!(delays, vec![44, 84, 104, 104, 104, 104, 104]);
    }

    #[test]
    fn ato_shrinks_with_fast_arrivals_and_timer_is_jiffy_aligned() {
        let mut r = rx(1);
        assert!(r.on_data(0, &data(0)).ack.is_some()); // quick ACK; ato = 10
        // Arrival 3 ms later (0 jiffies apart, m <= TCP_ATO_MIN/2): ato = 10/2 + 5 = 10.
        assert!(r.on_data(3 * MS, &data(1)).ack.is_none());
        assert_eq!(r.ato_jiffies(), 10);
        // Expiry at jiffy 0 + 10, fired as tick 11 begins: 44 ms, not 47 ms.
        assert_eq!(r.timer_deadline(), Some(44 * MS));
    }

    #[test]
    fn long_gap_restarts_quickack_mode() {
        let mut r = rx(2);
        assert!(r.on_data(0, &data(0)).ack.is_some());
        assert!(r.on_data(10 * MS, &data(1)).ack.is_some());
        assert_eq!(r.quickacks_left(), 0);
        // m = 100 jiffies > rto (75): tcp_incr_quickack gives 2 quick ACKs again.
        assert!(r.on_data(410 * MS, &data(2)).ack.is_some());
        assert_eq!(r.quickacks_left(), 1);
        assert!(r.on_data(570 * MS, &data(3)).ack.is_some());
        // m = 40 jiffies: neither fast nor a long gap; delayed.
        assert!(r.on_data(730 * MS, &data(4)).ack.is_none());
    }

    #[test]
    fn old_data_enters_quickack_mode() {
        let mut r = rx(16);
        for i in 0..16u64 {
            assert!(r.on_data(i as Nanos * MS, &data(i)).ack.is_some());
        }
        assert_eq!(r.quickacks_left(), 0);
        assert!(r.on_data(16 * MS, &data(16)).ack.is_none());
        let _ = run_timer(&mut r, 100 * MS).unwrap();
        assert_eq!(r.ato_jiffies(), 20);
        // A spurious retransmission: immediate ACK, ato back to TCP_ATO_MIN, and 16 quick ACKs
        // (one used by this ACK).
        let a = r.on_data(200 * MS, &data(0)).ack.expect("old data is ACKed at once");
        assert_eq!(a.ack, 17);
        assert_eq!(r.quickacks_left(), 15);
        assert_eq!(r.ato_jiffies(), 10);
        assert_eq!(r.duplicate_pkts, 1);
        assert!(r.on_data(320 * MS, &data(17)).ack.is_some(), "quick-ack mode again");
    }

    #[test]
    fn out_of_order_three_dupacks_then_compressed_until_timer() {
        let mut r = rx(0);
        let _ = r.on_data(0, &data(0)).ack;
        let _ = r.on_data(0, &data(1)).ack; // two full frames: ACK 2
        let t = 10 * MS;
        for k in 0..3u64 {
            let a = r.on_data(t, &data(3 + k)).ack.expect("the first three dup-ACKs go out at once");
            assert_eq!(a.ack, 2);
            assert_eq!(a.sack_blocks(), &[(3, 4 + k)]);
        }
        // Fourth and later: compressed, one timer of min(1 ms, srtt/20 = 5 ms) + 100 us slack.
        assert!(r.on_data(t, &data(6)).ack.is_none());
        assert!(r.on_data(t + 200_000, &data(7)).ack.is_none());
        assert_eq!(r.timer_deadline(), Some(t + 1_100_000));
        let (at, a) = run_timer(&mut r, t + 5 * MS).unwrap();
        assert_eq!(at, t + 1_100_000);
        assert_eq!(a.sack_blocks(), &[(3, 8)]);
        // Same rcv_nxt: the dup-ACK budget is spent, the next one is compressed again.
        assert!(r.on_data(t + 2 * MS, &data(8)).ack.is_none());
    }

    /// `selective_acks` is a most-recently-changed list of 4 blocks; before a new block would
    /// push one the sender may not have seen past the first 2, a pending compressed SACK goes out.
    #[test]
    fn sack_list_is_most_recent_first_and_flushes_before_pushing_blocks_out() {
        let mut r = rx(1);
        assert!(r.on_data(0, &data(0)).ack.is_some());
        for s in 2..5 {
            assert!(r.on_data(0, &data(s)).ack.is_some(), "dup-ACK for {s} goes out at once");
        }
        let d = r.on_data(0, &data(5));
        assert!(d.flushed.is_none() && d.ack.is_none(), "compressed");
        // Second block: the first stays within the 2 blocks expected to reach the sender.
        let d = r.on_data(0, &data(7));
        assert!(d.flushed.is_none() && d.ack.is_none());
        // A third block: the pending compressed SACK is sent first, with the list before it.
        let d = r.on_data(0, &data(9));
        let f = d.flushed.expect("compressed SACK flushed before the list changes");
        assert_eq!((f.ack, f.sack_blocks()), (1, &[(7, 8), (2, 6)][..]));
        assert!(d.ack.is_none(), "the flush cleared the scheduled ACK");
        assert!(r.on_data(0, &data(11)).flushed.is_none(), "nothing compressed since the flush");
        let f = r.on_data(0, &data(13)).flushed.expect("flush before the fifth block");
        assert_eq!(f.sack_blocks(), &[(11, 12), (9, 10), (7, 8)]);
        // An arrival in an older block moves that block to the front.
        assert_eq!(r.on_data(0, &data(10)).ack, None);
        // The hole at 1 fills: blocks above rcv_nxt stay, the fifth block was forgotten.
        let a = r.on_data(0, &data(1)).ack.expect("rcv_nxt moved by more than one frame");
        assert_eq!((a.ack, a.sack_blocks()), (6, &[(9, 12), (13, 14), (7, 8)][..]));
    }

    #[test]
    fn out_of_order_compression_stops_at_comp_sack_nr() {
        let mut r = rx(0);
        let _ = r.on_data(0, &data(0)).ack;
        let _ = r.on_data(0, &data(1)).ack;
        let mut immediate = 0;
        let mut sent_at = None;
        for k in 0..60u64 {
            if r.on_data(MS, &data(3 + k)).ack.is_some() {
                immediate += 1;
                if immediate == 4 {
                    sent_at = Some(k);
                }
            }
        }
        // 3 dup-ACKs, then 44 compressed, then the 45th forces an ACK.
        assert_eq!(sent_at, Some(3 + 44));
        assert_eq!(immediate, 4);
    }

    #[test]
    fn hole_fill_and_partial_fill_ack_at_once() {
        let mut r = rx(0);
        let _ = r.on_data(0, &data(0)).ack;
        let _ = r.on_data(0, &data(1)).ack;
        let _ = r.on_data(0, &data(3)).ack;
        let _ = r.on_data(0, &data(5)).ack;
        let a = r.on_data(0, &data(4)).ack.unwrap();
        assert_eq!(a.sack_blocks(), &[(3, 6)]);
        let _ = r.on_data(0, &data(8)).ack; // dup budget for rcv_nxt = 2 spent after 3 ACKs
        let _ = r.on_data(0, &data(9)).ack;
        assert!(r.on_data(0, &data(10)).ack.is_none(), "compressed");
        // rcv_nxt moves (partial fill): a new dup-ACK budget, ACK at once.
        let a = r.on_data(0, &data(2)).ack.expect("partial fill is ACKed at once");
        assert_eq!(a.ack, 6);
        assert_eq!(a.sack_blocks(), &[(8, 11)]);
        let _ = r.on_data(0, &data(7)).ack;
        let a = r.on_data(0, &data(6)).ack.expect("filling the hole must be ACKed at once");
        assert_eq!(a.ack, 11);
        assert_eq!(a.n_sacks, 0);
        assert_eq!(r.delivered_bytes, 11 * 1448);
    }

    #[test]
    fn ato_grows_by_timer_and_is_bounded_by_srtt() {
        let mut r = rx(1);
        let _ = r.on_data(0, &data(0)).ack;
        assert!(r.on_data(0, &data(1)).ack.is_none());
        let _ = run_timer(&mut r, 100 * MS).unwrap(); // ato 20
        assert!(r.on_data(100 * MS, &data(2)).ack.is_none());
        // m = 25 jiffies, not < 20: ato stays 20; expiry jiffy 25 + 20 = 45, fired at 46.
        assert_eq!(r.timer_deadline(), Some(184 * MS));
        let _ = r.on_timer(184 * MS).unwrap(); // ato 40
        assert!(r.on_data(200 * MS, &data(3)).ack.is_none());
        // m = 25 < 40: ato = 20 + 25 = 45 -> delay min(45, srtt 25) = 25 jiffies: jiffy 75,
        // fired at 76.
        assert_eq!(r.timer_deadline(), Some(304 * MS));
    }

    #[test]
    fn armed_delack_timer_is_kept_or_acks_when_about_to_expire() {
        // Stretch ACKs (3 segments per ACK) reach tcp_send_delayed_ack with a timer armed.
        let mut c = cfg(1);
        c.segments_per_ack = 3;
        let mut r = Receiver::new(0, c.clone(), 1448, Some(65160), 100 * MS, 6 << 20);
        let _ = r.on_data(0, &data(0)).ack;
        assert!(r.on_data(0, &data(1)).ack.is_none());
        assert_eq!(r.timer_deadline(), Some(44 * MS));
        // At jiffy 2: ato = 10/2 + 5 = 10, new timeout jiffy 12; the earlier one (10) is kept.
        assert!(r.on_data(8 * MS, &data(2)).ack.is_none());
        assert_eq!(r.timer_deadline(), Some(44 * MS));
        let mut r = Receiver::new(0, c, 1448, Some(65160), 100 * MS, 6 << 20);
        let _ = r.on_data(0, &data(0)).ack;
        assert!(r.on_data(0, &data(1)).ack.is_none());
        // At jiffy 8: ato = 5 + 8 = 13; the armed timer (jiffy 10) is within ato/4 = 3 jiffies.
        let a = r.on_data(35 * MS, &data(2)).ack.expect("timer about to expire: ACK now");
        assert_eq!(a.ack, 3);
        assert_eq!(r.timer_deadline(), None);
    }

    #[test]
    fn disabled_acks_every_segment() {
        let mut c = cfg(0);
        c.enabled = false;
        let mut r = Receiver::new(0, c, 1448, Some(65160), 100 * MS, 6 << 20);
        for i in 0..5 {
            assert!(r.on_data(i as Nanos * MS, &data(i)).ack.is_some());
        }
    }
}
