//! The TCP sender: scoreboard, SACK and RACK loss detection, recovery, RTO, pacing and the
//! delivery-rate sampler, with congestion control delegated to a [`CongestionControl`].
//!
//! Sources, all Linux (net/ipv4/) unless stated:
//! - ACK processing order as `tcp_ack`: cumulative ACK and SACK tagging (`tcp_clean_rtx_queue`,
//!   `tcp_sacktag_write_queue`), RTT update (`tcp_ack_update_rtt`), rate sample
//!   (`tcp_rate_gen`), loss detection (`tcp_rack_mark_lost`), recovery state
//!   (`tcp_fastretrans_alert`), then `tcp_cong_control`.
//! - Loss detection is RACK (RFC 8985, `tcp_recovery.c`): a packet is lost once a packet sent
//!   after it was delivered and RACK.rtt + reo_wnd has passed since it was sent. With no
//!   reordering observed (our links never reorder) reo_wnd is 0 in recovery or once
//!   `sacked_out >= 3` (the DupThresh rule, `tcp_rack_reo_wnd`), else min_rtt/4 capped at SRTT.
//!   Packets wait in a list sorted by last transmit time (`tsorted_sent_queue`); delivered or
//!   lost packets leave it, retransmissions go to its tail, so detection costs O(newly lost).
//!   RACK advances on every packet newly (S)ACKed (`tcp_rack_advance`), except a
//!   retransmission acknowledged sooner than min_rtt after it left, and a retransmitted packet
//!   cumulatively ACKed by an ACK whose echo predates its last transmission
//!   (`tcp_clean_rtx_queue`'s `tcp_skb_spurious_retrans`): that ACK was for an earlier copy,
//!   so packets sent before the retransmission are not judged lost by it (a first flight held
//!   seconds in a deep queue, its head retransmitted by timeouts, is undone, not recovered).
//! - Recovery: Proportional Rate Reduction (RFC 6937, `tcp_cwnd_reduction`) for algorithms
//!   without `cong_control`; cwnd = ssthresh on exit (`tcp_end_cwnd_reduction`).
//! - RTO (`tcp_retransmit_timer`, `tcp_enter_loss`): the head and every un-SACKed packet
//!   sent at least RACK.rtt ago are marked lost, more recent ones are not yet
//!   (`tcp_timeout_mark_lost` of Linux 6.18); cwnd = in_flight + 1, state Loss, backoff
//!   doubles; ssthresh is saved for undo (`tcp_init_undo`, `prior_ssthresh`).
//! - Spurious timeouts and recoveries are undone (`tcp_process_loss`, `tcp_try_undo_loss`,
//!   `tcp_try_undo_recovery`, `tcp_undo_cwnd_reduction`, `tcp_may_undo`): by the timestamp
//!   test (`tcp_packet_delayed`: the ACK echoes a send time, in Linux's millisecond ticks,
//!   from before the episode's first retransmission), and by F-RTO (RFC 5682,
//!   `sysctl_tcp_frto` = 2: after a timeout, new data rather than retransmissions once
//!   snd_una advances; never-retransmitted data (S)ACKed means the timeout was spurious). An
//!   undo restores cwnd (the algorithm's `undo_cwnd`) and ssthresh, and after a timeout puts
//!   the packets marked lost back in flight.
//! - Delivery-rate sampling (`tcp_rate.c`), with google/bbr's per-packet `tx.in_flight` and
//!   `tx.lost` so BBRv3 can use the same sampler.
//! - TSO/GSO trains (`tcp_write_xmit`, `tcp_xmit_retransmit_queue`): Linux builds GSO skbs
//!   for TCP even when the device has every offload off, so data leaves in back-to-back
//!   trains of `tcp_tso_segs` segments (about 1 ms at the pacing rate, see [`super::tso`]);
//!   new data is also capped at half of cwnd per skb (`tcp_cwnd_test`) and may wait for a
//!   bigger train (`tcp_tso_should_defer`); a retransmitted skb is a run of consecutive lost
//!   segments.
//! - Pacing: EDT like `tcp_update_skb_after_send`, per train: the next release is the
//!   train's length at the pacing rate later, less up to half of it for a late send, and the
//!   first 10 segments are not paced. The rate is the algorithm's, or for algorithms that set
//!   none, `tcp_update_pacing_rate` (200 % of cwnd/srtt in slow start, 120 % after), which
//!   unpaced flows also keep for TSO autosizing.
//!
//! - Tail loss probe (RFC 8985, `sysctl_tcp_early_retrans` = 3): `tcp_schedule_loss_probe`
//!   after every send and ACK in Open (2 srtt + 2 ms, or + TCP_RTO_MIN with one packet out,
//!   never later than the RTO), `tcp_send_loss_probe` (one new segment past cwnd, else the
//!   last one again), `tcp_process_tlp_ack` (a retransmitted probe that repaired a loss costs
//!   one cwnd reduction).
//!
//! - The three-way handshake (`tcp_connect`, `tcp_rcv_synsent_state_process`,
//!   `tcp_init_transfer`): the flow starts by sending a SYN, which queues and may be dropped at
//!   the bottleneck like any packet; it is retransmitted after TCP_TIMEOUT_INIT (1 s), doubling.
//!   The SYN-ACK's RTT sample seeds srtt, the RTO and the windowed min RTT (`tcp_min_rtt`,
//!   which BBR's `bbr_init` reads) before the algorithm is initialised; the final ACK and then
//!   data leave at once, with cwnd 1 instead of the initial window after more than one SYN
//!   retransmission.
//!
//! Deviations (documented in the README): no D-SACK, so undo relies
//! on timestamps and F-RTO only (`undo_retrans` never reaches 0, no `tcp_try_undo_dsack`, no
//! `tcp_try_undo_partial`), and a retransmitted loss probe ends its episode only on a pure
//! duplicate ACK (`FLAG_DSACK_TLP` never arrives); the probe ignores pacing;
//! `icsk_retransmits` is cleared whenever snd_una advances; a
//! segment is the unit of the scoreboard, so skb boundaries (and `tcp_fragment`) are not
//! tracked; the receive window is fixed.

use super::rtt::{AckedSendTimes, RttEstimator, TCP_RTO_MAX, TCP_TIMEOUT_INIT};
use super::tso;
use crate::cc::{AckSample, CaEvent, CaState, CongestionControl, ConnInfo, LostPacket, RateSample, Window};
use crate::config::FlowConfig;
use crate::event::{Timer, TimerKind};
use crate::jiffies::{TickClock, CONFIG_HZ};
use crate::packet::{AckPacket, DataPacket, Ecn};
use crate::ranges::RangeSet;
use crate::time::Nanos;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::TCP_TS_TICK;

const NIL: u64 = u64::MAX;

/// TCP_TIMEOUT_MIN_US (include/net/tcp.h): the 2 ms a loss probe's timer adds to 2 srtt and
/// RACK's reordering timer to its wait.
const TCP_TIMEOUT_MIN_US: Nanos = 2_000_000;

// Per-segment flags (Linux TCPCB_* in `sacked`).
const SACKED: u8 = 1 << 0;
const LOST: u8 = 1 << 1;
/// A retransmission of this segment is in flight (TCPCB_SACKED_RETRANS).
const RETRANS_IN_FLIGHT: u8 = 1 << 2;
/// Ever retransmitted (TCPCB_EVER_RETRANS): no RTT sample from it (Karn).
const EVER_RETRANS: u8 = 1 << 3;
const APP_LIMITED: u8 = 1 << 4;
/// Already used by the rate sampler (Linux zeroes tx.delivered_mstamp).
const RATE_USED: u8 = 1 << 5;
const IN_TSORTED: u8 = 1 << 6;
/// Any of these makes a segment's delivery more than counting (see `clean_rtx_queue`).
const NOT_PLAIN: u8 = SACKED | LOST | RETRANS_IN_FLIGHT | EVER_RETRANS | RATE_USED;

/// A segment in the scoreboard: its place in the time-sorted list, its flags, and the
/// snapshot it was sent with ([`SendStamp`], by id). 16 bytes, so a window of segments
/// streams through the cache as few lines as it can.
#[derive(Debug, Clone, Copy)]
struct Seg {
    /// The list neighbours, as offsets from this segment's own sequence (0: none; a segment
    /// is never its own neighbour, and neighbours are within one window, below 2^31).
    prev: i32,
    next: i32,
    /// The id of its [`SendStamp`] (the low 32 bits; fewer than 2^32 are ever live).
    stamp: u32,
    flags: u8,
}

/// What `tcp_rate_skb_sent` records as a segment leaves (Linux keeps it per skb), shared by
/// every segment of a run sent with the same snapshot, each one more in flight than the one
/// before: the segments of one train, and back-to-back trains or retransmissions while nothing
/// changed. At 100 Gbit/s a train is 44 segments, so the scoreboard keeps under a quarter of
/// the bytes a copy per segment took.
#[derive(Debug, Clone, Copy)]
struct SendStamp {
    tx_time: Nanos,
    first_tx: Nanos,
    delivered_time: Nanos,
    delivered: u64,
    /// `tx.delivered_ce` (google/bbr): `delivered_ce` when sent.
    delivered_ce: u64,
    lost_at_send: u64,
    /// The run's first and last segments: segment `s` of it left with `first_in_flight +
    /// (s - first_seq)` packets in flight (itself included); once `snd_una` is past
    /// `last_seq` no segment refers to the stamp.
    first_seq: u64,
    last_seq: u64,
    first_in_flight: u32,
}

impl Seg {
    /// The list neighbour before this segment, `seq`, or NIL.
    #[inline]
    fn prev(&self, seq: u64) -> u64 {
        neighbour(seq, self.prev)
    }

    #[inline]
    fn next(&self, seq: u64) -> u64 {
        neighbour(seq, self.next)
    }

    fn set_prev(&mut self, seq: u64, to: u64) {
        self.prev = offset(seq, to);
    }

    fn set_next(&mut self, seq: u64, to: u64) {
        self.next = offset(seq, to);
    }
}

#[inline]
fn neighbour(seq: u64, offset: i32) -> u64 {
    if offset == 0 {
        NIL
    } else {
        seq.wrapping_add(offset as i64 as u64)
    }
}

#[inline]
fn offset(seq: u64, to: u64) -> i32 {
    if to == NIL {
        return 0;
    }
    let d = to.wrapping_sub(seq) as i64;
    debug_assert!(d != 0 && i32::try_from(d).is_ok());
    d as i32
}

impl SendStamp {
    fn in_flight_at(&self, seq: u64) -> u32 {
        self.first_in_flight.wrapping_add(seq.wrapping_sub(self.first_seq) as u32)
    }

    fn same_snapshot(&self, o: &SendStamp) -> bool {
        (self.tx_time, self.first_tx, self.delivered_time, self.delivered, self.delivered_ce, self.lost_at_send)
            == (o.tx_time, o.first_tx, o.delivered_time, o.delivered, o.delivered_ce, o.lost_at_send)
    }
}

/// Segments marked lost, to be retransmitted lowest first: a min-heap in effect. RACK marks
/// them mostly in ascending order, which a FIFO takes without a heap's sifting (at 100 Gbit/s
/// the heap held hundreds of thousands); a mark below the last goes to the heap. Stale entries
/// (delivered, or retransmitted since) are skipped by the reader.
#[derive(Debug, Default)]
struct LostQueue {
    ascending: VecDeque<u64>,
    rest: BinaryHeap<Reverse<u64>>,
}

impl LostQueue {
    fn push(&mut self, seq: u64) {
        if self.ascending.back().is_none_or(|&b| seq >= b) {
            self.ascending.push_back(seq);
        } else {
            self.rest.push(Reverse(seq));
        }
    }

    /// The lowest sequence queued.
    fn peek(&self) -> Option<u64> {
        match (self.ascending.front(), self.rest.peek()) {
            (Some(&a), Some(&Reverse(b))) => Some(a.min(b)),
            (a, b) => a.copied().or(b.map(|r| r.0)),
        }
    }

    /// Removes the lowest sequence queued.
    fn pop(&mut self) {
        if self.ascending.front().is_some_and(|&a| self.rest.peek().is_none_or(|&Reverse(b)| a <= b)) {
            self.ascending.pop_front();
        } else {
            self.rest.pop();
        }
    }

    fn shrink_to_fit(&mut self) {
        self.ascending.shrink_to_fit();
        self.rest.shrink_to_fit();
    }
}

/// RACK state (RFC 8985 section 6.1).
#[derive(Debug, Clone, Copy, Default)]
struct Rack {
    /// Transmit time and sequence of the most recently sent delivered packet.
    xmit_ts: Nanos,
    end_seq: u64,
    rtt: Nanos,
    valid: bool,
}

/// Cumulative counters for telemetry and conservation checks.
#[derive(Debug, Clone, Copy, Default)]
pub struct SenderStats {
    pub sent_pkts: u64,
    pub sent_bytes: u64,
    pub sent_payload_bytes: u64,
    pub retrans_segs: u64,
    pub lost_segs: u64,
    pub rto_count: u64,
    /// Tail loss probes sent (`tcp_send_loss_probe`).
    pub tlp_count: u64,
    /// Congestion-window reductions undone as spurious (`tcp_undo_cwnd_reduction`).
    pub undo_count: u64,
    /// Handshake packets sent: SYNs and the final ACK (not counted in `sent_pkts`, which counts
    /// data segments as `tcpi_data_segs_out` does).
    pub handshake_pkts: u64,
    pub rtt_sum: f64,
    pub rtt_n: u64,
}

/// Where the sender puts what it emits; reused vectors, no allocation per packet.
pub struct Io<'a> {
    pub out: &'a mut Vec<DataPacket>,
    pub timers: &'a mut Vec<(Nanos, TimerKind)>,
}

pub struct Sender {
    pub flow: u32,
    mss: u32,
    mtu: u32,
    pub cc: Box<dyn CongestionControl>,
    pub w: Window,
    initial_cwnd: u32,
    pacing: bool,
    /// The trial left pacing to the algorithm (`pacing` unset), which may ask for it in init.
    pacing_left_to_cc: bool,
    /// `sk_max_pacing_rate`, bytes/s: `SO_MAX_PACING_RATE`, `u64::MAX` when not set.
    max_pacing_rate: u64,
    /// The host kernel's tick clock, handed to the algorithm for its jiffies stamps.
    ticks: TickClock,
    /// Total segments for a fixed-size transfer, and the last one's payload.
    end: Option<(u64, u32)>,
    /// The same for [`Self::payload_of`]: the last segment's sequence (`u64::MAX` for a bulk
    /// flow, which never reaches it) and payload.
    last_seq: u64,
    last_payload: u32,
    /// The receiver's offered window (`snd_wnd`, bytes beyond `snd_una`), and what of it
    /// whole segments fill.
    snd_wnd: u64,
    rwnd_segs: u64,
    /// `ts_recent`: the latest ACK's timestamp, echoed on the data sent.
    ts_recent: Option<Nanos>,

    pub snd_una: u64,
    pub snd_nxt: u64,
    segs: VecDeque<Seg>,
    /// The send snapshots the segments in `segs` refer to, oldest first; `stamp_base` is the
    /// id of the front one.
    stamps: VecDeque<SendStamp>,
    stamp_base: u64,
    sacked: RangeSet,
    pub sacked_out: u32,
    pub lost_out: u32,
    pub retrans_out: u32,
    lost_queue: LostQueue,
    ts_head: u64,
    ts_tail: u64,
    rack: Rack,

    // Delivery-rate state (tcp_rate.c).
    pub delivered: u64,
    delivered_time: Nanos,
    first_tx_time: Nanos,
    pub lost: u64,
    pub app_limited: u64,

    pub ca_state: CaState,
    high_seq: u64,
    prior_cwnd: u32,
    prr_delivered: u32,
    prr_out: u32,

    // Undo of spurious reductions and F-RTO (tcp_input.c).
    /// `undo_marker`: snd_una when the reduction began; `None` once undone or impossible.
    undo_marker: Option<u64>,
    /// `prior_ssthresh`: ssthresh before the reduction, 0 if none to restore.
    prior_ssthresh: u32,
    /// `retrans_stamp`: time of the first retransmission of the episode.
    retrans_stamp: Option<Nanos>,
    /// `tp->frto`: F-RTO (RFC 5682, `sysctl_tcp_frto` = 2) is judging the last timeout.
    frto: bool,
    /// F-RTO step 2.b (`REXMIT_NEW`): send new data rather than retransmissions.
    frto_rexmit_new: bool,
    /// `icsk_retransmits`: timeouts since the last forward progress.
    icsk_retransmits: u32,
    /// The retransmission timer slot holds the loss probe (`ICSK_TIME_LOSS_PROBE`), not the RTO.
    xmit_probe: bool,
    /// `tlp_high_seq`: snd_nxt when the outstanding probe went out.
    tlp_high_seq: Option<u64>,
    /// `tlp_retrans`: the outstanding probe was a retransmission.
    tlp_retrans: bool,

    // tcp_cwnd_validate state.
    max_packets_out: u32,
    max_packets_seq: u64,
    cwnd_limited: bool,

    pub rtt: RttEstimator,
    next_send_time: Nanos,
    last_send_time: Nanos,
    pub timers: [Timer; 3],
    started: bool,
    /// The algorithm's `release` has run (the connection is torn down).
    released: bool,
    /// SYN_SENT: when the latest SYN went out, until the SYN-ACK arrives.
    syn_sent_at: Option<Nanos>,
    /// SYNs sent (`icsk_retransmits` + 1 while in SYN_SENT).
    syns_sent: u32,
    pub stats: SenderStats,
    /// Reused buffer for newly SACKed sequence numbers.
    scratch: Vec<u64>,

    // ECN (RFC 3168; Linux tcp_input.c / tcp_output.c).
    /// The flow negotiated ECN: new data leaves ECT(0) and ECE on ACKs is acted on.
    ecn: bool,
    /// TCP_ECN_QUEUE_CWR: the next new data segment carries CWR.
    cwr_pending: bool,
    /// The ECN codepoint new data carries: ECT(0), or ECT(1) for an L4S sender.
    ect: Ecn,
    /// `tp->delivered_ce`: packets delivered by ACKs that carried ECE.
    pub delivered_ce: u64,
}

impl Sender {
    pub fn new(flow: u32, cfg: &FlowConfig, mss: u32, mtu: u32, cc: Box<dyn CongestionControl>) -> Self {
        let end = cfg.size_bytes.map(|b| {
            let n = b.div_ceil(mss as u64);
            let last = (b - (n - 1) * mss as u64) as u32;
            (n, last)
        });
        // SO_MAX_PACING_RATE moves sk_pacing_status from SK_PACING_NONE to SK_PACING_NEEDED
        // (sk_setsockopt), so tcp_needs_internal_pacing paces an algorithm that does not.
        let pacing = cfg.pacing.unwrap_or_else(|| cc.wants_pacing()) || cfg.max_pacing_rate_bps.is_some();
        let max_pacing_rate = cfg.max_pacing_rate_bps.map_or(u64::MAX, |bps| bps / 8);
        Sender {
            flow,
            mss,
            mtu,
            cc,
            w: Window { cwnd: cfg.initial_cwnd, ssthresh: u32::MAX, pacing_rate: None, cwnd_cnt: 0, set_app_limited: false },
            initial_cwnd: cfg.initial_cwnd,
            pacing,
            pacing_left_to_cc: cfg.pacing.is_none(),
            max_pacing_rate,
            ticks: TickClock::default(),
            end,
            last_seq: end.map_or(u64::MAX, |(n, _)| n - 1),
            last_payload: end.map_or(mss, |(_, last)| last),
            snd_wnd: u64::MAX,
            rwnd_segs: u64::MAX,
            ts_recent: None,
            snd_una: 0,
            snd_nxt: 0,
            segs: VecDeque::new(),
            stamps: VecDeque::new(),
            stamp_base: 0,
            sacked: RangeSet::default(),
            sacked_out: 0,
            lost_out: 0,
            retrans_out: 0,
            lost_queue: LostQueue::default(),
            ts_head: NIL,
            ts_tail: NIL,
            rack: Rack::default(),
            delivered: 0,
            delivered_time: 0,
            first_tx_time: 0,
            lost: 0,
            app_limited: 0,
            ca_state: CaState::Open,
            high_seq: 0,
            prior_cwnd: 0,
            prr_delivered: 0,
            prr_out: 0,
            undo_marker: None,
            prior_ssthresh: 0,
            retrans_stamp: None,
            frto: false,
            frto_rexmit_new: false,
            icsk_retransmits: 0,
            xmit_probe: false,
            tlp_high_seq: None,
            tlp_retrans: false,
            max_packets_out: 0,
            max_packets_seq: 0,
            cwnd_limited: false,
            rtt: RttEstimator::default(),
            next_send_time: 0,
            last_send_time: 0,
            timers: [Timer::default(); 3],
            started: false,
            released: false,
            syn_sent_at: None,
            syns_sent: 0,
            stats: SenderStats::default(),
            scratch: Vec::new(),
            ecn: cfg.ecn,
            cwr_pending: false,
            ect: if cfg.ect1 { Ecn::Ect1 } else { Ecn::Ect0 },
            delivered_ce: 0,
        }
    }

    pub fn is_paced(&self) -> bool {
        self.pacing
    }

    pub fn mss(&self) -> u32 {
        self.mss
    }

    /// Packets in flight (`tcp_packets_in_flight`).
    pub fn packets_in_flight(&self) -> u32 {
        let out = (self.snd_nxt - self.snd_una) as u32;
        out - self.sacked_out - self.lost_out + self.retrans_out
    }

    pub fn packets_out(&self) -> u32 {
        (self.snd_nxt - self.snd_una) as u32
    }

    pub fn is_done(&self) -> bool {
        self.end.is_some_and(|(n, _)| self.snd_una >= n)
    }

    /// Gives back the memory of a finished flow's buffers (its scoreboard grew with its
    /// window): a workload leaves thousands of finished flows behind. Changes nothing else.
    pub fn release_buffers(&mut self) {
        self.segs.shrink_to_fit();
        self.stamps.shrink_to_fit();
        self.sacked.shrink_to_fit();
        self.lost_queue.shrink_to_fit();
        self.scratch.shrink_to_fit();
    }

    fn in_slow_start(&self) -> bool {
        self.w.cwnd < self.w.ssthresh
    }

    /// `tcp_is_cwnd_limited`.
    fn is_cwnd_limited(&self) -> bool {
        if self.in_slow_start() {
            self.w.cwnd < 2 * self.max_packets_out
        } else {
            self.cwnd_limited
        }
    }

    /// Sets the host kernel's tick clock (the trial's tick phase).
    pub fn with_ticks(mut self, ticks: TickClock) -> Self {
        self.ticks = ticks;
        self
    }

    pub fn info(&self, now: Nanos) -> ConnInfo {
        ConnInfo {
            now,
            mss: self.mss,
            srtt_ns: self.rtt.srtt,
            min_rtt_ns: self.rtt.min_rtt,
            packets_in_flight: self.packets_in_flight(),
            delivered: self.delivered,
            delivered_ce: self.delivered_ce,
            ecn: self.ecn,
            lost: self.lost,
            sacked_out: self.sacked_out,
            lost_out: self.lost_out,
            retrans_out: self.retrans_out,
            is_cwnd_limited: self.is_cwnd_limited(),
            app_limited: self.app_limited,
            ca_state: self.ca_state,
            cwnd: self.w.cwnd,
            ssthresh: self.w.ssthresh,
            initial_cwnd: self.initial_cwnd,
            packets_out: self.packets_out(),
            snd_nxt: self.snd_nxt,
            snd_una: self.snd_una,
            last_send_ns: self.last_send_time,
            paced: self.pacing,
            delivered_mstamp_ns: self.delivered_time,
            wstamp_ns: self.next_send_time.max(now),
            sk_pacing_rate: self.sk_pacing_rate(),
            max_pacing_rate: self.max_pacing_rate,
            ticks: self.ticks,
        }
    }

    /// Pacing rate in bytes/s currently in force, if pacing.
    pub fn pacing_rate(&self) -> Option<f64> {
        if !self.pacing {
            return None;
        }
        let r = match self.w.pacing_rate {
            Some(r) => r,
            None => self.default_pacing_rate(),
        };
        Some(if self.max_pacing_rate == u64::MAX { r } else { r.min(self.max_pacing_rate as f64) })
    }

    /// `sk_pacing_rate` in bytes/s, paced or not: Linux keeps it up to date for every flow
    /// (`tcp_update_pacing_rate` when the algorithm sets none), and TSO autosizing reads it.
    fn sk_pacing_rate(&self) -> u64 {
        let r = match self.w.pacing_rate {
            Some(r) => r,
            None => self.default_pacing_rate(),
        };
        let r = if r.is_finite() { r.max(0.0) as u64 } else { u64::MAX };
        r.min(self.max_pacing_rate)
    }

    /// `tcp_tso_segs`: segments per TSO/GSO skb (see [`super::tso`]), or the algorithm's own
    /// count (google/bbr's `tso_segs` hook).
    pub fn tso_segs(&self) -> u32 {
        if let Some(n) = self.cc.tso_segs(self.mss) {
            return n.clamp(1, tso::GSO_MAX_SEGS);
        }
        let min_tso = self.cc.min_tso_segs().unwrap_or(tso::TCP_MIN_TSO_SEGS);
        // tcp_min_rtt is ~0U before any sample: no short-path allowance.
        let min_rtt_us = if self.rtt.min_rtt > 0 { (self.rtt.min_rtt / 1000) as u64 } else { u32::MAX as u64 };
        tso::tcp_tso_segs(self.sk_pacing_rate(), self.mss, min_rtt_us, min_tso)
    }

    /// `tcp_update_pacing_rate`: cwnd/srtt scaled by 200 % in slow start, 120 % otherwise
    /// (the cap, `sk_max_pacing_rate`, applies where the rate is read).
    fn default_pacing_rate(&self) -> f64 {
        if self.rtt.srtt == 0 {
            return f64::INFINITY;
        }
        let ratio = if self.w.cwnd < self.w.ssthresh / 2 { 2.0 } else { 1.2 };
        let pkts = self.w.cwnd.max(self.packets_out()) as f64;
        ratio * pkts * self.mss as f64 * 1e9 / self.rtt.srtt as f64
    }

    fn seg(&self, seq: u64) -> &Seg {
        &self.segs[(seq - self.snd_una) as usize]
    }

    fn seg_mut(&mut self, seq: u64) -> &mut Seg {
        &mut self.segs[(seq - self.snd_una) as usize]
    }

    /// The snapshot `s` was sent with.
    #[inline]
    fn stamp(&self, s: &Seg) -> &SendStamp {
        &self.stamps[s.stamp.wrapping_sub(self.stamp_base as u32) as usize]
    }

    /// The snapshot segment `seq` was sent with.
    fn stamp_of(&self, seq: u64) -> &SendStamp {
        self.stamp(self.seg(seq))
    }

    /// The id of the snapshot for segment `seq` leaving at `now` (`tcp_rate_skb_sent`): the
    /// newest one when nothing changed since it was taken, else a new one.
    fn stamp_send(&mut self, now: Nanos, seq: u64, in_flight: u32) -> u32 {
        let st = self.snapshot(now, seq, in_flight);
        match self.stamps.back_mut() {
            Some(b) if b.same_snapshot(&st) && seq == b.last_seq + 1 && b.in_flight_at(seq) == in_flight => b.last_seq = seq,
            _ => self.stamps.push_back(st),
        }
        (self.stamp_base + self.stamps.len() as u64 - 1) as u32
    }

    /// The record of segment `seq` leaving at `now` with `in_flight` packets in flight, as a
    /// run of its own.
    fn snapshot(&self, now: Nanos, seq: u64, in_flight: u32) -> SendStamp {
        SendStamp {
            tx_time: now,
            first_tx: self.first_tx_time,
            delivered_time: self.delivered_time,
            delivered: self.delivered,
            delivered_ce: self.delivered_ce,
            lost_at_send: self.lost,
            first_seq: seq,
            last_seq: seq,
            first_in_flight: in_flight,
        }
    }

    /// Packets in flight when segment `seq` (`s`) left, itself included (`tx.in_flight`).
    fn in_flight_at_send(&self, seq: u64, s: &Seg) -> u32 {
        self.stamp(s).in_flight_at(seq)
    }

    fn payload_of(&self, seq: u64) -> u32 {
        if seq == self.last_seq {
            self.last_payload
        } else {
            self.mss
        }
    }

    // ---- the time-sorted list of packets in flight (RACK) -------------------------------

    fn ts_unlink(&mut self, seq: u64) {
        let s = *self.seg(seq);
        if s.flags & IN_TSORTED == 0 {
            return;
        }
        let (prev, next) = (s.prev(seq), s.next(seq));
        self.ts_splice_out(prev, next);
        let m = self.seg_mut(seq);
        m.flags &= !IN_TSORTED;
        m.prev = 0;
        m.next = 0;
    }

    /// Unlinks segments `a..b`, which are about to leave the scoreboard, from the time-sorted
    /// list: the list `ts_unlink` of each in turn leaves, each stretch of consecutive
    /// segments that are also neighbours in the list spliced out at once. Their own links
    /// and flags are left as they are.
    fn ts_unlink_run(&mut self, a: u64, b: u64) {
        let mut k = a;
        while k < b {
            if self.seg(k).flags & IN_TSORTED == 0 {
                k += 1;
                continue;
            }
            let start = k;
            while k + 1 < b && self.seg(k).next == 1 {
                k += 1;
            }
            self.ts_splice_out(self.seg(start).prev(start), self.seg(k).next(k));
            k += 1;
        }
    }

    /// Joins `prev` and `next` in the time-sorted list, cutting out what lay between them.
    fn ts_splice_out(&mut self, prev: u64, next: u64) {
        if prev == NIL {
            self.ts_head = next;
        } else {
            self.seg_mut(prev).set_next(prev, next);
        }
        if next == NIL {
            self.ts_tail = prev;
        } else {
            self.seg_mut(next).set_prev(next, prev);
        }
    }

    fn ts_push_front(&mut self, seq: u64) {
        self.ts_unlink(seq);
        let head = self.ts_head;
        {
            let m = self.seg_mut(seq);
            m.prev = 0;
            m.set_next(seq, head);
            m.flags |= IN_TSORTED;
        }
        if head == NIL {
            self.ts_tail = seq;
        } else {
            self.seg_mut(head).set_prev(head, seq);
        }
        self.ts_head = seq;
    }

    fn ts_push_back(&mut self, seq: u64) {
        self.ts_unlink(seq);
        let tail = self.ts_tail;
        {
            let m = self.seg_mut(seq);
            m.set_prev(seq, tail);
            m.next = 0;
            m.flags |= IN_TSORTED;
        }
        if tail == NIL {
            self.ts_head = seq;
        } else {
            self.seg_mut(tail).set_next(tail, seq);
        }
        self.ts_tail = seq;
    }

    // ---- sending ---------------------------------------------------------------------

    /// Starts the connection at `now`.
    /// `tcp_connect`: send the SYN and arm its retransmission timer.
    pub fn connect(&mut self, now: Nanos, io: &mut Io) {
        self.syn_sent_at = Some(now);
        io.out.push(DataPacket::syn(self.flow, now));
        let backoff = self.syns_sent.min(20);
        self.syns_sent += 1;
        self.stats.handshake_pkts += 1;
        self.arm_rto(now, TCP_TIMEOUT_INIT.saturating_mul(1 << backoff).min(TCP_RTO_MAX), io);
    }

    /// The ACK's timestamp (`tcp_replace_ts_recent`: a pure ACK always sits at `rcv_wup`; PAWS
    /// keeps it from going back) and its window (`tcp_ack_update_window`: taken when the ACK
    /// advances `snd_una`, offers more, or offers none, as `tcp_may_update_window` allows).
    /// A window below one MSS still lets one segment out (Linux would probe it).
    fn take_window(&mut self, ack: &AckPacket, advances: bool) {
        if self.ts_recent.is_none_or(|t| ack.ts_val >= t) {
            self.ts_recent = Some(ack.ts_val);
        }
        if advances || ack.wnd > self.snd_wnd || ack.wnd == 0 || self.snd_wnd == u64::MAX {
            self.snd_wnd = ack.wnd;
            self.rwnd_segs = (ack.wnd / self.mss as u64).max(1);
        }
    }

    /// The SYN-ACK arrived (`tcp_rcv_synsent_state_process`): its RTT sample, from the echoed
    /// timestamp of the SYN it answers, seeds the RTT estimator (`tcp_ack_update_rtt`), then
    /// `tcp_init_transfer` sets the initial window and initialises the algorithm, and data
    /// starts. A SYN-ACK for an established connection is ignored.
    pub fn on_syn_ack(&mut self, now: Nanos, ack: &AckPacket, io: &mut Io) {
        if self.syn_sent_at.take().is_none() {
            return;
        }
        self.timers[TimerKind::Rto as usize].cancel();
        // The SYN-ACK acknowledges the SYN, one packet of the retransmission queue, which
        // tcp_clean_rtx_queue counts as delivered (tcp_count_delivered): Linux's tp->delivered
        // is 1 when data starts. Only absolute uses see it, BBR's `tp->delivered <
        // TCP_INIT_CWND` growth rule among them.
        self.delivered += 1;
        if let Some(ts) = ack.tsecr {
            self.rtt.on_sample(now - ts, self.snd_una, self.snd_nxt);
        }
        self.take_window(ack, true);
        if self.syns_sent > 2 {
            // "Cut cwnd down to 1 per RFC5681 if SYN ... has been retransmitted" more than once.
            self.w.cwnd = 1;
        }
        io.out.push(DataPacket::handshake_ack(self.flow, now));
        self.stats.handshake_pkts += 1;
        self.start(now, io);
    }

    /// ESTABLISHED: initialise the algorithm (`tcp_init_transfer`), size the send buffer
    /// (`tcp_init_buffer_space`, which asks the algorithm's `sndbuf_expand`), and send.
    fn start(&mut self, now: Nanos, io: &mut Io) {
        self.started = true;
        let info = self.info(now);
        self.cc.init(&info, &mut self.w);
        let info = self.info(now);
        self.cc.sndbuf_expand(&info, &mut self.w);
        // An algorithm may ask for pacing in init (sk_pacing_status = SK_PACING_NEEDED, as
        // tcp_bbr.c does); the trial's own choice, when it made one, stands.
        if !self.pacing && self.pacing_left_to_cc && self.cc.wants_pacing() {
            self.pacing = true;
        }
        self.apply_cc_requests();
        self.try_send(now, io);
    }

    fn arm(&mut self, kind: TimerKind, at: Nanos, io: &mut Io) {
        if let Some(t) = self.timers[kind as usize].arm(at) {
            io.timers.push((t, kind));
        }
    }

    /// A kernel `timer_list` (the retransmission-family timers): `timeout` from `now`, fired on
    /// the kernel's timer wheel.
    fn arm_on_wheel(&mut self, kind: TimerKind, now: Nanos, timeout: Nanos, io: &mut Io) {
        let at = self.ticks.wheel_fire_time(now, timeout, CONFIG_HZ);
        self.arm(kind, at, io);
    }

    fn rearm_rto(&mut self, now: Nanos, io: &mut Io) {
        if self.packets_out() == 0 {
            self.timers[TimerKind::Rto as usize].cancel();
            self.xmit_probe = false;
        } else {
            self.arm_rto(now, self.rtt.rto(), io);
        }
    }

    /// The retransmission timer, `timeout` from `now` on the kernel's timer wheel.
    fn arm_rto(&mut self, now: Nanos, timeout: Nanos, io: &mut Io) {
        self.xmit_probe = false;
        self.arm_on_wheel(TimerKind::Rto, now, timeout, io);
    }

    /// `tcp_schedule_loss_probe` (RFC 8985 TLP, `sysctl_tcp_early_retrans` = 3): in Open
    /// with data outstanding, the retransmission timer becomes a probe timer of 2 srtt plus
    /// 2 ms (TCP_TIMEOUT_MIN_US), or plus TCP_RTO_MIN when a single packet is out (a delayed
    /// ACK may hold it), or 1 s before any RTT sample; never later than the RTO would fire.
    fn schedule_loss_probe(&mut self, now: Nanos, advancing_rto: bool, io: &mut Io) -> bool {
        if self.packets_out() == 0 || !matches!(self.ca_state, CaState::Open | CaState::Cwr) {
            return false;
        }
        let mut timeout = if self.rtt.srtt > 0 {
            2 * self.rtt.srtt + if self.packets_out() == 1 { super::rtt::TCP_RTO_MIN } else { TCP_TIMEOUT_MIN_US }
        } else {
            TCP_TIMEOUT_INIT
        };
        // tcp_rto_delta_us: how far in the future the RTO of the oldest packet is.
        let rto_delta = if advancing_rto { self.rtt.rto() } else { self.stamp_of(self.snd_una).tx_time + self.rtt.rto() - now };
        if rto_delta > 0 {
            timeout = timeout.min(rto_delta);
        }
        self.arm_on_wheel(TimerKind::Rto, now, timeout, io);
        self.xmit_probe = true;
        true
    }

    /// `tcp_send_loss_probe`: one new segment if the window allows (even past cwnd), else a
    /// retransmission of the last one; at most one probe outstanding; then the RTO.
    fn send_loss_probe(&mut self, now: Nanos, io: &mut Io) {
        self.xmit_probe = false;
        if self.tlp_high_seq.is_none() && self.packets_out() > 0 {
            let rwnd_ok = self.snd_nxt < self.snd_una.saturating_add(self.rwnd_segs);
            let mut sent = false;
            if self.has_new_data() && rwnd_ok {
                self.tlp_retrans = false;
                let seq = self.snd_nxt;
                self.transmit(now, seq, io);
                sent = true;
            } else {
                let last = self.snd_nxt - 1;
                if self.seg(last).flags & (SACKED | RETRANS_IN_FLIGHT) == 0 {
                    self.tlp_retrans = true;
                    self.transmit(now, last, io);
                    sent = true;
                }
            }
            if sent {
                self.stats.tlp_count += 1;
                self.tlp_high_seq = Some(self.snd_nxt);
            }
        }
        self.rearm_rto(now, io);
    }

    /// `tcp_process_tlp_ack`: the probe episode ends when its data is ACKed (new data), or a
    /// pure duplicate ACK shows the original and the probe both arrived; an ACK beyond it
    /// after a retransmitted probe means the probe repaired a loss: one cwnd reduction (CWR:
    /// `tcp_init_cwnd_reduction` + `tcp_end_cwnd_reduction`).
    fn process_tlp_ack(&mut self, now: Nanos, ack: u64, una_advanced: bool, data_sacked: bool) {
        let Some(h) = self.tlp_high_seq else { return };
        if ack < h {
            return;
        }
        if !self.tlp_retrans {
            self.tlp_high_seq = None;
        } else if ack > h {
            self.tlp_high_seq = None;
            self.high_seq = self.snd_nxt;
            self.prior_cwnd = self.w.cwnd;
            self.w.cwnd_cnt = 0;
            let info = self.info(now);
            self.w.ssthresh = self.cc.ssthresh(&info, &self.w);
            if !self.cc.controls_cwnd() && self.w.ssthresh != u32::MAX {
                self.w.cwnd = self.w.ssthresh.max(1);
            }
        } else if !una_advanced && !data_sacked {
            self.tlp_high_seq = None;
        }
    }

    fn has_new_data(&self) -> bool {
        let limit = self.end.map_or(u64::MAX, |(n, _)| n);
        self.snd_nxt < limit
    }

    /// Next lost segment awaiting retransmission, lowest sequence first.
    fn next_lost(&mut self) -> Option<u64> {
        while let Some(seq) = self.lost_queue.peek() {
            if seq >= self.snd_una {
                let f = self.seg(seq).flags;
                if f & LOST != 0 && f & (SACKED | RETRANS_IN_FLIGHT) == 0 {
                    return Some(seq);
                }
            }
            self.lost_queue.pop();
        }
        None
    }

    /// Sends whatever cwnd, the receive window and pacing allow, in TSO/GSO trains
    /// (`tcp_xmit_retransmit_queue` for retransmissions first, then `tcp_write_xmit`):
    /// - each train is one skb of up to `tcp_tso_segs` segments leaving back to back: a run
    ///   of consecutive lost segments, or new data limited by `tcp_cwnd_test` (at most half
    ///   of cwnd for new data), the receive window and the end of the transfer;
    /// - a paced flow sends one train per pacing release (`tcp_pacing_check`), and the next
    ///   release is the train's length at the pacing rate later (`tcp_update_skb_after_send`);
    /// - new data may wait for more cwnd room when a train would be small
    ///   (`tcp_tso_should_defer`).
    pub fn try_send(&mut self, now: Nanos, io: &mut Io) {
        if !self.started {
            return;
        }
        let mut cwnd_limited = false;
        // tcp_tso_segs once per call, as at its start: computed when the first train is
        // about to be built (nothing it reads changes before then), so that the many calls
        // that send nothing (cwnd full, pacing) skip it.
        let mut tso_segs = None;
        // tcp_xmit_recovery with REXMIT_NEW: new data only; if none could go, F-RTO ends and
        // the lost segments are retransmitted as usual.
        let new_only = std::mem::take(&mut self.frto_rexmit_new);
        let sent_before = self.stats.sent_pkts;
        loop {
            let in_flight = self.packets_in_flight();
            if in_flight >= self.w.cwnd {
                cwnd_limited = true;
                break;
            }
            let lost = if new_only { None } else { self.next_lost() };
            let rwnd_room = self.snd_una.saturating_add(self.rwnd_segs).saturating_sub(self.snd_nxt);
            let new_ok = self.has_new_data() && rwnd_room > 0;
            if lost.is_none() && !new_ok {
                if new_only {
                    break;
                }
                // Nothing to send although cwnd allows it: application-limited
                // (`tcp_rate_check_app_limited`).
                if !self.has_new_data() && self.lost_out <= self.retrans_out {
                    self.app_limited = (self.delivered + self.packets_in_flight() as u64).max(1);
                }
                break;
            }
            if self.pacing && now < self.next_send_time {
                let t = self.next_send_time;
                self.arm(TimerKind::Pace, t, io);
                break;
            }
            let max_segs = *tso_segs.get_or_insert_with(|| self.tso_segs());
            let room = self.w.cwnd - in_flight;
            let prior_wstamp = self.next_send_time;
            let mut bytes = 0u64;
            if let Some(first) = lost {
                // One retransmitted skb: consecutive lost segments, min(cwnd room, max_segs).
                let quota = room.min(max_segs);
                let mut seq = first;
                let mut n = 0;
                loop {
                    self.lost_queue.pop();
                    bytes += self.payload_of(seq) as u64;
                    self.transmit(now, seq, io);
                    n += 1;
                    if n >= quota {
                        break;
                    }
                    match self.next_lost() {
                        Some(next) if next == seq + 1 => seq = next,
                        _ => break,
                    }
                }
            } else {
                // tcp_cwnd_test: at most half of cwnd per skb, "for better scheduling".
                let quota = room.min((self.w.cwnd >> 1).max(1)).min(max_segs);
                if quota < max_segs && self.tso_should_defer(now, room, rwnd_room, max_segs) {
                    cwnd_limited = true;
                    break;
                }
                let left = self.end.map_or(u64::MAX, |(n, _)| n - self.snd_nxt);
                let n = (quota as u64).min(rwnd_room).min(left);
                bytes = self.transmit_new(now, n, io);
            }
            if self.pacing {
                self.update_wstamp_after_send(now, prior_wstamp, bytes);
            }
        }
        self.cwnd_validate(cwnd_limited);
        // tcp_write_xmit: one loss probe per tail loss episode, rescheduled after each send.
        if self.stats.sent_pkts > sent_before {
            self.schedule_loss_probe(now, false, io);
        }
        if new_only && self.snd_nxt <= self.high_seq {
            self.frto = false;
            self.try_send(now, io);
        }
    }

    /// `tcp_update_skb_after_send`: the next pacing release is `bytes` at the pacing rate
    /// after this one, less up to half of that for the time the send came late (OS jitter
    /// credit); the first 10 segments of a connection are not paced (as sch_fq).
    fn update_wstamp_after_send(&mut self, now: Nanos, prior_wstamp: Nanos, bytes: u64) {
        let wstamp = prior_wstamp.max(now);
        self.next_send_time = wstamp;
        let rate = self.sk_pacing_rate();
        if rate == 0 || rate == u64::MAX || self.stats.sent_pkts < 10 {
            return;
        }
        // In 64 bits when the product fits (any train): the same quotient, no 128-bit division.
        let len_ns = match bytes.checked_mul(1_000_000_000) {
            Some(b) => (b / rate) as Nanos,
            None => (bytes as u128 * 1_000_000_000 / rate as u128) as Nanos,
        };
        let credit = wstamp - prior_wstamp;
        self.next_send_time = wstamp + len_ns - (len_ns / 2).min(credit);
    }

    /// `tcp_tso_should_defer`: hold new data back for a bigger train when cwnd (or the
    /// receive window) has room for less than `max_segs` and for less than a third of cwnd,
    /// the last send was within 1 ms, and the ACK of the oldest packet is due within
    /// min(srtt/2, 1 ms) (the `tcp_tso_should_defer` of Linux 6.18, stable fix "tcp: fix
    /// tcp_tso_should_defer() vs large RTT"). Never in Recovery or Loss. The next ACK sends.
    fn tso_should_defer(&self, now: Nanos, cong_room: u32, rwnd_room: u64, max_segs: u32) -> bool {
        const NSEC_PER_MSEC: Nanos = 1_000_000;
        if matches!(self.ca_state, CaState::Recovery | CaState::Loss) {
            return false;
        }
        // The last write (tp->tcp_wstamp_ns) was more than 1 ms ago: send now.
        if now - self.next_send_time.max(self.last_send_time) > NSEC_PER_MSEC {
            return false;
        }
        let limit = (cong_room as u64).min(rwnd_room);
        if limit >= max_segs as u64 {
            return false;
        }
        let chunk = self.rwnd_segs.min(self.w.cwnd as u64) * self.mss as u64 / tso::TCP_TSO_WIN_DIVISOR as u64;
        if limit * self.mss as u64 >= chunk {
            return false;
        }
        if self.packets_out() == 0 {
            return false;
        }
        let srtt = self.rtt.srtt;
        let expected_ack = self.stamp_of(self.snd_una).tx_time + srtt;
        let threshold = (srtt / 2).min(NSEC_PER_MSEC);
        if expected_ack - now > threshold {
            return false;
        }
        // The rest of a sized transfer fits: it ends with FIN, which is never held back.
        let left = self.end.map_or(u64::MAX, |(n, _)| n - self.snd_nxt);
        left > limit
    }

    /// `tcp_cwnd_validate`: latch whether cwnd limited us during this window of data.
    fn cwnd_validate(&mut self, is_cwnd_limited: bool) {
        let out = self.packets_out();
        if self.snd_una >= self.max_packets_seq || out > self.max_packets_out || is_cwnd_limited {
            self.max_packets_out = out;
            self.max_packets_seq = self.snd_nxt;
            self.cwnd_limited = is_cwnd_limited;
        }
    }

    /// Sends `n` (at least one) new segments back to back at `now`, as `transmit` of each in
    /// turn would; returns their payload bytes. The first goes through `transmit` (a new
    /// flight's clocks, the queued CWR, the RTO's arming); after it nothing that sets the
    /// others' records changes but the count in flight, so they are written directly, each
    /// linked behind the one before at the tail of the time-sorted list.
    fn transmit_new(&mut self, now: Nanos, n: u64, io: &mut Io) -> u64 {
        let first = self.snd_nxt;
        self.transmit(now, first, io);
        let mut bytes = self.payload_of(first) as u64;
        if n == 1 {
            return bytes;
        }
        debug_assert!(self.timers[TimerKind::Rto as usize].deadline().is_some());
        // the first segment's snapshot, which nothing since has changed
        let seg = Seg { flags: self.send_flags() | IN_TSORTED, ..*self.seg(first) };
        debug_assert!(self.stamp(&seg).same_snapshot(&self.snapshot(now, first, 0)));
        debug_assert_eq!(self.stamp(&seg).last_seq, first);
        debug_assert_eq!(self.in_flight_at_send(first, &seg), self.packets_in_flight());
        let ecn = if self.ecn { self.ect } else { Ecn::NotEct };
        let hdr = self.mtu - self.mss;
        let pkt = DataPacket { flow: self.flow, seq: first, size: self.mss + hdr, payload: self.mss, sent_at: now, ecn, cwr: false, ts_echo: self.ts_recent };
        let last = first + n - 1;
        self.segs.reserve(n as usize - 1);
        io.out.reserve(n as usize - 1);
        // The tail (the first segment) now points on to the rest.
        self.seg_mut(first).next = 1;
        let mut payload_bytes = 0u64;
        for seq in first + 1..=last {
            self.segs.push_back(Seg { prev: -1, next: if seq == last { 0 } else { 1 }, ..seg });
            let payload = self.payload_of(seq);
            payload_bytes += payload as u64;
            io.out.push(DataPacket { seq, size: payload + hdr, payload, ..pkt });
        }
        self.stamps.back_mut().expect("the first segment's").last_seq = last;
        let k = n - 1;
        self.snd_nxt = last + 1;
        self.ts_tail = last;
        if self.in_cwnd_reduction() {
            self.prr_out += k as u32;
        }
        self.stats.sent_pkts += k;
        self.stats.sent_bytes += payload_bytes + k * hdr as u64;
        self.stats.sent_payload_bytes += payload_bytes;
        bytes += payload_bytes;
        bytes
    }

    /// The flags a segment leaves with.
    fn send_flags(&self) -> u8 {
        if self.app_limited != 0 {
            APP_LIMITED
        } else {
            0
        }
    }

    fn transmit(&mut self, now: Nanos, seq: u64, io: &mut Io) {
        if self.packets_out() == 0 {
            // tcp_rate.c: a new flight starts its send and delivery clocks now.
            self.first_tx_time = now;
            self.delivered_time = now;
            let info = self.info(now);
            self.cc.cwnd_event(&info, &mut self.w, CaEvent::TxStart);
        }
        let retrans = seq < self.snd_nxt;
        self.last_send_time = now;
        let in_flight = self.packets_in_flight() + 1;
        let seg = Seg { prev: 0, next: 0, stamp: self.stamp_send(now, seq, in_flight), flags: self.send_flags() };
        if retrans {
            let s = self.seg_mut(seq);
            let keep = s.flags & (LOST | EVER_RETRANS | IN_TSORTED);
            let (prev, next) = (s.prev, s.next);
            *s = Seg { flags: seg.flags | keep | RETRANS_IN_FLIGHT | EVER_RETRANS, prev, next, ..seg };
            self.retrans_out += 1;
            self.retrans_stamp.get_or_insert(now);
            self.stats.retrans_segs += 1;
        } else {
            self.segs.push_back(seg);
            self.snd_nxt += 1;
        }
        self.ts_push_back(seq);
        if self.in_cwnd_reduction() {
            self.prr_out += 1;
        }
        let payload = self.payload_of(seq);
        let size = payload + (self.mtu - self.mss);
        self.stats.sent_pkts += 1;
        self.stats.sent_bytes += size as u64;
        self.stats.sent_payload_bytes += payload as u64;
        // tcp_ecn_send: new data is ECN-capable and carries a queued CWR; retransmissions
        // are not ECN-capable (RFC 3168 section 6.1.5).
        let (ecn, cwr) = if self.ecn && !retrans {
            (self.ect, std::mem::take(&mut self.cwr_pending))
        } else {
            (Ecn::NotEct, false)
        };
        io.out.push(DataPacket { flow: self.flow, seq, size, payload, sent_at: now, ecn, cwr, ts_echo: self.ts_recent });
        if !self.timers[TimerKind::Rto as usize].deadline().is_some() || retrans && seq == self.snd_una {
            self.arm_rto(now, self.rtt.rto(), io);
        }
    }

    // ---- ACK processing ----------------------------------------------------------------

    /// Marks one segment delivered (cumulatively or by SACK) and feeds the rate sampler
    /// (`tcp_rate_skb_delivered`) and RACK (`tcp_rack_advance`).
    fn on_delivered(&mut self, now: Nanos, seq: u64, sacked: bool, acc: &mut AckAccum) {
        self.ts_unlink(seq);
        let s = *self.seg(seq);
        if s.flags & SACKED != 0 {
            // Already counted when SACKed; leaving the scoreboard now.
            return;
        }
        let st = *self.stamp(&s);
        self.delivered += 1;
        acc.delivered += 1;
        // FLAG_ORIG_SACK_ACKED: never-retransmitted data from before high_seq delivered.
        if s.flags & EVER_RETRANS == 0 && seq < self.high_seq {
            acc.orig_acked = true;
        }
        if sacked {
            acc.data_sacked = true;
        }
        if s.flags & LOST != 0 {
            self.lost_out -= 1;
        }
        if s.flags & RETRANS_IN_FLIGHT != 0 {
            self.retrans_out -= 1;
        }
        if sacked {
            self.sacked_out += 1;
        }
        // RTT (Karn: never from a retransmitted segment, and no ACK-timed sample at all from a
        // cumulative ACK that covers one, FLAG_RETRANS_DATA_ACKED).
        if s.flags & EVER_RETRANS == 0 {
            if sacked {
                acc.times.sacked(st.tx_time);
            } else {
                acc.times.acked(st.tx_time, st.tx_time);
            }
        } else {
            acc.retrans_acked = true;
            acc.times.retrans_data_acked |= !sacked;
        }
        // RACK: skip likely-spurious retransmission timing (tcp_rack_advance), and a segment
        // cumulatively ACKed for an earlier transmission than its last, as the echoed
        // timestamp shows (tcp_clean_rtx_queue's tcp_skb_spurious_retrans).
        let rtt = now - st.tx_time;
        let spurious = !sacked
            && s.flags & EVER_RETRANS != 0
            && echo_before(acc.tsecr, st.tx_time);
        if !spurious && !(s.flags & EVER_RETRANS != 0 && rtt < self.rtt.min_rtt) {
            if !self.rack.valid || sent_after(st.tx_time, seq, self.rack.xmit_ts, self.rack.end_seq) {
                self.rack.xmit_ts = st.tx_time;
                self.rack.end_seq = seq;
            }
            self.rack.rtt = rtt;
            self.rack.valid = true;
        }
        // Rate sample: keep the most recently sent packet (google/bbr, Linux >= 6.1).
        if s.flags & RATE_USED == 0 {
            if acc.rs_prior_time.is_none() || sent_after(st.tx_time, seq, self.first_tx_time, acc.last_end_seq) {
                acc.rs.prior_delivered = st.delivered;
                acc.rs_prior_time = Some(st.delivered_time);
                acc.rs.is_app_limited = s.flags & APP_LIMITED != 0;
                acc.rs.is_retrans = s.flags & EVER_RETRANS != 0;
                acc.rs.tx_in_flight = st.in_flight_at(seq);
                acc.rs.lost = self.lost - st.lost_at_send;
                acc.prior_delivered_ce = st.delivered_ce;
                acc.last_end_seq = seq;
                self.first_tx_time = st.tx_time;
                acc.snd_interval = st.tx_time - st.first_tx;
            }
        }
        let m = self.seg_mut(seq);
        m.flags &= !(LOST | RETRANS_IN_FLIGHT);
        if sacked {
            m.flags |= SACKED | RATE_USED;
        }
    }

    /// The cumulative part of `tcp_clean_rtx_queue`: every segment below `ack` is delivered
    /// and leaves the scoreboard, in sequence order; returns their payload bytes.
    ///
    /// A run of plain segments (never retransmitted, not SACKed, not marked lost) is taken
    /// at once, with the result `on_delivered` of each in turn gives: counters by the run's
    /// length; the oldest ACK-timed send time from its first segment; RACK and the rate
    /// sample from the most recently sent (the greatest (send time, sequence), found in the
    /// scan), RACK's RTT from the last one taken; and the run unlinked from the time-sorted
    /// list a stretch of list neighbours at a time. Other segments go through `on_delivered`.
    fn clean_rtx_queue(&mut self, now: Nanos, ack: u64, acc: &mut AckAccum) -> u64 {
        let base = self.snd_una;
        let mut i = base;
        while i < ack {
            let flags = self.seg(i).flags;
            if flags & NOT_PLAIN != 0 {
                self.on_delivered(now, i, false, acc);
                if flags & SACKED != 0 {
                    self.sacked_out -= 1;
                    // FLAG_RETRANS_DATA_ACKED counts SACKed packets leaving the queue too.
                    acc.times.retrans_data_acked |= flags & EVER_RETRANS != 0;
                }
                i += 1;
                continue;
            }
            // The run i..j of plain segments, its most recently sent one, and whether it is
            // one stretch of the time-sorted list (each the list successor of the one before).
            let mut run = self.segs.range((i - base) as usize..(ack - base) as usize);
            let s0 = run.next().expect("i < ack");
            let (first_tx, head_prev) = (self.stamp(s0).tx_time, s0.prev(i));
            let (mut newest_tx, mut newest, mut last_tx) = (first_tx, i, first_tx);
            let mut chained = s0.flags & IN_TSORTED != 0;
            let mut link = s0.next(i);
            let mut stamp = s0.stamp;
            let mut j = i + 1;
            for s in run {
                if s.flags & NOT_PLAIN != 0 {
                    break;
                }
                chained &= link == j;
                link = s.next(j);
                // a train's segments share their snapshot: look it up once per train
                if s.stamp != stamp {
                    stamp = s.stamp;
                    last_tx = self.stamp(s).tx_time;
                }
                if last_tx >= newest_tx {
                    newest_tx = last_tx;
                    newest = j;
                }
                j += 1;
            }
            if chained {
                self.ts_splice_out(head_prev, link);
            } else {
                self.ts_unlink_run(i, j);
            }
            let count = j - i;
            self.delivered += count;
            acc.delivered += count as u32;
            // FLAG_ORIG_SACK_ACKED: never-retransmitted data from before high_seq delivered.
            if i < self.high_seq {
                acc.orig_acked = true;
            }
            acc.times.acked(first_tx, newest_tx);
            if !self.rack.valid || sent_after(newest_tx, newest, self.rack.xmit_ts, self.rack.end_seq) {
                self.rack.xmit_ts = newest_tx;
                self.rack.end_seq = newest;
            }
            self.rack.rtt = now - last_tx;
            self.rack.valid = true;
            if acc.rs_prior_time.is_none() || sent_after(newest_tx, newest, self.first_tx_time, acc.last_end_seq) {
                let s = *self.seg(newest);
                let st = *self.stamp(&s);
                acc.rs.prior_delivered = st.delivered;
                acc.rs_prior_time = Some(st.delivered_time);
                acc.rs.is_app_limited = s.flags & APP_LIMITED != 0;
                acc.rs.is_retrans = false;
                acc.rs.tx_in_flight = st.in_flight_at(newest);
                acc.rs.lost = self.lost - st.lost_at_send;
                acc.prior_delivered_ce = st.delivered_ce;
                acc.last_end_seq = newest;
                self.first_tx_time = st.tx_time;
                acc.snd_interval = st.tx_time - st.first_tx;
            }
            i = j;
        }
        let n = ack - base;
        acc.pkts_acked += n as u32;
        let mut bytes = n * self.mss as u64;
        if let Some((end, last)) = self.end {
            if base < end && end <= ack {
                bytes = bytes - self.mss as u64 + last as u64;
            }
        }
        self.segs.drain(..n as usize);
        self.snd_una = ack;
        while self.stamps.front().is_some_and(|st| st.last_seq < ack) {
            self.stamps.pop_front();
            self.stamp_base += 1;
        }
        bytes
    }

    pub fn on_ack(&mut self, now: Nanos, ack: &AckPacket, io: &mut Io) {
        if ack.ack > self.snd_nxt {
            return;
        }
        self.take_window(ack, ack.ack > self.snd_una);
        let prior_in_flight = self.packets_in_flight();
        let prior_lost = self.lost;
        let mut acc = AckAccum { tsecr: ack.tsecr, ..AckAccum::default() };
        acc.rs.prior_in_flight = prior_in_flight;
        let una_advanced = ack.ack > self.snd_una;
        let prior_sacked_out = self.sacked_out;

        // Cumulative ACK (tcp_clean_rtx_queue).
        let una_bytes = if una_advanced { self.clean_rtx_queue(now, ack.ack, &mut acc) } else { 0 };
        self.sacked.remove_below(self.snd_una);

        // SACK blocks (tcp_sacktag_write_queue): only the newly covered segments are touched.
        for &(s, e) in ack.sack_blocks() {
            let s = s.max(self.snd_una);
            let e = e.min(self.snd_nxt);
            if s >= e {
                continue;
            }
            let mut newly = std::mem::take(&mut self.scratch);
            self.sacked.insert_with(s, e, |x| newly.push(x));
            for &x in &newly {
                self.on_delivered(now, x, true, &mut acc);
            }
            newly.clear();
            self.scratch = newly;
        }

        // RTT (tcp_clean_rtx_queue, tcp_ack_update_rtt): srtt from the oldest packet newly
        // ACKed (seq_rtt_us), else newly SACKed (sack_rtt_us); the algorithm's RTT and the min
        // RTT from the most recently sent one (ca_rtt_us).
        let (seq_rtt, ca_rtt) = self.ack_rtt(now, &acc, una_advanced, ack.tsecr);
        if let (Some(r), Some(ca)) = (seq_rtt, ca_rtt) {
            self.rtt.on_sample(r, self.snd_una, self.snd_nxt);
            self.stats.rtt_sum += r as f64;
            self.stats.rtt_n += 1;
            if ca < self.rtt.min_rtt {
                self.rtt.min_rtt = ca.max(1);
            }
        }

        // ECN echo (tcp_ecn_rcv_ecn_echo, tcp_count_delivered): what this ACK delivered
        // counts as CE-marked; the algorithm hears of the ACK (`in_ack_event`).
        let ece = self.ecn && ack.ece;
        if ece {
            self.delivered_ce += acc.delivered as u64;
        }
        if self.ecn {
            let info = self.info(now);
            self.cc.in_ack_event(&info, &mut self.w, ece);
        }

        // Tail loss probe episode, then recovery state and loss detection
        // (tcp_process_tlp_ack, tcp_fastretrans_alert).
        self.process_tlp_ack(now, ack.ack, una_advanced, acc.data_sacked);
        self.fastretrans_alert(now, &acc, una_advanced, ack.tsecr, ece, io);
        let newly_lost = (self.lost - prior_lost) as u32;
        if una_advanced {
            self.icsk_retransmits = 0;
        }

        // FLAG_ACK_MAYBE_DELAYED (tcp_clean_rtx_queue, Linux >= 5.16): the ACK cumulatively
        // covers one lone runt (less than an MSS), never retransmitted, with nothing SACKed
        // before or by it, and nothing else delivered since that packet was sent. Linux cannot
        // see whether the receiver delayed an ACK; full-sized segments never set it.
        let maybe_delayed = acc.pkts_acked == 1
            && acc.delivered == 1
            && prior_sacked_out == 0
            && una_bytes < self.mss as u64
            && !acc.retrans_acked
            && acc.times.first_ackt.is_some()
            && acc.rs.prior_delivered + 1 == self.delivered;

        // Rate sample (tcp_rate_gen).
        let mut rs = self.rate_gen(now, &mut acc, newly_lost, ca_rtt, maybe_delayed);
        rs.is_ece = ece;

        if acc.pkts_acked > 0 || acc.delivered > 0 {
            let info = self.info(now);
            // Linux counts cumulatively ACKed packets here (tcp_clean_rtx_queue's pkts_acked).
            let sample = AckSample { pkts_acked: acc.pkts_acked, rtt_ns: ca_rtt.unwrap_or(-1), in_flight: prior_in_flight };
            self.cc.pkts_acked(&info, &mut self.w, &sample);
        }

        // tcp_cong_control.
        let info = self.info(now);
        if self.cc.controls_cwnd() {
            self.cc.cong_control(&info, &mut self.w, &rs);
        } else if self.in_cwnd_reduction() {
            self.prr(acc.delivered, newly_lost, una_advanced);
        } else if una_advanced {
            self.cc.cong_avoid(&info, &mut self.w, acc.delivered);
        }
        self.w.cwnd = self.w.cwnd.max(1);
        self.apply_cc_requests();

        // tcp_set_xmit_timer: a loss probe if allowed, else the RTO.
        if una_advanced && !self.schedule_loss_probe(now, true, io) {
            self.rearm_rto(now, io);
        }
        self.try_send(now, io);
        // All the data acknowledged: the application closes, the socket goes, and with it the
        // algorithm's state.
        if self.is_done() {
            self.release_cc(now);
        }
    }

    /// Tears the algorithm down (`tcp_cleanup_congestion_control`): its `release`, once, if it
    /// was initialised. The end of the trial does this for every flow still open.
    pub fn release_cc(&mut self, now: Nanos) {
        if self.started && !self.released {
            self.released = true;
            let info = self.info(now);
            self.cc.release(&info, &self.w);
        }
    }

    fn apply_cc_requests(&mut self) {
        if self.w.set_app_limited {
            self.w.set_app_limited = false;
            self.app_limited = (self.delivered + self.packets_in_flight() as u64).max(1);
        }
    }

    fn rate_gen(&mut self, now: Nanos, acc: &mut AckAccum, newly_lost: u32, ca_rtt: Option<Nanos>, delayed: bool) -> RateSample {
        if self.app_limited != 0 && self.delivered > self.app_limited {
            self.app_limited = 0;
        }
        if acc.delivered > 0 {
            self.delivered_time = now;
        }
        let mut rs = acc.rs;
        rs.acked_sacked = acc.delivered;
        rs.losses = newly_lost;
        rs.rtt_ns = ca_rtt.unwrap_or(-1);
        rs.is_ack_delayed = delayed;
        match acc.rs_prior_time {
            None => {
                rs.delivered = -1;
                rs.interval_ns = -1;
            }
            Some(prior_time) => {
                rs.prior_time = prior_time;
                rs.delivered = (self.delivered - rs.prior_delivered) as i64;
                rs.delivered_ce = (self.delivered_ce - acc.prior_delivered_ce) as i64;
                let ack_interval = now - prior_time;
                rs.interval_ns = acc.snd_interval.max(ack_interval);
                if rs.interval_ns < self.rtt.min_rtt {
                    rs.interval_ns = -1;
                }
            }
        }
        rs
    }

    /// RACK loss detection over the time-sorted list (`tcp_rack_detect_loss`).
    fn rack_detect_loss(&mut self, now: Nanos, io: &mut Io) {
        if !self.rack.valid {
            return;
        }
        let reo_wnd = if matches!(self.ca_state, CaState::Recovery | CaState::Loss) || self.sacked_out >= 3 {
            0
        } else {
            (self.rtt.min_rtt / 4).min(self.rtt.srtt)
        };
        // Every packet sent before the most recently delivered one is lost once its reordering
        // window has passed; the timer waits for the last of the others (the kernel records
        // the maximum wait) plus TCP_TIMEOUT_MIN_US (`tcp_rack_mark_lost`).
        let mut wait: Nanos = 0;
        let mut seq = self.ts_head;
        while seq != NIL {
            let s = *self.seg(seq);
            let tx_time = self.stamp(&s).tx_time;
            if !sent_after(self.rack.xmit_ts, self.rack.end_seq, tx_time, seq) {
                break;
            }
            let remaining = self.rack.rtt + reo_wnd - (now - tx_time);
            let next = s.next(seq);
            if remaining > 0 {
                wait = wait.max(remaining);
            } else {
                self.mark_lost(now, seq);
            }
            seq = next;
        }
        if wait > 0 {
            self.arm_on_wheel(TimerKind::Reorder, now, wait + TCP_TIMEOUT_MIN_US, io);
        }
    }

    /// `tcp_mark_skb_lost`; google/bbr then tells the algorithm (`skb_marked_lost`), once
    /// `lost` counts the packet.
    fn mark_lost(&mut self, now: Nanos, seq: u64) {
        self.ts_unlink(seq);
        let m = self.seg_mut(seq);
        debug_assert!(m.flags & SACKED == 0);
        let was_retrans = m.flags & RETRANS_IN_FLIGHT != 0;
        let was_lost = m.flags & LOST != 0;
        m.flags = (m.flags | LOST) & !RETRANS_IN_FLIGHT;
        if was_retrans {
            self.retrans_out -= 1;
        }
        if !was_lost {
            self.lost_out += 1;
        }
        self.lost += 1;
        self.stats.lost_segs += 1;
        self.lost_queue.push(seq);
        let s = *self.seg(seq);
        let pkt = LostPacket {
            tx_in_flight: self.in_flight_at_send(seq, &s),
            tx_lost: self.stamp(&s).lost_at_send,
            is_app_limited: s.flags & APP_LIMITED != 0,
        };
        let info = self.info(now);
        self.cc.skb_marked_lost(&info, &pkt);
    }

    /// `tcp_fastretrans_alert` for one ACK: state exits when high_seq is ACKed (with undo,
    /// `tcp_try_undo_recovery`), F-RTO and undo in Loss (`tcp_process_loss`), RACK loss
    /// detection (`tcp_identify_packet_loss`), then entry into Recovery.
    fn fastretrans_alert(&mut self, now: Nanos, acc: &AckAccum, una_advanced: bool, tsecr: Option<Nanos>, ece: bool, io: &mut Io) {
        match self.ca_state {
            CaState::Open => self.retrans_stamp = None,
            // CWR is held until something above high_seq is ACKed, so that the CWR flag
            // reached the receiver; then tcp_end_cwnd_reduction.
            CaState::Cwr if self.snd_una > self.high_seq => {
                if !self.cc.controls_cwnd() && self.w.ssthresh != u32::MAX {
                    self.w.cwnd = self.w.ssthresh;
                }
                self.set_ca_state(now, CaState::Open);
            }
            CaState::Recovery if self.snd_una >= self.high_seq => {
                let undone = self.try_undo_recovery(now, tsecr);
                // tcp_end_cwnd_reduction, unless undone.
                if !undone && !self.cc.controls_cwnd() && self.w.ssthresh != u32::MAX {
                    self.w.cwnd = self.w.ssthresh;
                }
            }
            _ => {}
        }
        if self.ca_state == CaState::Loss {
            self.process_loss(now, acc, una_advanced, tsecr);
            self.rack_detect_loss(now, io);
            if self.ca_state != CaState::Open {
                return;
            }
        } else {
            self.rack_detect_loss(now, io);
        }
        self.update_recovery_state(now, ece);
        // tcp_try_to_open: an ECN echo outside recovery reduces the window once (tcp_enter_cwr).
        if ece && matches!(self.ca_state, CaState::Open | CaState::Disorder) {
            self.enter_cwr(now);
        }
    }

    /// Whether cwnd is being reduced by PRR (`tcp_in_cwnd_reduction`: CWR or Recovery).
    fn in_cwnd_reduction(&self) -> bool {
        matches!(self.ca_state, CaState::Cwr | CaState::Recovery)
    }

    /// `tcp_init_cwnd_reduction`: PRR starts from the current window; the algorithm sets
    /// ssthresh; a CWR flag is queued for the receiver (`tcp_ecn_queue_cwr`).
    fn init_cwnd_reduction(&mut self, now: Nanos) {
        self.high_seq = self.snd_nxt;
        self.tlp_high_seq = None;
        self.w.cwnd_cnt = 0;
        self.prior_cwnd = self.w.cwnd;
        self.prr_delivered = 0;
        self.prr_out = 0;
        let info = self.info(now);
        self.w.ssthresh = self.cc.ssthresh(&info, &self.w);
        if self.ecn {
            self.cwr_pending = true;
        }
    }

    /// `tcp_enter_cwr`: the window reduction for an ECN echo, nothing to undo.
    fn enter_cwr(&mut self, now: Nanos) {
        self.prior_ssthresh = 0;
        self.undo_marker = None;
        self.init_cwnd_reduction(now);
        self.set_ca_state(now, CaState::Cwr);
    }

    /// `tcp_process_loss`: leave Loss when everything sent before the timeout is ACKed, or
    /// undo the timeout if it was spurious: the ACK echoes a timestamp older than the first
    /// retransmission (`tcp_try_undo_loss` via `tcp_packet_delayed`), or, under F-RTO, data
    /// never retransmitted is (S)ACKed (step 3.b). After the first ACK that advances snd_una,
    /// F-RTO sends new data rather than retransmissions (step 2.b); a duplicate ACK or SACK
    /// after that means the loss was real (step 3.a).
    fn process_loss(&mut self, now: Nanos, acc: &AckAccum, una_advanced: bool, tsecr: Option<Nanos>) {
        let recovered = self.snd_una >= self.high_seq;
        if una_advanced && self.try_undo_loss(now, false, tsecr) {
            return;
        }
        if self.frto {
            if acc.orig_acked && self.try_undo_loss(now, true, tsecr) {
                return;
            }
            if self.snd_nxt > self.high_seq {
                if acc.data_sacked || !una_advanced {
                    self.frto = false;
                }
            } else if una_advanced && !recovered {
                self.high_seq = self.snd_nxt;
                if self.has_new_data() && self.snd_nxt < self.snd_una.saturating_add(self.rwnd_segs) {
                    self.frto_rexmit_new = true;
                    return;
                }
                self.frto = false;
            }
        }
        if recovered {
            self.try_undo_recovery(now, tsecr);
        }
    }

    /// `tcp_packet_delayed`: the ACK echoes a timestamp from before the first retransmission,
    /// so it was caused by an original transmission (in [`TCP_TS_TICK`]s).
    fn packet_delayed(&self, tsecr: Option<Nanos>) -> bool {
        self.retrans_stamp.is_some_and(|rs| echo_before(tsecr, rs))
    }

    /// `tcp_may_undo`. Without D-SACK, only the timestamp test can show every retransmission
    /// was unneeded (`undo_retrans` never reaches 0).
    fn may_undo(&self, tsecr: Option<Nanos>) -> bool {
        self.undo_marker.is_some() && self.packet_delayed(tsecr)
    }

    /// `tcp_try_undo_recovery`: at the end of Recovery or Loss, undo if the whole episode
    /// was spurious; back to Open either way. True if undone.
    fn try_undo_recovery(&mut self, now: Nanos, tsecr: Option<Nanos>) -> bool {
        let undone = self.may_undo(tsecr);
        if undone {
            self.undo_cwnd_reduction(now, false);
        }
        self.set_ca_state(now, CaState::Open);
        undone
    }

    /// `tcp_try_undo_loss`.
    fn try_undo_loss(&mut self, now: Nanos, frto_undo: bool, tsecr: Option<Nanos>) -> bool {
        if frto_undo || self.may_undo(tsecr) {
            self.undo_cwnd_reduction(now, true);
            self.icsk_retransmits = 0;
            self.frto = false;
            self.set_ca_state(now, CaState::Open);
            true
        } else {
            false
        }
    }

    /// The (seq_rtt, ca_rtt) one ACK yields ([`AckedSendTimes::rtt_samples`]), the echoed
    /// timestamp counted in the sender's millisecond TS ticks. So a flow whose ACKs cover only
    /// retransmissions, as in a recovery that holds the whole window, still samples the path:
    /// BBR's PROBE_RTT refreshes its min_rtt there, as on Linux.
    fn ack_rtt(&self, now: Nanos, acc: &AckAccum, una_advanced: bool, tsecr: Option<Nanos>) -> (Option<Nanos>, Option<Nanos>) {
        acc.times.rtt_samples(now, una_advanced, tsecr.map(|ts| now / TCP_TS_TICK - ts / TCP_TS_TICK))
    }

    /// `tcp_undo_cwnd_reduction`: restore cwnd (the algorithm's `undo_cwnd`) and ssthresh;
    /// with `unmark_loss`, segments marked lost are in flight again (they go back to the head
    /// of the time-sorted list, where RACK can judge them anew).
    fn undo_cwnd_reduction(&mut self, now: Nanos, unmark_loss: bool) {
        if unmark_loss && self.lost_out > 0 {
            let mut back: Vec<(Nanos, u64)> = Vec::new();
            for seq in self.snd_una..self.snd_nxt {
                let f = self.seg(seq).flags;
                if f & LOST != 0 {
                    self.seg_mut(seq).flags &= !LOST;
                    if f & IN_TSORTED == 0 {
                        back.push((self.stamp_of(seq).tx_time, seq));
                    }
                }
            }
            back.sort_unstable();
            for &(_, seq) in back.iter().rev() {
                self.ts_push_front(seq);
            }
            self.lost_out = 0;
        }
        if self.prior_ssthresh != 0 {
            let info = self.info(now);
            self.w.cwnd = self.cc.undo_cwnd(&info, &self.w, self.prior_cwnd).max(1);
            if self.prior_ssthresh > self.w.ssthresh {
                self.w.ssthresh = self.prior_ssthresh;
            }
        }
        self.undo_marker = None;
        self.stats.undo_count += 1;
    }

    /// `tcp_current_ssthresh`: the ssthresh to restore on undo.
    fn current_ssthresh(&self) -> u32 {
        if self.in_cwnd_reduction() {
            self.w.ssthresh
        } else {
            self.w.ssthresh.max((self.w.cwnd >> 1) + (self.w.cwnd >> 2))
        }
    }

    /// Entry into Recovery once RACK marked something lost (`tcp_time_to_recover`,
    /// `tcp_enter_recovery`), and the Open/Disorder bookkeeping.
    fn update_recovery_state(&mut self, now: Nanos, ece: bool) {
        match self.ca_state {
            CaState::Open | CaState::Disorder | CaState::Cwr if self.lost_out > 0 => {
                // tcp_enter_recovery: tcp_init_undo, and tcp_init_cwnd_reduction unless a
                // reduction (CWR) is already under way; an ECN echo leaves nothing to undo.
                if self.ca_state == CaState::Cwr {
                    self.prior_ssthresh = 0;
                    self.undo_marker = Some(self.snd_una);
                } else {
                    self.prior_ssthresh = if ece { 0 } else { self.current_ssthresh() };
                    self.undo_marker = Some(self.snd_una);
                    self.high_seq = self.snd_nxt;
                    self.prior_cwnd = self.w.cwnd;
                    self.prr_delivered = 0;
                    self.prr_out = 0;
                    self.w.cwnd_cnt = 0;
                    let info = self.info(now);
                    self.w.ssthresh = self.cc.ssthresh(&info, &self.w);
                    if self.ecn {
                        self.cwr_pending = true;
                    }
                }
                self.set_ca_state(now, CaState::Recovery);
            }
            CaState::Open if self.sacked_out > 0 => self.set_ca_state(now, CaState::Disorder),
            CaState::Disorder if self.sacked_out == 0 => self.set_ca_state(now, CaState::Open),
            _ => {}
        }
    }

    fn set_ca_state(&mut self, now: Nanos, s: CaState) {
        if self.ca_state != s {
            self.ca_state = s;
            let info = self.info(now);
            self.cc.set_state(&info, &mut self.w, s);
        }
    }

    /// Proportional Rate Reduction (RFC 6937 as in `tcp_cwnd_reduction`).
    fn prr(&mut self, newly_acked_sacked: u32, newly_lost: u32, una_advanced: bool) {
        if newly_acked_sacked == 0 || self.prior_cwnd == 0 {
            return;
        }
        let in_flight = self.packets_in_flight() as i64;
        let delta = self.w.ssthresh as i64 - in_flight;
        self.prr_delivered += newly_acked_sacked;
        let mut sndcnt: i64 = if delta < 0 {
            let dividend = self.w.ssthresh as u64 * self.prr_delivered as u64 + self.prior_cwnd as u64 - 1;
            (dividend / self.prior_cwnd as u64) as i64 - self.prr_out as i64
        } else {
            let mut n = (self.prr_delivered as i64 - self.prr_out as i64).max(newly_acked_sacked as i64);
            if una_advanced && newly_lost == 0 {
                n += 1;
            }
            n.min(delta)
        };
        sndcnt = sndcnt.max(if self.prr_out > 0 { 0 } else { 1 });
        self.w.cwnd = (in_flight + sndcnt).max(1) as u32;
    }

    // ---- timers ------------------------------------------------------------------------

    pub fn on_timer(&mut self, now: Nanos, kind: TimerKind, io: &mut Io) {
        match kind {
            TimerKind::Rto if self.syn_sent_at.is_some() => self.connect(now, io),
            TimerKind::Rto if self.xmit_probe => self.send_loss_probe(now, io),
            TimerKind::Rto => self.on_rto(now, io),
            TimerKind::Pace => self.try_send(now, io),
            TimerKind::Reorder => {
                let prior_lost = self.lost;
                self.rack_detect_loss(now, io);
                // tcp_rack_reo_timeout: enter recovery and let PRR release a retransmission.
                if self.lost > prior_lost {
                    let was_recovery = matches!(self.ca_state, CaState::Recovery);
                    self.update_recovery_state(now, false);
                    if !was_recovery && matches!(self.ca_state, CaState::Recovery) && !self.cc.controls_cwnd() {
                        self.prr(1, 0, false);
                    }
                    self.try_send(now, io);
                }
            }
            TimerKind::DelAck => unreachable!("receiver timer routed to sender"),
        }
    }

    /// Retransmission timeout (`tcp_retransmit_timer` -> `tcp_enter_loss`).
    fn on_rto(&mut self, now: Nanos, io: &mut Io) {
        if self.packets_out() == 0 {
            return;
        }
        self.stats.rto_count += 1;
        // tcp_enter_loss: a new episode unless already in Recovery or Loss.
        let new_recovery = matches!(self.ca_state, CaState::Open | CaState::Disorder | CaState::Cwr);
        let before_reduction = matches!(self.ca_state, CaState::Open | CaState::Disorder);
        // tcp_timeout_mark_lost: the head, and every un-SACKed segment sent at least RACK.rtt
        // ago; more recent ones are not marked lost yet.
        for seq in self.snd_una..self.snd_nxt {
            let s = *self.seg(seq);
            if s.flags & SACKED != 0 {
                continue;
            }
            if seq != self.snd_una && self.rack.rtt - (now - self.stamp(&s).tx_time) > 0 {
                continue;
            }
            if s.flags & LOST == 0 || s.flags & RETRANS_IN_FLIGHT != 0 {
                self.mark_lost(now, seq);
            }
        }
        // Reduce ssthresh unless already done in this window; remember what to undo.
        if before_reduction
            || self.snd_una >= self.high_seq
            || (self.ca_state == CaState::Loss && self.icsk_retransmits == 0)
        {
            self.prior_ssthresh = self.current_ssthresh();
            self.prior_cwnd = self.w.cwnd;
            let info = self.info(now);
            self.w.ssthresh = self.cc.ssthresh(&info, &self.w);
            self.undo_marker = Some(self.snd_una);
        }
        self.w.cwnd = self.packets_in_flight() + 1;
        self.w.cwnd_cnt = 0;
        self.ca_state = CaState::Open; // force the transition callback
        self.set_ca_state(now, CaState::Loss);
        self.high_seq = self.snd_nxt;
        // F-RTO (sysctl_tcp_frto = 2) unless a recovery was already under way, except for
        // a recurring timeout on the same snd_una.
        self.frto = new_recovery || self.icsk_retransmits > 0;
        self.frto_rexmit_new = false;
        self.icsk_retransmits += 1;
        self.rack.valid = false;
        self.rtt.backoff += 1;
        self.tlp_high_seq = None;
        self.arm_rto(now, self.rtt.rto(), io);
        self.next_send_time = now;
        self.try_send(now, io);
    }
}

/// Accumulates what one ACK delivered, for the RTT and rate samples.
#[derive(Default)]
struct AckAccum {
    delivered: u32,
    pkts_acked: u32,
    /// Send times of the never-retransmitted packets newly ACKed and SACKed, and
    /// FLAG_RETRANS_DATA_ACKED: what the RTT samples come from.
    times: AckedSendTimes,
    /// A packet ever retransmitted was (S)ACKed.
    retrans_acked: bool,
    orig_acked: bool,
    data_sacked: bool,
    rs: RateSample,
    rs_prior_time: Option<Nanos>,
    snd_interval: Nanos,
    /// Sequence of the packet the rate sample was taken from (`rs->last_end_seq`).
    last_end_seq: u64,
    /// `tx.delivered_ce` of the sampled packet.
    prior_delivered_ce: u64,
    /// The ACK's timestamp echo (`rx_opt.rcv_tsecr`).
    tsecr: Option<Nanos>,
}

/// `tcp_tsopt_ecr_before`: the ACK echoes a timestamp from before `when` (in
/// [`TCP_TS_TICK`]s; false without an echo).
fn echo_before(tsecr: Option<Nanos>, when: Nanos) -> bool {
    tsecr.is_some_and(|ts| ts / TCP_TS_TICK < when / TCP_TS_TICK)
}

/// `tcp_skb_sent_after`: was (t1, seq1) sent after (t2, seq2)?
fn sent_after(t1: Nanos, seq1: u64, t2: Nanos, seq2: u64) -> bool {
    t1 > t2 || (t1 == t2 && seq1 > seq2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::MAX_SACK_BLOCKS;
    use std::sync::{Arc, Mutex};

    /// The calls a [`Recorder`] saw: the op, the time and snd_una.
    type Calls = Arc<Mutex<Vec<(&'static str, Nanos, u64)>>>;

    /// Reno, recording the calls of `init`, `sndbuf_expand` and `release` and setting cwnd to
    /// 4 in `sndbuf_expand`.
    struct Recorder {
        reno: Box<dyn CongestionControl>,
        calls: Calls,
    }

    impl CongestionControl for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn init(&mut self, info: &ConnInfo, w: &mut Window) {
            self.calls.lock().unwrap().push(("init", info.now, info.snd_una));
            self.reno.init(info, w);
        }
        fn sndbuf_expand(&mut self, info: &ConnInfo, w: &mut Window) -> Option<u32> {
            self.calls.lock().unwrap().push(("sndbuf_expand", info.now, info.snd_una));
            w.cwnd = 4;
            Some(3)
        }
        fn release(&mut self, info: &ConnInfo, _w: &Window) {
            self.calls.lock().unwrap().push(("release", info.now, info.snd_una));
        }
        fn ssthresh(&mut self, info: &ConnInfo, w: &Window) -> u32 {
            self.reno.ssthresh(info, w)
        }
        fn cong_avoid(&mut self, info: &ConnInfo, w: &mut Window, acked: u32) {
            self.reno.cong_avoid(info, w, acked)
        }
    }

    fn recorded(cfg: &FlowConfig) -> (Sender, Calls) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let cc = Box::new(Recorder { reno: crate::cc::build("reno", &Default::default()).unwrap(), calls: Arc::clone(&calls) });
        (Sender::new(0, cfg, 1448, 1500, cc), calls)
    }

    /// `tcp_init_transfer`: the algorithm is initialised, then `tcp_init_buffer_space` asks
    /// its `sndbuf_expand`, before any data goes (a window it sets there is the first flight's).
    #[test]
    fn sndbuf_expand_is_asked_once_after_init_at_establishment() {
        let (mut s, calls) = recorded(&FlowConfig::bulk("reno"));
        let (mut out, mut timers) = (Vec::new(), Vec::new());
        let mut io = Io { out: &mut out, timers: &mut timers };
        s.start(7, &mut io);
        assert_eq!(*calls.lock().unwrap(), vec![("init", 7, 0), ("sndbuf_expand", 7, 0)]);
        assert_eq!(s.snd_nxt, 4, "the first flight is the window sndbuf_expand left");
        s.on_ack(50_000_000, &ack(4, None, 0), &mut io);
        assert_eq!(calls.lock().unwrap().len(), 2, "asked again only by tcp_new_space, not modelled");
    }

    /// `release` runs once, when the last of a sized flow's data is acknowledged; the end of
    /// the trial (`release_cc`) and later ACKs do not run it again.
    #[test]
    fn release_runs_once_when_a_sized_flow_ends() {
        let mut cfg = FlowConfig::bulk("reno");
        cfg.size_bytes = Some(6 * 1448);
        let (mut s, calls) = recorded(&cfg);
        let (mut out, mut timers) = (Vec::new(), Vec::new());
        let mut io = Io { out: &mut out, timers: &mut timers };
        s.start(0, &mut io);
        s.on_ack(50_000_000, &ack(4, None, 0), &mut io);
        assert!(!calls.lock().unwrap().iter().any(|c| c.0 == "release"), "data still outstanding");
        s.on_ack(100_000_000, &ack(6, None, 0), &mut io);
        s.on_ack(100_000_001, &ack(6, None, 0), &mut io);
        s.release_cc(1_000_000_000);
        let released: Vec<_> = calls.lock().unwrap().iter().filter(|c| c.0 == "release").copied().collect();
        assert_eq!(released, vec![("release", 100_000_000, 6)]);
    }

    /// At the end of the trial a flow still open is torn down; a flow whose algorithm was
    /// never initialised (no SYN-ACK yet) is not.
    #[test]
    fn the_end_of_the_trial_releases_open_flows_only() {
        let (mut open, calls) = recorded(&FlowConfig::bulk("reno"));
        let (mut out, mut timers) = (Vec::new(), Vec::new());
        let mut io = Io { out: &mut out, timers: &mut timers };
        open.start(0, &mut io);
        open.release_cc(5_000_000_000);
        open.release_cc(5_000_000_001);
        assert_eq!(calls.lock().unwrap().iter().filter(|c| c.0 == "release").count(), 1);
        let (mut never, calls) = recorded(&FlowConfig::bulk("reno"));
        never.connect(0, &mut io);
        never.release_cc(5_000_000_000);
        assert!(calls.lock().unwrap().is_empty());
    }

    fn ack(ack: u64, sack: Option<(u64, u64)>, tsecr: Nanos) -> AckPacket {
        let mut sacks = [(0, 0); MAX_SACK_BLOCKS];
        let n = if let Some(b) = sack {
            sacks[0] = b;
            1
        } else {
            0
        };
        AckPacket { flow: 0, ack, sacks, n_sacks: n, delayed: false, tsecr: Some(tsecr), ece: false, wnd: u32::MAX as u64, ts_val: 0 }
    }

    /// RFC 3168 section 6.1.2 as Linux (`tcp_enter_cwr`, `tcp_ecn_send`): new data leaves
    /// ECT(0), an ECE halves ssthresh once per window (CWR state, PRR, no retransmission),
    /// further ECEs in that window do nothing, the next new segment carries CWR, and the
    /// state ends once data beyond the window is ACKed.
    #[test]
    fn an_ecn_echo_reduces_the_window_once_per_window_and_sends_cwr() {
        let mut cfg = FlowConfig::bulk("reno");
        cfg.ecn = true;
        let cc = crate::cc::build("reno", &Default::default()).unwrap();
        let mut s = Sender::new(0, &cfg, 1448, 1500, cc);
        let (mut out, mut timers) = (Vec::new(), Vec::new());
        let mut io = Io { out: &mut out, timers: &mut timers };
        s.start(0, &mut io);
        assert!(io.out.iter().all(|p| p.ecn == Ecn::Ect0 && !p.cwr));
        io.out.clear();
        // Slow start: each ACK of one segment adds one to cwnd.
        let mut t = 50_000_000;
        s.on_ack(t, &ack(4, None, 0), &mut io);
        io.out.clear();
        let cwnd_before = s.w.cwnd;
        let mut e = ack(5, None, 0);
        e.ece = true;
        t += 1_000_000;
        s.on_ack(t, &e, &mut io);
        assert_eq!(s.ca_state, CaState::Cwr);
        assert_eq!(s.w.ssthresh, cwnd_before / 2, "Reno's ssthresh from the cwnd at the echo");
        let high_seq = s.high_seq;
        // A second echo in the same window changes nothing.
        e.ack = 6;
        t += 1_000_000;
        s.on_ack(t, &e, &mut io);
        assert_eq!(s.w.ssthresh, cwnd_before / 2);
        assert_eq!(s.stats.retrans_segs, 0, "an echo is not a loss");
        // The first new segment after the echo carries CWR, later ones do not.
        let new: Vec<_> = io.out.iter().collect();
        assert!(!new.is_empty() && new[0].cwr && new[1..].iter().all(|p| !p.cwr), "{new:?}");
        // CWR ends once snd_una passes the window it began in.
        t += 50_000_000;
        s.on_ack(t, &ack(high_seq + 1, None, 0), &mut io);
        assert_eq!(s.ca_state, CaState::Open);
        // cwnd = ssthresh on leaving CWR (tcp_end_cwnd_reduction), then the same ACK's
        // congestion avoidance adds its share.
        assert!((s.w.ssthresh..=s.w.ssthresh + 2).contains(&s.w.cwnd), "cwnd {} ssthresh {}", s.w.cwnd, s.w.ssthresh);
    }

    /// RFC 8985 TLP: with the tail of a window unacknowledged, the timer is a probe 2 srtt +
    /// 2 ms away (not the RTO), on the kernel's timer wheel; the probe sends one new segment
    /// past cwnd; its SACK lets RACK mark the tail lost and fast recovery repair it, with no
    /// timeout.
    #[test]
    fn a_tail_loss_is_probed_and_recovered_without_a_timeout() {
        let mut cfg = FlowConfig::bulk("cubic");
        cfg.size_bytes = Some(40 * 1448);
        let cc = crate::cc::build("cubic", &Default::default()).unwrap();
        let mut s = Sender::new(0, &cfg, 1448, 1500, cc);
        let (mut out, mut timers) = (Vec::new(), Vec::new());
        let mut io = Io { out: &mut out, timers: &mut timers };
        s.start(0, &mut io);
        assert_eq!(s.snd_nxt, 10);
        // Segments 0-7 are ACKed 50 ms later; 8 and 9 are lost. cwnd grows to 18: 16 more go.
        let t1 = 50_000_000;
        s.on_ack(t1, &ack(8, None, 0), &mut io);
        assert_eq!(s.snd_nxt, 26);
        assert!(s.xmit_probe, "the retransmission timer should hold the loss probe");
        let pto = s.timers[TimerKind::Rto as usize].deadline().unwrap();
        // 2 srtt + 2 ms, in whole jiffies on the timer wheel: fired as the tick after its
        // expiry begins (156 ms here, against 152 ms exactly).
        let timeout = 2 * s.rtt.srtt + 2_000_000;
        assert_eq!(pto, s.ticks.wheel_fire_time(t1, timeout, CONFIG_HZ));
        assert!((t1 + timeout..=t1 + timeout + 8_000_000).contains(&pto), "{pto}");
        // Segments 10-25 are lost too: nothing comes back; the probe fires.
        s.on_timer(pto, TimerKind::Rto, &mut io);
        assert_eq!((s.stats.tlp_count, s.stats.rto_count), (1, 0));
        assert_eq!(s.snd_nxt, 27, "the probe is one new segment");
        assert!(!s.xmit_probe);
        // Its SACK arrives: RACK marks 8-25 lost (sent before it, RACK.rtt ago), recovery
        // starts.
        let t2 = pto + 50_000_000;
        s.on_ack(t2, &ack(8, Some((26, 27)), pto), &mut io);
        assert_eq!(s.ca_state, CaState::Recovery);
        assert!(s.stats.retrans_segs > 0);
        assert_eq!(s.stats.rto_count, 0);
    }

    /// A first flight that waits seconds in a deep queue: the probe and the timeouts fire
    /// (the head is retransmitted three times), then the ACK of the original head arrives,
    /// echoing the original's send time. `tcp_clean_rtx_queue` does not advance RACK on it
    /// (`tcp_skb_spurious_retrans`: the echo predates the head's last transmission), so the
    /// rest of the flight, sent before that retransmission, is not marked lost; the timeout
    /// is undone (`tcp_try_undo_loss`) and the flow goes on in Open with its window, as on
    /// Linux 6.18 (8 BBR at 128 kbit/s: loss -> open, cwnd 11 packets, no recovery). An ACK
    /// echoing the last retransmission is no such proof: RACK advances and marks the flight
    /// (F-RTO then sends new data first).
    #[test]
    fn an_ack_for_the_original_of_a_retransmitted_head_does_not_advance_rack() {
        let run = |echo_last_retransmission: bool| {
            let cc = crate::cc::build("reno", &Default::default()).unwrap();
            let mut s = Sender::new(0, &FlowConfig::bulk("reno"), 1448, 1500, cc);
            let (mut out, mut timers) = (Vec::new(), Vec::new());
            let mut io = Io { out: &mut out, timers: &mut timers };
            let t0 = 10_000_000;
            s.start(t0, &mut io);
            assert_eq!(s.snd_nxt, 10);
            // the SYN's RTT stands for the path: 100 ms
            s.rtt.on_sample(100_000_000, 0, 0);
            let mut t = t0;
            while s.stats.rto_count < 3 {
                t = s.timers[TimerKind::Rto as usize].deadline().unwrap();
                s.on_timer(t, TimerKind::Rto, &mut io);
            }
            let last_rexmit = s.stamp_of(0).tx_time;
            assert_eq!(last_rexmit, t);
            let retrans_before = s.stats.retrans_segs;
            let tsecr = if echo_last_retransmission { last_rexmit } else { t0 };
            s.on_ack(t + 300_000_000, &ack(1, None, tsecr), &mut io);
            (s.ca_state, s.lost_out, s.stats.retrans_segs - retrans_before, s.w.cwnd)
        };
        let (state, lost, rexmits, cwnd) = run(false);
        assert_eq!(state, CaState::Open, "the timeout is undone");
        assert_eq!(lost, 0, "nothing of the first flight is marked lost");
        assert_eq!(rexmits, 0, "no retransmission after the undo");
        assert!(cwnd >= 10, "the window before the timeout is restored: {cwnd}");
        let (state, lost, _, _) = run(true);
        assert_eq!((state, lost), (CaState::Loss, 10), "an ACK of the retransmission advances RACK: the rest of the flight and the probe are lost");
    }

    /// The send snapshot is kept once per run of segments: the initial window leaves in two
    /// trains at time 0 with nothing delivered in between, so one record serves all ten, and
    /// each segment still reads its own packets in flight (1 to 10) from it. A record goes
    /// once snd_una has passed its last segment, not before.
    #[test]
    fn a_window_sent_at_once_shares_one_send_record_until_acked() {
        let cc = crate::cc::build("reno", &Default::default()).unwrap();
        let mut s = Sender::new(0, &FlowConfig::bulk("reno"), 1448, 1500, cc);
        let (mut out, mut timers) = (Vec::new(), Vec::new());
        let mut io = Io { out: &mut out, timers: &mut timers };
        s.start(0, &mut io);
        assert_eq!(s.snd_nxt, 10);
        assert_eq!(s.stamps.len(), 1);
        for seq in 0..10 {
            assert_eq!(s.in_flight_at_send(seq, s.seg(seq)), seq as u32 + 1);
            assert_eq!(s.stamp_of(seq).tx_time, 0);
        }
        s.on_ack(50_000_000, &ack(4, None, 0), &mut io);
        let sent_after_ack = s.snd_nxt;
        assert!(sent_after_ack > 10, "the ACK sends more");
        assert_eq!(s.stamp_of(9).last_seq, 9, "the first window's record stays while 4..10 are out");
        for seq in 4..10 {
            assert_eq!(s.in_flight_at_send(seq, s.seg(seq)), seq as u32 + 1);
        }
        for seq in 10..sent_after_ack {
            assert_eq!(s.stamp_of(seq).tx_time, 50_000_000);
        }
        s.on_ack(60_000_000, &ack(10, None, 0), &mut io);
        assert!(s.stamps.iter().all(|st| st.last_seq >= 10), "records of acknowledged segments are gone");
    }

    proptest::proptest! {
        /// Lost segments come out lowest first, as from one min-heap, whatever the order
        /// they were marked in.
        #[test]
        fn lost_queue_pops_as_a_min_heap(ops in proptest::collection::vec(proptest::option::of(0u64..50), 1..200)) {
            let mut q = LostQueue::default();
            let mut heap = BinaryHeap::new();
            for op in ops {
                match op {
                    Some(seq) => {
                        q.push(seq);
                        heap.push(Reverse(seq));
                    }
                    None => {
                        q.pop();
                        heap.pop();
                    }
                }
                proptest::prop_assert_eq!(q.peek(), heap.peek().map(|r| r.0));
            }
        }
    }
}
