// SPDX-License-Identifier: GPL-2.0
/* The kernel's Reno through its own kfuncs: tcp_reno_ssthresh, tcp_reno_cong_avoid, tcp_reno_undo_cwnd. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL v2";

extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

SEC("struct_ops/kr_ssthresh")
__u32 BPF_PROG(kr_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops/kr_cong_avoid")
void BPF_PROG(kr_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC("struct_ops/kr_undo_cwnd")
__u32 BPF_PROG(kr_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops kr = {
	.ssthresh = (void *)kr_ssthresh,
	.cong_avoid = (void *)kr_cong_avoid,
	.undo_cwnd = (void *)kr_undo_cwnd,
	.name = "bpf_kreno",
};
