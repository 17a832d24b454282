// SPDX-License-Identifier: GPL-2.0
/*
 * The smallest useful BPF congestion control: Reno (RFC 5681) on the kernel's own helpers.
 * Slow start below ssthresh, one packet per window above it, half the window on loss.
 *
 * `beta_pct` is a parameter: a trial sets it with  params = { beta_pct = 70 }  (the loader
 * writes it into this object's read-only data before loading). The three functions called
 * here are kfuncs the kernel exports to BPF congestion controls (net/ipv4/bpf_tcp_ca.c).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

/* window kept on loss, percent (Reno: 50) */
const volatile __u32 beta_pct = 50;

extern __u32 tcp_slow_start(struct tcp_sock *tp, __u32 acked) __ksym;
extern void tcp_cong_avoid_ai(struct tcp_sock *tp, __u32 w, __u32 acked) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

SEC("struct_ops/reno_ssthresh")
__u32 BPF_PROG(reno_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u32 w = tp->snd_cwnd * beta_pct / 100;

	return w > 2 ? w : 2;
}

SEC("struct_ops/reno_cong_avoid")
void BPF_PROG(reno_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;

	if (tp->snd_cwnd < tp->snd_ssthresh) {
		acked = tcp_slow_start(tp, acked);
		if (!acked)
			return;
	}
	tcp_cong_avoid_ai(tp, tp->snd_cwnd, acked);
}

SEC("struct_ops/reno_undo_cwnd")
__u32 BPF_PROG(reno_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops reno = {
	.ssthresh = (void *)reno_ssthresh,
	.cong_avoid = (void *)reno_cong_avoid,
	.undo_cwnd = (void *)reno_undo_cwnd,
	.name = "bpf_reno",
};
