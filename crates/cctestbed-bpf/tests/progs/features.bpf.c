// SPDX-License-Identifier: GPL-2.0
/*
 * Exercises what the interpreter offers, one op each:
 *  ssthresh      kernel bit fields read directly (clang hard-codes their shift and mask)
 *  undo_cwnd     the same bit fields through BPF_CORE_READ_BITFIELD (CO-RE shifts)
 *  init          array map lookup + atomic add, hash map update/lookup, .bss and .data globals,
 *                clocks and prandom into icsk_ca_priv
 *  cwnd_event    bpf_tcp_send_ack
 *  pkts_acked    reads the ack_sample
 *  in_ack_event  socket-local storage: created on first use, counts calls into snd_ssthresh
 *  release       deletes the socket-local storage
 *  set_state     hash map delete, returns the helper's result in snd_cwnd_cnt
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char _license[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} table SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} per_sock SEC(".maps");

__u64 bss_calls;
__u64 data_base = 1000;

SEC("struct_ops/ft_ssthresh")
__u32 BPF_PROG(ft_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;

	return tp->is_cwnd_limited * 100 + ((struct inet_connection_sock *)sk)->icsk_ca_state;
}

SEC("struct_ops/ft_undo_cwnd")
__u32 BPF_PROG(ft_undo_cwnd, struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;

	return BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited) * 100 +
	       BPF_CORE_READ_BITFIELD((struct inet_connection_sock *)sk, icsk_ca_state);
}

SEC("struct_ops/ft_cong_avoid")
void BPF_PROG(ft_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
}

SEC("struct_ops/ft_init")
void BPF_PROG(ft_init, struct sock *sk)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	__u32 key = 2, hkey = 7;
	__u64 *v, hv = 42, *h;

	v = bpf_map_lookup_elem(&counters, &key);
	if (v)
		__sync_fetch_and_add(v, 1);
	bpf_map_update_elem(&table, &hkey, &hv, BPF_ANY);
	h = bpf_map_lookup_elem(&table, &hkey);
	bss_calls++;
	icsk->icsk_ca_priv[0] = bpf_ktime_get_ns();
	icsk->icsk_ca_priv[1] = bpf_jiffies64();
	icsk->icsk_ca_priv[2] = bpf_get_prandom_u32();
	icsk->icsk_ca_priv[3] = v ? *v : 0;
	icsk->icsk_ca_priv[4] = h ? *h : 0;
	icsk->icsk_ca_priv[5] = data_base + bss_calls;
}

SEC("struct_ops/ft_cwnd_event")
void BPF_PROG(ft_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;

	if (ev == CA_EVENT_ECN_IS_CE)
		bpf_tcp_send_ack(tp, tp->rcv_nxt);
}

SEC("struct_ops/ft_pkts_acked")
void BPF_PROG(ft_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;

	tp->snd_cwnd = sample->pkts_acked + sample->rtt_us;
}

SEC("struct_ops/ft_in_ack_event")
void BPF_PROG(ft_in_ack_event, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u64 *n = bpf_sk_storage_get(&per_sock, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);

	if (!n)
		return;
	*n += 1;
	tp->snd_ssthresh = *n;
}

SEC("struct_ops/ft_release")
void BPF_PROG(ft_release, struct sock *sk)
{
	bpf_sk_storage_delete(&per_sock, sk);
}

SEC("struct_ops/ft_set_state")
void BPF_PROG(ft_set_state, struct sock *sk, __u8 new_state)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u32 hkey = 7;

	tp->snd_cwnd_cnt = bpf_map_delete_elem(&table, &hkey);
}

SEC(".struct_ops")
struct tcp_congestion_ops ft = {
	.ssthresh = (void *)ft_ssthresh,
	.undo_cwnd = (void *)ft_undo_cwnd,
	.cong_avoid = (void *)ft_cong_avoid,
	.init = (void *)ft_init,
	.cwnd_event = (void *)ft_cwnd_event,
	.pkts_acked = (void *)ft_pkts_acked,
	.in_ack_event = (void *)ft_in_ack_event,
	.release = (void *)ft_release,
	.set_state = (void *)ft_set_state,
	.flags = 2, /* TCP_CONG_NEEDS_ECN */
	.name = "bpf_ft",
};
