// SPDX-License-Identifier: GPL-2.0
/* Refused at load: release calls bpf_setsockopt, which the kernel does not allow there
 * (bpf_tcp_ca_get_func_proto); the other programs of the section may. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

SEC("struct_ops")
__u32 BPF_PROG(sr_ssthresh, struct sock *sk)
{
	char name[] = "bpf_sr";
	return bpf_setsockopt(sk, 6, 13, name, sizeof(name));
}

SEC("struct_ops")
void BPF_PROG(sr_release, struct sock *sk)
{
	char name[] = "bpf_sr";
	bpf_setsockopt(sk, 6, 13, name, sizeof(name));
}

SEC(".struct_ops")
struct tcp_congestion_ops sr = {
	.ssthresh = (void *)sr_ssthresh,
	.release = (void *)sr_release,
	.name = "bpf_sr",
};
