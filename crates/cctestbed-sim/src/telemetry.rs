//! Time series collected at a fixed interval into pre-sized columnar vectors (no per-row
//! objects), handed to Python as whole arrays.

use crate::cc::CaState;
use crate::config::Nanos;
use crate::link::Bottleneck;
use crate::qdisc::{DropCause, MarkCause};
use crate::tcp::receiver::Receiver;
use crate::tcp::sender::Sender;

/// Per-flow columns: one row per flow per sample, ordered by time then flow.
#[derive(Debug, Default, Clone)]
pub struct FlowSeries {
    pub time_s: Vec<f64>,
    pub flow: Vec<u32>,
    pub goodput_bps: Vec<f64>,
    pub delivered_bytes: Vec<u64>,
    pub send_rate_bps: Vec<f64>,
    pub sent_bytes: Vec<u64>,
    pub rtt_ms: Vec<f64>,
    pub srtt_ms: Vec<f64>,
    pub min_rtt_ms: Vec<f64>,
    pub cwnd_pkts: Vec<u32>,
    pub cwnd_bytes: Vec<u64>,
    pub inflight_pkts: Vec<u32>,
    pub inflight_bytes: Vec<u64>,
    pub pacing_rate_bps: Vec<f64>,
    pub sent_segs: Vec<u64>,
    pub retrans_segs: Vec<u64>,
    pub lost_segs: Vec<u64>,
    pub rto_count: Vec<u64>,
    pub state: Vec<u16>,
    pub ca_state: Vec<u16>,
    /// Algorithm-specific estimates: (`cc.<key>`, values), NaN where a flow lacks the key.
    pub cc: Vec<(String, Vec<f64>)>,
}

/// Router columns, one row per sample; counters are cumulative.
#[derive(Debug, Clone)]
pub struct RouterSeries {
    pub time_s: Vec<f64>,
    pub queue_bytes: Vec<u64>,
    pub queue_pkts: Vec<u64>,
    pub capacity_bps: Vec<u64>,
    pub arrivals_pkts: Vec<u64>,
    pub arrival_bytes: Vec<u64>,
    pub departures_pkts: Vec<u64>,
    pub departed_bytes: Vec<u64>,
    pub departed_payload_bytes: Vec<u64>,
    /// `drops_<cause>` for every [`DropCause`], in [`DropCause::ALL`] order.
    pub drops: Vec<(String, Vec<u64>)>,
    /// `marks_<cause>` (packets set to CE) for every [`MarkCause`].
    pub marks: Vec<(String, Vec<u64>)>,
    /// Sojourn time of the packets that left the queue during the interval: mean and
    /// largest, NaN if none left.
    pub sojourn_mean_ms: Vec<f64>,
    pub sojourn_max_ms: Vec<f64>,
}

impl Default for RouterSeries {
    fn default() -> Self {
        RouterSeries {
            time_s: vec![],
            queue_bytes: vec![],
            queue_pkts: vec![],
            capacity_bps: vec![],
            arrivals_pkts: vec![],
            arrival_bytes: vec![],
            departures_pkts: vec![],
            departed_bytes: vec![],
            departed_payload_bytes: vec![],
            drops: DropCause::ALL.iter().map(|c| (format!("drops_{}", c.name()), vec![])).collect(),
            marks: MarkCause::ALL.iter().map(|c| (format!("marks_{}", c.name()), vec![])).collect(),
            sojourn_mean_ms: vec![],
            sojourn_max_ms: vec![],
        }
    }
}

impl RouterSeries {
    /// The cumulative drop column of `cause`.
    pub fn drops_of(&self, cause: DropCause) -> &[u64] {
        &self.drops[cause as usize].1
    }

    /// Every drop, whatever its cause, at sample `i`.
    pub fn drops_total(&self, i: usize) -> u64 {
        self.drops.iter().map(|(_, v)| v[i]).sum()
    }

    pub fn marks_of(&self, cause: MarkCause) -> &[u64] {
        &self.marks[cause as usize].1
    }
}

pub struct Telemetry {
    pub flows: FlowSeries,
    pub router: RouterSeries,
    pub labels: Vec<&'static str>,
    interval: Nanos,
    prev_delivered: Vec<u64>,
    prev_sent: Vec<u64>,
    prev_rtt: Vec<(f64, u64)>,
    prev_sojourn: (i128, u64),
    /// For each flow, the `cc` column index of each of its telemetry keys.
    key_cols: Vec<Vec<usize>>,
    scratch: Vec<f64>,
}

impl Telemetry {
    pub fn new(senders: &[Sender], interval: Nanos, duration: Nanos) -> Self {
        let samples = (duration / interval) as usize + 1;
        let rows = samples * senders.len();
        let mut cc: Vec<(String, Vec<f64>)> = Vec::new();
        let mut key_cols = Vec::new();
        for s in senders {
            let mut cols = Vec::new();
            for k in s.cc.telemetry_keys() {
                let name = format!("cc.{k}");
                let i = match cc.iter().position(|(n, _)| *n == name) {
                    Some(i) => i,
                    None => {
                        cc.push((name, Vec::with_capacity(rows)));
                        cc.len() - 1
                    }
                };
                cols.push(i);
            }
            key_cols.push(cols);
        }
        macro_rules! cap {
            ($($f:ident),*) => { FlowSeries { $($f: Vec::with_capacity(rows),)* cc } };
        }
        let flows = cap!(
            time_s, flow, goodput_bps, delivered_bytes, send_rate_bps, sent_bytes, rtt_ms, srtt_ms,
            min_rtt_ms, cwnd_pkts, cwnd_bytes, inflight_pkts, inflight_bytes, pacing_rate_bps,
            sent_segs, retrans_segs, lost_segs, rto_count, state, ca_state
        );
        let n = senders.len();
        Telemetry {
            flows,
            router: RouterSeries::default(),
            labels: vec!["open", "disorder", "recovery", "loss", "slow_start", "cong_avoid", "idle"],
            interval,
            prev_delivered: vec![0; n],
            prev_sent: vec![0; n],
            prev_rtt: vec![(0.0, 0); n],
            prev_sojourn: (0, 0),
            key_cols,
            scratch: Vec::new(),
        }
    }

    fn label(&mut self, name: &'static str) -> u16 {
        match self.labels.iter().position(|l| *l == name) {
            Some(i) => i as u16,
            None => {
                self.labels.push(name);
                (self.labels.len() - 1) as u16
            }
        }
    }

    pub fn sample(&mut self, now: Nanos, senders: &[Sender], receivers: &[Receiver], started: &[bool], b: &mut Bottleneck) {
        let t = now as f64 / 1e9;
        let dt = self.interval as f64 / 1e9;
        for (i, (s, r)) in senders.iter().zip(receivers).enumerate() {
            let f = &mut self.flows;
            f.time_s.push(t);
            f.flow.push(i as u32);
            let d = r.delivered_bytes;
            f.goodput_bps.push((d - self.prev_delivered[i]) as f64 * 8.0 / dt);
            self.prev_delivered[i] = d;
            f.delivered_bytes.push(d);
            let sent = s.stats.sent_payload_bytes;
            f.send_rate_bps.push((sent - self.prev_sent[i]) as f64 * 8.0 / dt);
            self.prev_sent[i] = sent;
            f.sent_bytes.push(sent);
            let (sum, n) = (s.stats.rtt_sum, s.stats.rtt_n);
            let (psum, pn) = self.prev_rtt[i];
            f.rtt_ms.push(if n > pn { (sum - psum) / (n - pn) as f64 / 1e6 } else { f64::NAN });
            self.prev_rtt[i] = (sum, n);
            let ms = |x: Nanos| if x > 0 { x as f64 / 1e6 } else { f64::NAN };
            f.srtt_ms.push(ms(s.rtt.srtt));
            f.min_rtt_ms.push(ms(s.rtt.min_rtt));
            let mss = s.mss() as u64;
            f.cwnd_pkts.push(s.w.cwnd);
            f.cwnd_bytes.push(s.w.cwnd as u64 * mss);
            let inflight = s.packets_in_flight();
            f.inflight_pkts.push(inflight);
            f.inflight_bytes.push(inflight as u64 * mss);
            f.pacing_rate_bps.push(s.pacing_rate().filter(|r| r.is_finite()).map_or(f64::NAN, |r| r * 8.0));
            f.sent_segs.push(s.stats.sent_pkts);
            f.retrans_segs.push(s.stats.retrans_segs);
            f.lost_segs.push(s.stats.lost_segs);
            f.rto_count.push(s.stats.rto_count);
            let ca = match s.ca_state {
                CaState::Open => "open",
                CaState::Disorder => "disorder",
                CaState::Cwr => "cwr",
                CaState::Recovery => "recovery",
                CaState::Loss => "loss",
            };
            let state = if !started[i] || s.is_done() {
                "idle"
            } else {
                match s.cc.state_name() {
                    Some(n) => n,
                    None if matches!(s.ca_state, CaState::Recovery | CaState::Loss) => ca,
                    None if s.w.in_slow_start() => "slow_start",
                    None => "cong_avoid",
                }
            };
            let (st, cs) = (self.label(state), self.label(ca));
            self.flows.state.push(st);
            self.flows.ca_state.push(cs);
            self.scratch.clear();
            s.cc.telemetry(&mut self.scratch);
            let row = self.flows.time_s.len();
            for (j, &v) in self.scratch.iter().enumerate() {
                if let Some(&c) = self.key_cols[i].get(j) {
                    self.flows.cc[c].1.push(v);
                }
            }
            for (_, col) in self.flows.cc.iter_mut() {
                if col.len() < row {
                    col.push(f64::NAN);
                }
            }
        }
        let r = &mut self.router;
        let (qp, qb) = b.queue_len();
        let st = *b.stats();
        r.time_s.push(t);
        r.queue_bytes.push(qb);
        r.queue_pkts.push(qp);
        r.capacity_bps.push(b.capacity_bps(now, self.interval));
        r.arrivals_pkts.push(st.arrivals_pkts);
        r.arrival_bytes.push(st.arrival_bytes);
        r.departures_pkts.push(st.departures_pkts);
        r.departed_bytes.push(st.departed_bytes);
        r.departed_payload_bytes.push(st.departed_payload_bytes);
        for (i, (_, col)) in r.drops.iter_mut().enumerate() {
            col.push(st.drops.0[i]);
        }
        for (i, (_, col)) in r.marks.iter_mut().enumerate() {
            col.push(st.marks.0[i]);
        }
        let (sum, n) = (b.sojourn.sum_ns, b.sojourn.count);
        let (psum, pn) = self.prev_sojourn;
        self.prev_sojourn = (sum, n);
        let max = b.take_sojourn_max();
        if n > pn {
            r.sojourn_mean_ms.push((sum - psum) as f64 / (n - pn) as f64 / 1e6);
            r.sojourn_max_ms.push(max as f64 / 1e6);
        } else {
            r.sojourn_mean_ms.push(f64::NAN);
            r.sojourn_max_ms.push(f64::NAN);
        }
    }
}
