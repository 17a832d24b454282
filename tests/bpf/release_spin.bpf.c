// SPDX-License-Identifier: GPL-2.0
/*
 * Reno (the kernel's own functions) with a release that never returns: tearing the
 * connection down (at the end of a flow, or of the trial) runs it until its instruction
 * budget ends the trial, naming the program, the op and the instruction.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

SEC("struct_ops/rspin_ssthresh")
__u32 BPF_PROG(rspin_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops/rspin_cong_avoid")
void BPF_PROG(rspin_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC("struct_ops/rspin_undo_cwnd")
__u32 BPF_PROG(rspin_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC("struct_ops/rspin_release")
void BPF_PROG(rspin_release, struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;

	while (*(volatile __u32 *)&tp->snd_cwnd != 0xdeadbeef)
		;
}

SEC(".struct_ops")
struct tcp_congestion_ops rspin = {
	.ssthresh = (void *)rspin_ssthresh,
	.cong_avoid = (void *)rspin_cong_avoid,
	.undo_cwnd = (void *)rspin_undo_cwnd,
	.release = (void *)rspin_release,
	.name = "bpf_rspin",
};
