//! DCTCP, Data Center TCP (RFC 8257), as Linux `net/ipv4/tcp_dctcp.c` runs it over Reno.
//!
//! The model in four lines: the receiver echoes exactly which packets were CE-marked
//! (per-packet ECE, [`crate::tcp::receiver::EcnEcho::PerPacket`]); once per window of data
//! (`next_seq`) the sender folds the marked fraction F of what was delivered into
//! `alpha <- (1 - g) alpha + g F` with g = 1/2^`dctcp_shift_g`; on an ECN echo the window is
//! cut in proportion, `cwnd (1 - alpha/2)` (`dctcp_ssthresh`), at most once per window (the
//! transport's CWR state); a loss still halves it (`dctcp_react_to_loss`). Growth is Reno's.
//!
//! Per ACK, in Linux's order: deliveries counted (`tp->delivered`, `tp->delivered_ce`) ->
//! `dctcp_update_alpha` (`in_ack_event`) -> the transport's ECN/loss response, which calls
//! `dctcp_ssthresh` on entering CWR or Recovery and `dctcp_state` on Recovery ->
//! `tcp_reno_cong_avoid` or PRR.
//!
//! alpha is kept as Linux keeps it, an integer in [0, DCTCP_MAX_ALPHA = 1024]; it starts at
//! `dctcp_alpha_on_init` = 1024 (so the first reaction halves the window).
//!
//! Deviations: a flow without ECN (`ecn` not set in its group) falls back to Reno, as Linux's
//! `dctcp_reno` does when ECN is not negotiated; the `CA_EVENT_LOSS` reaction on a timeout
//! is the transport's ssthresh call (Linux resets ssthresh there too).

use super::reno::{reno_cong_avoid, reno_ssthresh};
use super::{CaState, CongestionControl, ConnInfo, Window};

/// `DCTCP_MAX_ALPHA`: alpha = 1.0.
pub const DCTCP_MAX_ALPHA: u32 = 1024;

crate::cc_params! {
    /// The module parameters of tcp_dctcp.c.
    pub struct DctcpParams {
        /// `dctcp_shift_g`: the EWMA gain is g = 1/2^shift (Linux: 4, range 0-10).
        dctcp_shift_g: 4.0, 0.0, 10.0;
        /// `dctcp_alpha_on_init`: alpha at start, in 1/1024 (Linux: 1024).
        dctcp_alpha_on_init: 1024.0, 0.0, 1024.0;
    }
}

pub struct Dctcp {
    p: DctcpParams,
    /// `dctcp_alpha`, in 1/1024.
    pub alpha: u32,
    /// `next_seq`: alpha is updated once snd_una reaches it (one window).
    next_seq: u64,
    old_delivered: u64,
    old_delivered_ce: u64,
    /// `loss_cwnd`: cwnd at the last reduction, for undo.
    loss_cwnd: u32,
    /// ECN was negotiated (`TCP_ECN_OK`); else `dctcp_reno`.
    ecn_ok: bool,
    initialised: bool,
}

impl Dctcp {
    pub fn new(p: DctcpParams) -> Self {
        Dctcp {
            alpha: (p.dctcp_alpha_on_init as u32).min(DCTCP_MAX_ALPHA),
            p,
            next_seq: 0,
            old_delivered: 0,
            old_delivered_ce: 0,
            loss_cwnd: 0,
            ecn_ok: false,
            initialised: false,
        }
    }

    /// `dctcp_reset`: a new observation window starts now.
    fn reset(&mut self, info: &ConnInfo) {
        self.next_seq = info.snd_nxt;
        self.old_delivered = info.delivered;
        self.old_delivered_ce = info.delivered_ce;
    }
}

impl CongestionControl for Dctcp {
    fn name(&self) -> &'static str {
        "dctcp"
    }

    /// `dctcp_init`.
    fn init(&mut self, info: &ConnInfo, _w: &mut Window) {
        self.ecn_ok = info.ecn;
        self.alpha = (self.p.dctcp_alpha_on_init as u32).min(DCTCP_MAX_ALPHA);
        self.loss_cwnd = 0;
        self.reset(info);
        self.initialised = true;
    }

    fn wants_ce_events(&self) -> bool {
        true
    }

    /// `dctcp_ssthresh`: cwnd - cwnd * alpha / 2, at least 2.
    fn ssthresh(&mut self, _info: &ConnInfo, w: &Window) -> u32 {
        if !self.ecn_ok {
            return reno_ssthresh(w.cwnd);
        }
        self.loss_cwnd = w.cwnd;
        let cut = ((w.cwnd as u64 * self.alpha as u64) >> 11) as u32;
        (w.cwnd - cut).max(2)
    }

    fn cong_avoid(&mut self, info: &ConnInfo, w: &mut Window, acked: u32) {
        reno_cong_avoid(info, w, acked);
    }

    /// `dctcp_update_alpha`: once per window, alpha <- alpha - alpha/2^g + F/2^g.
    fn in_ack_event(&mut self, info: &ConnInfo, _w: &mut Window, _ece: bool) {
        if !self.ecn_ok {
            return;
        }
        if !self.initialised {
            self.reset(info);
            self.initialised = true;
        }
        if info.snd_una < self.next_seq {
            return;
        }
        let g = self.p.dctcp_shift_g as u32;
        let mut alpha = self.alpha;
        // min_not_zero(alpha, alpha >> g): with g = 0 all of alpha decays.
        let decay = if alpha >> g == 0 { alpha } else { alpha >> g };
        alpha -= decay.min(alpha);
        let delivered_ce = info.delivered_ce - self.old_delivered_ce;
        if delivered_ce > 0 {
            let delivered = (info.delivered - self.old_delivered).max(1);
            let f = (delivered_ce << (10 - g)) / delivered;
            alpha = (alpha as u64 + f).min(DCTCP_MAX_ALPHA as u64) as u32;
        }
        self.alpha = alpha;
        self.reset(info);
    }

    /// `dctcp_state`: entering Recovery (a loss) halves the window as Reno would.
    fn set_state(&mut self, info: &ConnInfo, w: &mut Window, new: CaState) {
        if self.ecn_ok && new == CaState::Recovery && info.ca_state != CaState::Recovery {
            self.loss_cwnd = w.cwnd;
            w.ssthresh = reno_ssthresh(w.cwnd);
        }
    }

    /// `dctcp_cwnd_undo`.
    fn undo_cwnd(&mut self, _info: &ConnInfo, w: &Window, prior_cwnd: u32) -> u32 {
        if self.ecn_ok {
            w.cwnd.max(self.loss_cwnd)
        } else {
            w.cwnd.max(prior_cwnd)
        }
    }

    fn telemetry_keys(&self) -> &'static [&'static str] {
        &["alpha"]
    }

    fn telemetry(&self, out: &mut Vec<f64>) {
        out.push(self.alpha as f64 / DCTCP_MAX_ALPHA as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::cubic::tests::info;

    fn window(cwnd: u32) -> Window {
        Window { cwnd, ssthresh: u32::MAX, pacing_rate: None, cwnd_cnt: 0, set_app_limited: false }
    }

    #[test]
    fn alpha_tracks_the_marked_fraction_and_sets_the_cut() {
        let mut d = Dctcp::new(DctcpParams::default());
        let mut w = window(100);
        let mut i = info(0, &w);
        i.ecn = true;
        d.init(&i, &mut w);
        // Windows of 100 packets, 25 % of them marked: alpha -> 0.25 (256 of 1024).
        let (mut delivered, mut ce, mut una) = (0u64, 0u64, 0u64);
        for _ in 0..200 {
            delivered += 100;
            ce += 25;
            una += 100;
            i.delivered = delivered;
            i.delivered_ce = ce;
            i.snd_una = una;
            i.snd_nxt = una + 100;
            d.in_ack_event(&i, &mut w, true);
        }
        assert!((d.alpha as i64 - 256).abs() <= 16, "alpha {}", d.alpha);
        // ssthresh = cwnd (1 - alpha/2) = 100 * 0.875.
        let ss = d.ssthresh(&i, &w);
        assert!((87..=89).contains(&ss), "ssthresh {ss}");
    }

    #[test]
    fn without_ecn_it_is_reno() {
        let mut d = Dctcp::new(DctcpParams::default());
        let mut w = window(100);
        let i = info(0, &w);
        d.init(&i, &mut w);
        assert_eq!(d.ssthresh(&i, &w), 50);
    }
}
