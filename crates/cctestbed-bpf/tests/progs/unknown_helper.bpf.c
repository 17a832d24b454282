// SPDX-License-Identifier: GPL-2.0
/* Refused at load: calls bpf_get_current_pid_tgid (helper 14), not offered here. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

SEC("struct_ops/uh_ssthresh")
__u32 BPF_PROG(uh_ssthresh, struct sock *sk)
{
	return bpf_get_current_pid_tgid();
}

SEC(".struct_ops")
struct tcp_congestion_ops uh = {
	.ssthresh = (void *)uh_ssthresh,
	.name = "bpf_uh",
};
