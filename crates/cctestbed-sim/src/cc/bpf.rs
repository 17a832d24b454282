//! A congestion control given as a BPF `struct_ops` object: the same ELF file the kernel
//! backend registers with `bpftool struct_ops register`, run by [`ccbpf`]'s interpreter.
//!
//! Follows Linux 6.18: the transport calls the object's ops where `tcp_input.c` /
//! `tcp_output.c` call `icsk->icsk_ca_ops` (the same call points as every algorithm here, see
//! [`super::CongestionControl`]), with the socket view filled from the sender before each call
//! and the fields `net/ipv4/bpf_tcp_ca.c` lets a program write read back after it:
//! - before: `snd_cwnd`, `snd_ssthresh`, `snd_cwnd_cnt`, `sk_pacing_rate` (the algorithm's
//!   own, or the one `tcp_update_pacing_rate` keeps for it), `sk_pacing_status`,
//!   `icsk_ca_state`, `ecn_flags`' `TCP_ECN_OK` (the flow negotiated ECN), the counters (`delivered`, `lost`, `packets_out`, `sacked_out`, ...), the
//!   clocks (`tcp_mstamp` and `delivered_mstamp` in µs, `tcp_clock_cache` and `tcp_wstamp_ns`
//!   in ns, `lsndtime` in jiffies), `srtt_us` (<< 3 as Linux keeps it) and `rtt_min`;
//! - after: `snd_cwnd`, `snd_ssthresh`, `snd_cwnd_cnt`, `sk_pacing_rate` when the program
//!   changed it, `sk_pacing_status` (SK_PACING_NEEDED turns pacing on, as `tcp_needs_internal_pacing`),
//!   `app_limited`. `icsk_ca_priv` and sk_storage persist in the instance.
//!
//! Deviations:
//! - `sndbuf_expand` is called where `tcp_init_buffer_space` calls it (after `init`, at
//!   establishment) and not where `tcp_new_space` would (no send buffer is modelled), its result
//!   changing nothing; `release` when a sized flow's data is all acknowledged and, for a flow
//!   still open, at the end of the trial (see [`super::CongestionControl::release`]);
//!   `in_ack_event` is called on the ACKs of ECN-capable flows only, with `CA_ACK_ECE` or 0, and
//!   `cwnd_event` with `CA_EVENT_TX_START` and `CA_EVENT_CWND_RESTART` (the events the
//!   transport raises for every algorithm).
//! - Sequence numbers are the simulator's segment counts times the MSS (wrapping at 2^32);
//!   `rtt_min` holds one sample, the minimum RTT over the connection, stamped now.
//! - A write to `app_limited` is applied as the transport's own `tp->app_limited = delivered +
//!   in_flight ?: 1` (what tcp_bbr.c and every known object write), not the value written.
//! - A run-time error (an access outside what the program was given, the instruction budget)
//!   ends the trial with the error, which names the program, the op and the instruction; the
//!   algorithm leaves cwnd and pacing as they were from that moment.

use super::{AckSample, CaEvent, CaState, CongestionControl, ConnInfo, RateSample, Window};
use crate::jiffies::CONFIG_HZ;
use crate::rng::SimRng;
use crate::tcp::tso;
use ccbpf::{Env, Instance, Object, Op};
use std::cell::RefCell;
use std::sync::{Arc, Mutex};

/// `enum sk_pacing` (include/net/sock.h).
const SK_PACING_NONE: u32 = 0;
/// `enum tcp_ca_ack_event_flags`: the ACK carried ECE.
const CA_ACK_ECE: u64 = 1 << 2;
/// `tp->ecn_flags`: ECN was negotiated.
const TCP_ECN_OK: u8 = 0x1;
/// `tcp_congestion_ops.flags`: the algorithm needs ECN (DCTCP).
const TCP_CONG_NEEDS_ECN: u32 = 0x2;

/// Where a run-time error of any flow's program is kept until the simulation ends the trial.
pub type BpfFault = Arc<Mutex<Option<String>>>;

/// The `cc` of a flow that runs a BPF object (`bpf:PATH` in a trial file).
pub const NAME: &str = "bpf";

/// An object file's bytes, carried in the JSON config as hexadecimal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectBytes(pub Vec<u8>);

impl serde::Serialize for ObjectBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(self.0.len() * 2);
        for b in &self.0 {
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 15) as usize] as char);
        }
        s.serialize_str(&out)
    }
}

impl<'de> serde::Deserialize<'de> for ObjectBytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let digit = |c: u8| (c as char).to_digit(16).map(|v| v as u8);
        if text.len() % 2 != 0 {
            return Err(serde::de::Error::custom("bpf_object: an odd number of hexadecimal digits"));
        }
        text.as_bytes()
            .chunks(2)
            .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
            .collect::<Option<Vec<u8>>>()
            .map(ObjectBytes)
            .ok_or_else(|| serde::de::Error::custom("bpf_object: not hexadecimal"))
    }
}

/// Loads (parses, relocates, checks) a flow's object; errors read "cc: bpf object: ...".
pub fn load(bytes: Option<&ObjectBytes>) -> Result<Arc<Object>, String> {
    let bytes = bytes.ok_or_else(|| "cc: 'bpf': needs bpf_object, the object file's bytes".to_string())?;
    Object::load(&bytes.0).map(Arc::new).map_err(|e| format!("cc: bpf object: {e}"))
}

fn record(fault: &BpfFault, object: &Object, e: ccbpf::RunError) {
    let mut f = fault.lock().unwrap_or_else(|p| p.into_inner());
    if f.is_none() {
        *f = Some(format!("BPF congestion control {}: {e}", object.name()));
    }
}

pub struct BpfCc {
    object: Arc<Object>,
    /// In a cell only for `min_tso_segs`, which the transport asks through `&self`.
    inst: RefCell<Instance>,
    env: Env,
    name: &'static str,
    fault: BpfFault,
    failed: bool,
}

impl BpfCc {
    pub fn new(object: Arc<Object>, fault: BpfFault) -> Self {
        let inst = RefCell::new(object.instance());
        // The name is the object's own (tcp_congestion_ops.name); names live for the process.
        let name: &'static str = Box::leak(format!("bpf:{}", object.name()).into_boxed_str());
        BpfCc { object, inst, env: Env::default(), name, fault, failed: false }
    }

    /// Fills the socket view from what the transport knows (`ConnInfo`, `Window`).
    fn fill(&mut self, info: &ConnInfo, w: &Window) {
        let mss = info.mss.max(1) as u64;
        let inst = self.inst.get_mut();
        let s = &mut *inst.sock;
        s.snd_cwnd = w.cwnd;
        s.snd_ssthresh = w.ssthresh;
        s.snd_cwnd_cnt = w.cwnd_cnt;
        s.snd_cwnd_clamp = u32::MAX;
        s.mss_cache = info.mss;
        s.srtt_us = ((info.srtt_ns / 1000) as u32) << 3;
        let min_rtt_us = if info.min_rtt_ns > 0 { (info.min_rtt_ns / 1000) as u32 } else { u32::MAX };
        let now_j = info.ticks.jiffies(info.now, CONFIG_HZ) as u32;
        for m in s.rtt_min.s.iter_mut() {
            m.t = now_j;
            m.v = min_rtt_us;
        }
        s.packets_out = info.packets_out;
        s.sacked_out = info.sacked_out;
        s.lost_out = info.lost_out;
        s.retrans_out = info.retrans_out;
        s.max_packets_out = info.packets_out;
        s.is_cwnd_limited = info.is_cwnd_limited as u8;
        s.delivered = info.delivered as u32;
        s.delivered_ce = info.delivered_ce as u32;
        s.lost = info.lost as u32;
        s.app_limited = info.app_limited as u32;
        s.delivered_mstamp = (info.delivered_mstamp_ns / 1000) as u64;
        s.tcp_mstamp = (info.now / 1000) as u64;
        s.tcp_clock_cache = info.now as u64;
        s.tcp_wstamp_ns = info.wstamp_ns as u64;
        s.snd_nxt = (info.snd_nxt * mss) as u32;
        s.snd_una = ack_seq(info);
        s.lsndtime = info.ticks.jiffies(info.last_send_ns, CONFIG_HZ) as u32;
        s.inet_conn.icsk_ca_state = ca_state(info.ca_state);
        // TCP_ECN_OK when the connection negotiated ECN; the other bits are the program's.
        s.ecn_flags = (s.ecn_flags & !TCP_ECN_OK) | if info.ecn { TCP_ECN_OK } else { 0 };
        let sk = &mut s.inet_conn.icsk_inet.sk;
        sk.sk_max_pacing_rate = info.max_pacing_rate;
        sk.sk_pacing_shift = tso::SK_PACING_SHIFT as u8;
        sk.sk_gso_max_size = tso::SK_GSO_MAX_SIZE as u32;
        sk.sk_pacing_rate = info.sk_pacing_rate;
        self.env.now_ns = info.now as u64;
        self.env.jiffies = info.ticks.jiffies(info.now, CONFIG_HZ);
    }

    /// Reads back what the program may have written.
    fn read_back(&mut self, w: &mut Window, pacing_before: u64, app_limited_before: u32) {
        let s = &*self.inst.get_mut().sock;
        w.cwnd = s.snd_cwnd;
        w.ssthresh = s.snd_ssthresh;
        w.cwnd_cnt = s.snd_cwnd_cnt;
        let rate = s.inet_conn.icsk_inet.sk.sk_pacing_rate;
        if rate != pacing_before || w.pacing_rate.is_some() {
            w.pacing_rate = Some(rate as f64);
        }
        if s.app_limited != app_limited_before {
            w.set_app_limited = true;
        }
    }

    /// One op: fill, run, read back. Returns r0, or None when the object lacks the op or a
    /// run-time error ended this flow's algorithm (recorded for the simulation to report).
    fn call(&mut self, op: Op, info: &ConnInfo, w: &mut Window, args: &[u64], ack: Option<&ccbpf::AckSample>,
            rs: Option<&ccbpf::RateSample>) -> Option<u64> {
        if self.failed || !self.object.has_op(op) {
            return None;
        }
        self.fill(info, w);
        let sock = &self.inst.get_mut().sock;
        let pacing_before = sock.inet_conn.icsk_inet.sk.sk_pacing_rate;
        let app_limited_before = sock.app_limited;
        let r = self.inst.get_mut().call(op, args, ack, rs, &mut self.env);
        match r {
            Ok(r0) => {
                self.read_back(w, pacing_before, app_limited_before);
                r0
            }
            Err(e) => {
                self.fail(e);
                None
            }
        }
    }

    fn fail(&mut self, e: ccbpf::RunError) {
        self.failed = true;
        record(&self.fault, &self.object, e);
    }
}

/// The sequence number an ACK up to `snd_una` carries: segments times the MSS, wrapping at 2^32.
fn ack_seq(info: &ConnInfo) -> u32 {
    info.snd_una.wrapping_mul(info.mss.max(1) as u64) as u32
}

/// `enum tcp_ca_state` values.
fn ca_state(s: CaState) -> u8 {
    match s {
        CaState::Open => 0,
        CaState::Disorder => 1,
        CaState::Cwr => 2,
        CaState::Recovery => 3,
        CaState::Loss => 4,
    }
}

fn rate_sample(rs: &RateSample) -> ccbpf::RateSample {
    ccbpf::RateSample {
        prior_mstamp: (rs.prior_time / 1000) as u64,
        prior_delivered: rs.prior_delivered as u32,
        prior_delivered_ce: 0,
        delivered: rs.delivered as i32,
        delivered_ce: rs.delivered_ce as i32,
        interval_us: if rs.interval_ns < 0 { -1 } else { rs.interval_ns / 1000 },
        snd_interval_us: 0,
        rcv_interval_us: 0,
        rtt_us: if rs.rtt_ns < 0 { -1 } else { rs.rtt_ns / 1000 },
        losses: rs.losses as i32,
        acked_sacked: rs.acked_sacked,
        prior_in_flight: rs.prior_in_flight,
        last_end_seq: 0,
        is_app_limited: rs.is_app_limited,
        is_retrans: rs.is_retrans,
        is_ack_delayed: rs.is_ack_delayed,
        ..Default::default()
    }
}

impl CongestionControl for BpfCc {
    fn name(&self) -> &'static str {
        self.name
    }

    /// `bpf_get_prandom_u32` draws from a generator seeded here, from the trial seed.
    fn seed(&mut self, mut rng: SimRng) {
        self.env.prandom = rng.below(u32::MAX);
    }

    fn init(&mut self, info: &ConnInfo, w: &mut Window) {
        self.call(Op::Init, info, w, &[], None, None);
    }

    fn controls_cwnd(&self) -> bool {
        self.object.has_op(Op::CongControl)
    }

    /// Pacing as Linux decides it without fq: when the object asked for it in `init`
    /// (`sk_pacing_status` = SK_PACING_NEEDED), which the transport reads once init has run.
    fn wants_pacing(&self) -> bool {
        self.inst.borrow().sock.inet_conn.icsk_inet.sk.sk_pacing_status != SK_PACING_NONE
    }

    fn ssthresh(&mut self, info: &ConnInfo, w: &Window) -> u32 {
        let mut w2 = *w;
        match self.call(Op::Ssthresh, info, &mut w2, &[], None, None) {
            Some(r) => r as u32,
            None => w.ssthresh,
        }
    }

    fn cong_avoid(&mut self, info: &ConnInfo, w: &mut Window, acked: u32) {
        self.call(Op::CongAvoid, info, w, &[ack_seq(info) as u64, acked as u64], None, None);
    }

    fn cong_control(&mut self, info: &ConnInfo, w: &mut Window, rs: &RateSample) {
        self.call(Op::CongControl, info, w, &[ack_seq(info) as u64, 0], None, Some(&rate_sample(rs)));
    }

    fn pkts_acked(&mut self, info: &ConnInfo, w: &mut Window, sample: &AckSample) {
        let s = ccbpf::AckSample {
            pkts_acked: sample.pkts_acked,
            rtt_us: if sample.rtt_ns < 0 { -1 } else { (sample.rtt_ns / 1000) as i32 },
            in_flight: sample.in_flight,
        };
        self.call(Op::PktsAcked, info, w, &[], Some(&s), None);
    }

    fn in_ack_event(&mut self, info: &ConnInfo, w: &mut Window, ece: bool) {
        self.call(Op::InAckEvent, info, w, &[if ece { CA_ACK_ECE } else { 0 }], None, None);
    }

    fn wants_ce_events(&self) -> bool {
        self.object.flags() & TCP_CONG_NEEDS_ECN != 0
    }

    fn set_state(&mut self, info: &ConnInfo, w: &mut Window, new: CaState) {
        self.call(Op::SetState, info, w, &[ca_state(new) as u64], None, None);
    }

    fn cwnd_event(&mut self, info: &ConnInfo, w: &mut Window, ev: CaEvent) {
        let code = match ev {
            CaEvent::TxStart => 0,
            CaEvent::CwndRestart => 1,
        };
        self.call(Op::CwndEvent, info, w, &[code], None, None);
    }

    /// `min_tso_segs` on the socket as the last op left it (the transport asks it while
    /// building a train, between ACKs); an error here is reported like any other.
    fn min_tso_segs(&self) -> Option<u32> {
        if self.failed || !self.object.has_op(Op::MinTsoSegs) {
            return None;
        }
        let mut env = Env { now_ns: self.env.now_ns, jiffies: self.env.jiffies, ..Env::default() };
        match self.inst.borrow_mut().call(Op::MinTsoSegs, &[], None, None, &mut env) {
            Ok(r) => r.map(|r| r as u32),
            Err(e) => {
                record(&self.fault, &self.object, e);
                None
            }
        }
    }

    fn sndbuf_expand(&mut self, info: &ConnInfo, w: &mut Window) -> Option<u32> {
        self.call(Op::SndbufExpand, info, w, &[], None, None).map(|r| r as u32)
    }

    /// The socket is going: what the program writes into it is read back nowhere.
    fn release(&mut self, info: &ConnInfo, w: &Window) {
        let mut w2 = *w;
        self.call(Op::Release, info, &mut w2, &[], None, None);
    }

    fn undo_cwnd(&mut self, info: &ConnInfo, w: &Window, prior_cwnd: u32) -> u32 {
        let mut w2 = *w;
        self.inst.get_mut().sock.prior_cwnd = prior_cwnd;
        match self.call(Op::UndoCwnd, info, &mut w2, &[], None, None) {
            Some(r) => r as u32,
            None => w.cwnd.max(prior_cwnd),
        }
    }
}
