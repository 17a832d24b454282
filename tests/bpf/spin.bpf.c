// SPDX-License-Identifier: GPL-2.0
/*
 * A congestion control whose cong_avoid never returns: it waits for snd_cwnd to reach a value
 * it never reaches. The kernel's verifier would refuse it; the simulator runs it until its
 * instruction budget ends the trial, naming the program, the op and the instruction.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

SEC("struct_ops/spin_ssthresh")
__u32 BPF_PROG(spin_ssthresh, struct sock *sk)
{
	return 2;
}

SEC("struct_ops/spin_cong_avoid")
void BPF_PROG(spin_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;

	while (*(volatile __u32 *)&tp->snd_cwnd != 0xdeadbeef)
		;
}

SEC("struct_ops/spin_undo_cwnd")
__u32 BPF_PROG(spin_undo_cwnd, struct sock *sk)
{
	return ((struct tcp_sock *)sk)->snd_cwnd;
}

SEC(".struct_ops")
struct tcp_congestion_ops spin = {
	.ssthresh = (void *)spin_ssthresh,
	.cong_avoid = (void *)spin_cong_avoid,
	.undo_cwnd = (void *)spin_undo_cwnd,
	.name = "bpf_spin",
};
