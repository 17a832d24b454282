// SPDX-License-Identifier: GPL-2.0
/* __kconfig externs, as bpf_cubic.c reads CONFIG_HZ: ssthresh returns CONFIG_HZ, undo_cwnd an
 * option nobody defines (weak, so 0), min_tso_segs the kernel version's major number. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

extern unsigned long CONFIG_HZ __kconfig;
extern int CONFIG_NOT_AN_OPTION __kconfig __weak;
extern unsigned int LINUX_KERNEL_VERSION __kconfig;

SEC("struct_ops/kc_ssthresh")
__u32 BPF_PROG(kc_ssthresh, struct sock *sk)
{
	return CONFIG_HZ;
}

SEC("struct_ops/kc_undo_cwnd")
__u32 BPF_PROG(kc_undo_cwnd, struct sock *sk)
{
	return CONFIG_NOT_AN_OPTION + 7;
}

SEC("struct_ops/kc_cong_avoid")
void BPF_PROG(kc_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
}

SEC("struct_ops/kc_min_tso_segs")
__u32 BPF_PROG(kc_min_tso_segs, struct sock *sk)
{
	return LINUX_KERNEL_VERSION >> 16;
}

SEC(".struct_ops")
struct tcp_congestion_ops kc = {
	.ssthresh = (void *)kc_ssthresh,
	.undo_cwnd = (void *)kc_undo_cwnd,
	.min_tso_segs = (void *)kc_min_tso_segs,
	.cong_avoid = (void *)kc_cong_avoid,
	.name = "bpf_kc",
};
