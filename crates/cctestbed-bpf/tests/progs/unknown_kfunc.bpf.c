// SPDX-License-Identifier: GPL-2.0
/* Refused at load: calls a kfunc that congestion controls cannot call. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

extern __u32 tcp_made_up_kfunc(struct sock *sk) __ksym;

SEC("struct_ops/uk_ssthresh")
__u32 BPF_PROG(uk_ssthresh, struct sock *sk)
{
	return tcp_made_up_kfunc(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops uk = {
	.ssthresh = (void *)uk_ssthresh,
	.name = "bpf_uk",
};
