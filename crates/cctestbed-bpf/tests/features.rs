//! Maps, socket-local storage, globals, clocks, prandom, bpf_tcp_send_ack, ack_sample and the
//! kernel's bit fields, on tests/progs/features.bpf.c compiled at test time (skipped, with the
//! reason printed, without clang).

use std::sync::Arc;

use ccbpf::{AckSample, Env, Object, Op, TcpSock};

mod common;
use common::compile;

fn features() -> Option<Arc<Object>> {
    let b = compile("features")?;
    Some(Arc::new(Object::load(&b).unwrap_or_else(|e| panic!("{e}"))))
}

#[test]
fn name_flags_and_ops() {
    let Some(obj) = features() else { return };
    assert_eq!(obj.name(), "bpf_ft");
    assert_eq!(obj.flags(), 2);
    for op in [Op::Ssthresh, Op::UndoCwnd, Op::CongAvoid, Op::Init, Op::CwndEvent, Op::PktsAcked, Op::InAckEvent, Op::Release, Op::SetState] {
        assert!(obj.has_op(op), "{op}");
    }
    assert!(!obj.has_op(Op::CongControl));
    assert_eq!(obj.program_name(Op::Init), Some("struct_ops/ft_init"));
}

#[test]
fn kernel_bit_fields_read_directly_and_through_core() {
    let Some(obj) = features() else { return };
    let mut flow = obj.instance();
    *flow.sock = TcpSock::initial(1448);
    let mut env = Env::default();
    for (limited, state) in [(0u8, 0u8), (1, 0), (0, 4), (1, 3)] {
        flow.sock.is_cwnd_limited = limited;
        flow.sock.inet_conn.icsk_ca_state = state;
        let want = Some(limited as u64 * 100 + state as u64);
        assert_eq!(flow.call(Op::Ssthresh, &[], None, None, &mut env).unwrap(), want, "direct");
        assert_eq!(flow.call(Op::UndoCwnd, &[], None, None, &mut env).unwrap(), want, "BPF_CORE_READ_BITFIELD");
        // the view keeps the plain values
        assert_eq!((flow.sock.is_cwnd_limited, flow.sock.inet_conn.icsk_ca_state), (limited, state));
    }
}

#[test]
fn maps_globals_clocks_and_prandom() {
    let Some(obj) = features() else { return };
    let mut a = obj.instance();
    let mut b = obj.instance();
    let mut env = Env { now_ns: 123_456_789, jiffies: 4242, prandom: 99, send_ack: false };
    let expected_random = env.clone().next_prandom() as u64;
    a.call(Op::Init, &[], None, None, &mut env).unwrap();
    let priv_a = a.sock.inet_conn.icsk_ca_priv;
    assert_eq!(priv_a[0], 123_456_789, "bpf_ktime_get_ns");
    assert_eq!(priv_a[1], 4242, "bpf_jiffies64");
    assert_eq!(priv_a[2], expected_random, "bpf_get_prandom_u32 from Env's state");
    assert_eq!(priv_a[3], 1, "array map value after an atomic add");
    assert_eq!(priv_a[4], 42, "hash map value");
    assert_eq!(priv_a[5], 1001, ".data + .bss");
    // maps and globals are per object: a second socket sees the first one's updates
    b.call(Op::Init, &[], None, None, &mut env).unwrap();
    let priv_b = b.sock.inet_conn.icsk_ca_priv;
    assert_eq!((priv_b[3], priv_b[5]), (2, 1002));
    assert_ne!(priv_b[2], priv_a[2], "prandom advances");
    // hash delete: 0, then -ENOENT
    a.call(Op::SetState, &[1], None, None, &mut env).unwrap();
    assert_eq!(a.sock.snd_cwnd_cnt, 0);
    a.call(Op::SetState, &[1], None, None, &mut env).unwrap();
    assert_eq!(a.sock.snd_cwnd_cnt as i32, -2);
}

#[test]
fn socket_local_storage_is_per_instance() {
    let Some(obj) = features() else { return };
    let mut a = obj.instance();
    let mut b = obj.instance();
    let mut env = Env::default();
    for _ in 0..3 {
        a.call(Op::InAckEvent, &[0], None, None, &mut env).unwrap();
    }
    b.call(Op::InAckEvent, &[0], None, None, &mut env).unwrap();
    assert_eq!((a.sock.snd_ssthresh, b.sock.snd_ssthresh), (3, 1));
    a.call(Op::Release, &[], None, None, &mut env).unwrap();
    a.call(Op::InAckEvent, &[0], None, None, &mut env).unwrap();
    assert_eq!(a.sock.snd_ssthresh, 1, "deleted, then created afresh");
}

#[test]
fn send_ack_and_ack_sample() {
    let Some(obj) = features() else { return };
    let mut flow = obj.instance();
    let mut env = Env::default();
    flow.call(Op::CwndEvent, &[0], None, None, &mut env).unwrap();
    assert!(!env.send_ack);
    flow.call(Op::CwndEvent, &[5 /* CA_EVENT_ECN_IS_CE */], None, None, &mut env).unwrap();
    assert!(env.send_ack);
    let ack = AckSample { pkts_acked: 3, rtt_us: 20_000, in_flight: 9 };
    flow.call(Op::PktsAcked, &[], Some(&ack), None, &mut env).unwrap();
    assert_eq!(flow.sock.snd_cwnd, 20_003);
    // without a sample the program dereferences NULL: an error, not a crash
    let e = flow.call(Op::PktsAcked, &[], None, None, &mut env).unwrap_err();
    assert!(e.message.contains("no memory"), "{e}");
}

#[test]
fn object_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Object>();
    check::<ccbpf::Instance>();
}

/// tcp_reno_cong_avoid as net/ipv4/tcp_cong.c: nothing unless cwnd-limited (is_cwnd_limited,
/// or in slow start below 2 * max_packets_out), slow start up to ssthresh, then
/// tcp_cong_avoid_ai with w = cwnd; tcp_reno_ssthresh = max(cwnd / 2, 2).
#[test]
fn kernel_reno_kfuncs() {
    let Some(b) = compile("kernel_reno") else { return };
    let obj = Arc::new(Object::load(&b).unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(obj.name(), "bpf_kreno");
    let mut flow = obj.instance();
    *flow.sock = TcpSock::initial(1448);
    let mut env = Env::default();
    flow.sock.snd_cwnd = 10;
    flow.sock.snd_ssthresh = 16;
    flow.sock.is_cwnd_limited = 0;
    flow.sock.max_packets_out = 5; // 10 >= 2 * 5: not limited
    flow.call(Op::CongAvoid, &[0, 3], None, None, &mut env).unwrap();
    assert_eq!(flow.sock.snd_cwnd, 10);
    flow.sock.max_packets_out = 6; // 10 < 12: limited in slow start
    flow.call(Op::CongAvoid, &[0, 3], None, None, &mut env).unwrap();
    assert_eq!(flow.sock.snd_cwnd, 13);
    flow.sock.is_cwnd_limited = 1;
    flow.call(Op::CongAvoid, &[0, 5], None, None, &mut env).unwrap();
    assert_eq!((flow.sock.snd_cwnd, flow.sock.snd_cwnd_cnt), (16, 2));
    for _ in 0..14 {
        flow.call(Op::CongAvoid, &[0, 1], None, None, &mut env).unwrap();
    }
    assert_eq!((flow.sock.snd_cwnd, flow.sock.snd_cwnd_cnt), (17, 0));
    flow.sock.is_cwnd_limited = 0; // out of slow start and not limited: no growth
    flow.call(Op::CongAvoid, &[0, 40], None, None, &mut env).unwrap();
    assert_eq!(flow.sock.snd_cwnd, 17);
    assert_eq!(flow.call(Op::Ssthresh, &[], None, None, &mut env).unwrap(), Some(8));
    flow.sock.snd_cwnd = 3;
    assert_eq!(flow.call(Op::Ssthresh, &[], None, None, &mut env).unwrap(), Some(2));
    flow.sock.prior_cwnd = 9;
    assert_eq!(flow.call(Op::UndoCwnd, &[], None, None, &mut env).unwrap(), Some(9));
}

#[test]
fn kconfig_externs() {
    let Some(b) = compile("kconfig") else { return };
    let mut env = Env::default();
    let obj = Arc::new(Object::load(&b).unwrap_or_else(|e| panic!("{e}")));
    let mut flow = obj.instance();
    assert_eq!(flow.call(Op::Ssthresh, &[], None, None, &mut env).unwrap(), Some(250), "default CONFIG_HZ");
    assert_eq!(flow.call(Op::UndoCwnd, &[], None, None, &mut env).unwrap(), Some(7), "weak unknown option reads 0");
    assert_eq!(flow.call(Op::MinTsoSegs, &[], None, None, &mut env).unwrap(), Some(6), "kernel 6.x");
    let obj = Arc::new(Object::load_with_kconfig(&b, &[("CONFIG_HZ", 1000), ("LINUX_KERNEL_VERSION", 6 << 16)]).unwrap());
    assert_eq!(obj.instance().call(Op::Ssthresh, &[], None, None, &mut env).unwrap(), Some(1000));
    // a strong option the loader does not know is refused, naming it
    let Some(b) = compile("kconfig_unknown") else { return };
    let e = Object::load(&b).unwrap_err().to_string();
    assert!(e.contains("CONFIG_NOT_AN_OPTION"), "{e}");
}
