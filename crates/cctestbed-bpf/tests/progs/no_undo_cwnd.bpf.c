// SPDX-License-Identifier: GPL-2.0
/* Three tcp_congestion_ops, two of which the kernel refuses to register
 * (tcp_validate_congestion_control: ssthresh, undo_cwnd, and cong_avoid or cong_control are
 * required): bpf_nu lacks undo_cwnd, bpf_nca lacks undo_cwnd and cong_avoid/cong_control,
 * bpf_cc is complete (cong_control in place of cong_avoid). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

SEC("struct_ops")
__u32 BPF_PROG(nu_ssthresh, struct sock *sk)
{
	return 2;
}

SEC("struct_ops")
void BPF_PROG(nu_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
}

SEC("struct_ops")
__u32 BPF_PROG(nu_undo_cwnd, struct sock *sk)
{
	return 10;
}

SEC("struct_ops")
void BPF_PROG(nu_cong_control, struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs)
{
}

SEC(".struct_ops")
struct tcp_congestion_ops nu = {
	.ssthresh = (void *)nu_ssthresh,
	.cong_avoid = (void *)nu_cong_avoid,
	.name = "bpf_nu",
};

SEC(".struct_ops")
struct tcp_congestion_ops nca = {
	.ssthresh = (void *)nu_ssthresh,
	.name = "bpf_nca",
};

SEC(".struct_ops")
struct tcp_congestion_ops cc = {
	.ssthresh = (void *)nu_ssthresh,
	.undo_cwnd = (void *)nu_undo_cwnd,
	.cong_control = (void *)nu_cong_control,
	.name = "bpf_cc",
};
