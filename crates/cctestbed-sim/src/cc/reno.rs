//! Reno / NewReno congestion avoidance as Linux `tcp_reno_cong_avoid`, `tcp_reno_ssthresh`
//! and `tcp_reno_undo_cwnd` (net/ipv4/tcp_cong.c), i.e. RFC 5681 in packets: slow start adds
//! one packet per packet ACKed up to ssthresh, congestion avoidance one packet per cwnd
//! packets ACKed, and a loss halves cwnd. NewReno's partial-ACK handling (RFC 6582) is
//! subsumed by the transport's SACK/RACK recovery with PRR, as in Linux.
//!
//! Checked line by line against Linux 6.18 (net/ipv4/tcp_cong.c): `tcp_reno_cong_avoid` does
//! nothing unless `tcp_is_cwnd_limited`; `tcp_slow_start` adds the packets ACKed up to ssthresh
//! and hands the rest on; `tcp_cong_avoid_ai(cwnd, acked)` (`Window::cong_avoid_ai`) credits
//! `acked` packets to snd_cwnd_cnt and adds cwnd_cnt / cwnd packets, first applying credits
//! accumulated at a larger w. `acked` is every packet the ACK newly delivered, cumulatively or
//! by SACK (`tcp_cong_control`'s acked_sacked), so delayed or stretched ACKs grow cwnd as fast
//! per RTT as one ACK per segment. `tcp_reno_ssthresh` = max(cwnd / 2, 2);
//! `tcp_reno_undo_cwnd` = max(cwnd, prior_cwnd) (the trait default). Recovery (PRR) and
//! cwnd = ssthresh on leaving it are the transport's (`tcp_cwnd_reduction`,
//! `tcp_end_cwnd_reduction`). The transport resets snd_cwnd_cnt on entering recovery
//! (`tcp_init_cwnd_reduction`) and on an RTO.
//!
//! Deviation from RFC 5681: ssthresh halves cwnd, not FlightSize (Linux does the same).

use super::{CongestionControl, ConnInfo, Window};

crate::cc_params! {
    /// Reno has no tunables.
    pub struct RenoParams {}
}

pub struct Reno {
    _p: RenoParams,
}

impl Reno {
    pub fn new(p: RenoParams) -> Self {
        Reno { _p: p }
    }
}

/// `tcp_reno_ssthresh`.
pub fn reno_ssthresh(cwnd: u32) -> u32 {
    (cwnd >> 1).max(2)
}

/// `tcp_reno_cong_avoid`, shared with algorithms that fall back to Reno growth.
pub fn reno_cong_avoid(info: &ConnInfo, w: &mut Window, acked: u32) {
    let acked = w.slow_start_if_cwnd_limited(info, acked);
    if acked > 0 {
        let cwnd = w.cwnd;
        w.cong_avoid_ai(cwnd, acked);
    }
}

impl CongestionControl for Reno {
    fn name(&self) -> &'static str {
        "reno"
    }

    fn ssthresh(&mut self, _info: &ConnInfo, w: &Window) -> u32 {
        reno_ssthresh(w.cwnd)
    }

    fn cong_avoid(&mut self, info: &ConnInfo, w: &mut Window, acked: u32) {
        reno_cong_avoid(info, w, acked);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::cubic::tests::info;

    /// One RTT of ACKs for a window of `cwnd` packets, `per_ack` packets per ACK (2 with
    /// delayed ACKs); returns cwnd after it.
    fn one_rtt(w: &mut Window, per_ack: u32) -> u32 {
        let acks = w.cwnd / per_ack;
        for _ in 0..acks {
            let i = info(0, w);
            reno_cong_avoid(&i, w, per_ack);
        }
        w.cwnd
    }

    /// `tcp_reno_cong_avoid` counts packets, not ACKs (`tcp_cong_avoid_ai` with `acked`):
    /// congestion avoidance adds one packet per RTT whether every segment or every second one
    /// is ACKed.
    #[test]
    fn congestion_avoidance_adds_one_packet_per_rtt_with_and_without_delayed_acks() {
        for per_ack in [1, 2] {
            let mut w = Window { cwnd: 100, ssthresh: 50, pacing_rate: None, cwnd_cnt: 0, set_app_limited: false };
            for rtt in 1..=50 {
                let before = w.cwnd;
                let after = one_rtt(&mut w, per_ack);
                // cwnd even: exactly one packet per RTT; the odd one left by delayed ACKs carries over.
                assert!(after - before <= 1, "{per_ack}/ACK, RTT {rtt}: {before} -> {after}");
            }
            assert!((149..=150).contains(&w.cwnd), "{per_ack}/ACK: 100 + 50 RTTs gave {}", w.cwnd);
        }
    }

    /// Slow start (`tcp_slow_start`) grows by the packets ACKed, so cwnd doubles per RTT with
    /// delayed ACKs too, and stops at ssthresh with the rest going to congestion avoidance.
    #[test]
    fn slow_start_doubles_per_rtt_and_stops_at_ssthresh() {
        for per_ack in [1, 2] {
            let mut w = Window { cwnd: 10, ssthresh: 100, pacing_rate: None, cwnd_cnt: 0, set_app_limited: false };
            assert_eq!(one_rtt(&mut w, per_ack), 20);
            assert_eq!(one_rtt(&mut w, per_ack), 40);
            assert_eq!(one_rtt(&mut w, per_ack), 80);
            assert_eq!(one_rtt(&mut w, per_ack), 100);
            assert!(w.cwnd_cnt > 0, "ACKs beyond ssthresh are credited to congestion avoidance");
        }
    }

    #[test]
    fn no_growth_unless_cwnd_limited_and_ssthresh_halves() {
        let mut w = Window { cwnd: 10, ssthresh: 100, pacing_rate: None, cwnd_cnt: 0, set_app_limited: false };
        let mut i = info(0, &w);
        i.is_cwnd_limited = false;
        reno_cong_avoid(&i, &mut w, 5);
        assert_eq!(w.cwnd, 10);
        assert_eq!(reno_ssthresh(101), 50);
        assert_eq!(reno_ssthresh(3), 2);
    }
}
