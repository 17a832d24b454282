//! Reno / NewReno congestion avoidance as Linux `tcp_reno_cong_avoid`, `tcp_reno_ssthresh`
//! and `tcp_reno_undo_cwnd` (net/ipv4/tcp_cong.c), i.e. RFC 5681 in packets: slow start adds
//! one packet per packet ACKed up to ssthresh, congestion avoidance one packet per cwnd
//! packets ACKed, and a loss halves cwnd. NewReno's partial-ACK handling (RFC 6582) is
//! subsumed by the transport's SACK/RACK recovery with PRR, as in Linux.
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
