//! The kernel functions a congestion control can call: BPF helpers (by id) and the kfuncs of
//! `net/ipv4/bpf_tcp_ca.c` (by name), with Linux 6.18 semantics (`net/ipv4/tcp_cong.c`,
//! `kernel/bpf/helpers.c`, `net/core/bpf_sk_storage.c`).

use crate::load::{MapStore, MAP_TYPE_ARRAY, MAP_TYPE_HASH, MAP_TYPE_SK_STORAGE};
use crate::view::offsets;
use crate::vm::{sock_addr, Machine};

const EINVAL: i64 = 22;
const ENOENT: i64 = 2;
const EEXIST: i64 = 17;
const E2BIG: i64 = 7;
/// The kernel-internal `ENOTSUPP` (include/linux/errno.h), which `bpf_setsockopt` returns for "cdg".
const ENOTSUPP: i64 = 524;

/// `SOL_TCP` and `TCP_CONGESTION`: the one socket option implemented.
pub const SOL_TCP: u64 = 6;
pub const TCP_CONGESTION: u64 = 13;
/// `TCP_CA_NAME_MAX`.
const TCP_CA_NAME_MAX: usize = 16;

pub const HELPER_MAP_LOOKUP_ELEM: u32 = 1;
pub const HELPER_MAP_UPDATE_ELEM: u32 = 2;
pub const HELPER_MAP_DELETE_ELEM: u32 = 3;
pub const HELPER_KTIME_GET_NS: u32 = 5;
pub const HELPER_GET_PRANDOM_U32: u32 = 7;
pub const HELPER_SETSOCKOPT: u32 = 49;
pub const HELPER_GETSOCKOPT: u32 = 57;
pub const HELPER_SK_STORAGE_GET: u32 = 107;
pub const HELPER_SK_STORAGE_DELETE: u32 = 108;
pub const HELPER_TCP_SEND_ACK: u32 = 116;
pub const HELPER_JIFFIES64: u32 = 118;
pub const HELPER_KTIME_GET_COARSE_NS: u32 = 160;

/// The helpers implemented, by id.
pub const HELPERS: [(u32, &str); 12] = [
    (HELPER_MAP_LOOKUP_ELEM, "bpf_map_lookup_elem"),
    (HELPER_MAP_UPDATE_ELEM, "bpf_map_update_elem"),
    (HELPER_MAP_DELETE_ELEM, "bpf_map_delete_elem"),
    (HELPER_KTIME_GET_NS, "bpf_ktime_get_ns"),
    (HELPER_GET_PRANDOM_U32, "bpf_get_prandom_u32"),
    (HELPER_SETSOCKOPT, "bpf_setsockopt"),
    (HELPER_GETSOCKOPT, "bpf_getsockopt"),
    (HELPER_SK_STORAGE_GET, "bpf_sk_storage_get"),
    (HELPER_SK_STORAGE_DELETE, "bpf_sk_storage_delete"),
    (HELPER_TCP_SEND_ACK, "bpf_tcp_send_ack"),
    (HELPER_JIFFIES64, "bpf_jiffies64"),
    (HELPER_KTIME_GET_COARSE_NS, "bpf_ktime_get_coarse_ns"),
];

/// The kfuncs implemented.
#[allow(clippy::enum_variant_names)] // the kernel's names
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kfunc {
    TcpRenoSsthresh = 0,
    TcpRenoCongAvoid = 1,
    TcpRenoUndoCwnd = 2,
    TcpSlowStart = 3,
    TcpCongAvoidAi = 4,
}

impl Kfunc {
    pub const NAMES: [&'static str; 5] = ["tcp_reno_ssthresh", "tcp_reno_cong_avoid", "tcp_reno_undo_cwnd", "tcp_slow_start", "tcp_cong_avoid_ai"];
    const ALL: [Kfunc; 5] = [Kfunc::TcpRenoSsthresh, Kfunc::TcpRenoCongAvoid, Kfunc::TcpRenoUndoCwnd, Kfunc::TcpSlowStart, Kfunc::TcpCongAvoidAi];

    pub fn by_name(name: &str) -> Option<Kfunc> {
        Kfunc::NAMES.iter().position(|n| *n == name).map(|i| Kfunc::ALL[i])
    }
    pub fn from_index(i: i64) -> Option<Kfunc> {
        usize::try_from(i).ok().and_then(|i| Kfunc::ALL.get(i).copied())
    }
}

fn errno(e: i64) -> u64 {
    (-e) as u64
}

/// Runs helper `id` with arguments r1-r5; returns r0.
pub(crate) fn helper(m: &mut Machine, id: i64, a: [u64; 5]) -> Result<u64, String> {
    let id = u32::try_from(id).map_err(|_| format!("unknown helper {id}"))?;
    match id {
        HELPER_KTIME_GET_NS | HELPER_KTIME_GET_COARSE_NS => Ok(m.env.now_ns),
        HELPER_JIFFIES64 => Ok(m.env.jiffies),
        HELPER_GET_PRANDOM_U32 => Ok(m.env.next_prandom() as u64),
        HELPER_TCP_SEND_ACK => {
            if a[0] != sock_addr() {
                return Err("bpf_tcp_send_ack: first argument is not the socket".into());
            }
            m.env.send_ack = true;
            Ok(0)
        }
        HELPER_MAP_LOOKUP_ELEM => {
            let map = map_arg(m, a[0], "bpf_map_lookup_elem")?;
            let def = &m.object.maps[map];
            let key = m.slice(a[1], def.key_size as usize)?.to_vec();
            match (&m.shared.maps[map], def.kind) {
                (MapStore::Array(_), MAP_TYPE_ARRAY) => {
                    let i = u32::from_le_bytes([key[0], key[1], key[2], key[3]]);
                    if i >= def.max_entries {
                        return Ok(0);
                    }
                    Ok(Machine::array_addr(map, i as u64 * def.value_size as u64))
                }
                (MapStore::Hash(slots), MAP_TYPE_HASH) => {
                    Ok(slots.iter().position(|e| e.as_ref().is_some_and(|(k, _)| *k == key)).map_or(0, |slot| Machine::hash_addr(map, slot)))
                }
                _ => Err(format!("bpf_map_lookup_elem on map {}, of a type lookups are not allowed on", def.name)),
            }
        }
        HELPER_MAP_UPDATE_ELEM => {
            let map = map_arg(m, a[0], "bpf_map_update_elem")?;
            let def = m.object.maps[map].clone();
            let key = m.slice(a[1], def.key_size as usize)?.to_vec();
            let value = m.slice(a[2], def.value_size as usize)?.to_vec();
            let flags = a[3];
            if flags > 2 {
                return Ok(errno(EINVAL));
            }
            match &mut m.shared.maps[map] {
                MapStore::Array(values) => {
                    let i = u32::from_le_bytes([key[0], key[1], key[2], key[3]]);
                    if i >= def.max_entries {
                        return Ok(errno(E2BIG));
                    }
                    if flags == 1 {
                        return Ok(errno(EEXIST));
                    }
                    let o = i as usize * def.value_size as usize;
                    values[o..o + def.value_size as usize].copy_from_slice(&value);
                    Ok(0)
                }
                MapStore::Hash(slots) => {
                    let found = slots.iter().position(|e| e.as_ref().is_some_and(|(k, _)| *k == key));
                    match (found, flags) {
                        (Some(_), 1) => Ok(errno(EEXIST)),
                        (None, 2) => Ok(errno(ENOENT)),
                        (Some(slot), _) => {
                            slots[slot] = Some((key, value));
                            Ok(0)
                        }
                        (None, _) => {
                            let used = slots.iter().filter(|e| e.is_some()).count();
                            if used >= def.max_entries as usize {
                                return Ok(errno(E2BIG));
                            }
                            match slots.iter().position(|e| e.is_none()) {
                                Some(free) => slots[free] = Some((key, value)),
                                None => slots.push(Some((key, value))),
                            }
                            Ok(0)
                        }
                    }
                }
                MapStore::SkStorage => Err(format!("bpf_map_update_elem on socket storage map {}", def.name)),
            }
        }
        HELPER_MAP_DELETE_ELEM => {
            let map = map_arg(m, a[0], "bpf_map_delete_elem")?;
            let def = m.object.maps[map].clone();
            let key = m.slice(a[1], def.key_size as usize)?.to_vec();
            match &mut m.shared.maps[map] {
                MapStore::Array(_) => Ok(errno(EINVAL)),
                MapStore::Hash(slots) => match slots.iter().position(|e| e.as_ref().is_some_and(|(k, _)| *k == key)) {
                    Some(slot) => {
                        slots[slot] = None;
                        Ok(0)
                    }
                    None => Ok(errno(ENOENT)),
                },
                MapStore::SkStorage => Err(format!("bpf_map_delete_elem on socket storage map {}", def.name)),
            }
        }
        HELPER_SETSOCKOPT => sockopt(m, a, false),
        HELPER_GETSOCKOPT => sockopt(m, a, true),
        HELPER_SK_STORAGE_GET => {
            let map = map_arg(m, a[0], "bpf_sk_storage_get")?;
            let def = &m.object.maps[map];
            if def.kind != MAP_TYPE_SK_STORAGE {
                return Err(format!("bpf_sk_storage_get on map {}, which is not BPF_MAP_TYPE_SK_STORAGE", def.name));
            }
            let value_size = def.value_size as usize;
            if a[1] != sock_addr() || a[3] > 1 {
                return Ok(0); // NULL socket or bad flags: the kernel returns NULL
            }
            if m.mem.sk_storage[map].is_none() {
                if a[3] & 1 == 0 {
                    return Ok(0);
                }
                let init = if a[2] != 0 { m.slice(a[2], value_size)?.to_vec() } else { vec![0; value_size] };
                m.mem.sk_storage[map] = Some(init);
            }
            Ok(Machine::sk_storage_addr(map))
        }
        HELPER_SK_STORAGE_DELETE => {
            let map = map_arg(m, a[0], "bpf_sk_storage_delete")?;
            if m.object.maps[map].kind != MAP_TYPE_SK_STORAGE {
                return Err("bpf_sk_storage_delete on a map that is not BPF_MAP_TYPE_SK_STORAGE".into());
            }
            if a[1] != sock_addr() {
                return Ok(errno(EINVAL));
            }
            Ok(if m.mem.sk_storage[map].take().is_some() { 0 } else { errno(ENOENT) })
        }
        _ => Err(format!("unknown helper {id}")),
    }
}

/// `bpf_setsockopt` / `bpf_getsockopt(sk, level, optname, optval, optlen)` as
/// `net/core/filter.c` runs them for a congestion control (`_bpf_setsockopt`,
/// `sol_tcp_sockopt_congestion`, `do_tcp_getsockopt`), for the one option implemented,
/// `SOL_TCP` / `TCP_CONGESTION`:
/// - get: `optlen` < 2 is -EINVAL; else the current congestion control's name (this object's
///   `.name`) in `optlen - 1` bytes at most 16, NUL-terminated, the rest of `optval` zeroed; 0.
/// - set: `optlen` < 2 is -EINVAL; "cdg" is -ENOTSUPP (as the kernel refuses it to BPF);
///   the name of the running congestion control is 0 and changes nothing
///   (`tcp_set_congestion_control`: "no change asking for existing value"); any other name
///   would switch the socket to another algorithm, which the simulator cannot do: a run-time
///   error naming it.
///
/// Every other level or option is a run-time error naming it (the arguments are values the
/// loader cannot see). A failed get zeroes `optval`, as `__bpf_getsockopt` does. Not callable
/// from `release` (refused at load, as `bpf_tcp_ca_get_func_proto` does).
fn sockopt(m: &mut Machine, a: [u64; 5], get: bool) -> Result<u64, String> {
    let helper = if get { "bpf_getsockopt" } else { "bpf_setsockopt" };
    if a[0] != sock_addr() {
        return Err(format!("{helper}: first argument is not the socket"));
    }
    let (level, optname, optval, optlen) = (a[1] as u32 as i32, a[2] as u32 as i32, a[3], a[4] as u32 as i32);
    if optlen <= 0 {
        return Err(format!("{helper}: optlen {optlen} (the verifier requires a positive constant size)"));
    }
    let len = optlen as usize;
    // The buffer must be readable (set) or writable (get) over its whole length.
    if get {
        m.slice_mut(optval, len).map_err(|e| format!("{helper}: optval: {e}"))?;
    } else {
        m.slice(optval, len).map_err(|e| format!("{helper}: optval: {e}"))?;
    }
    if level as u64 != SOL_TCP || optname as u64 != TCP_CONGESTION {
        return Err(format!(
            "{helper}: level {level} ({}) option {optname} ({}) is not supported here (only SOL_TCP TCP_CONGESTION is)",
            level_name(level),
            option_name(level, optname)
        ));
    }
    if len < 2 {
        if get {
            m.slice_mut(optval, len)?.fill(0);
        }
        return Ok(errno(EINVAL));
    }
    let own = m.object.name().as_bytes().to_vec();
    if get {
        // optval[--optlen] = 0; len = min(optlen, TCP_CA_NAME_MAX); copy name[..len]; zero the rest.
        let n = (len - 1).min(TCP_CA_NAME_MAX);
        let buf = m.slice_mut(optval, len)?;
        buf.fill(0);
        for (i, b) in buf.iter_mut().take(n).enumerate() {
            *b = own.get(i).copied().unwrap_or(0);
        }
        return Ok(0);
    }
    let raw = m.slice(optval, len)?;
    // "cdg" compared over optlen bytes (strncmp), then the name as do_tcp_setsockopt copies it.
    // strncmp("cdg", optval, optlen) == 0: "cdg" followed by the end of the buffer or a NUL.
    if len >= 3 && raw[..3] == *b"cdg" && raw.get(3).is_none_or(|&c| c == 0) {
        return Ok(errno(ENOTSUPP));
    }
    let copied = &raw[..len.min(TCP_CA_NAME_MAX - 1)];
    let name = &copied[..copied.iter().position(|&c| c == 0).unwrap_or(copied.len())];
    if name == own.as_slice() {
        return Ok(0);
    }
    Err(format!(
        "{helper}: SOL_TCP TCP_CONGESTION {:?}: switching the socket to another congestion control is not supported in the simulator (only its own name, {:?}, which changes nothing)",
        String::from_utf8_lossy(name),
        m.object.name()
    ))
}

fn level_name(level: i32) -> &'static str {
    match level {
        1 => "SOL_SOCKET",
        0 => "SOL_IP",
        41 => "SOL_IPV6",
        6 => "SOL_TCP",
        _ => "unknown level",
    }
}

fn option_name(level: i32, optname: i32) -> &'static str {
    match (level, optname) {
        (6, 1) => "TCP_NODELAY",
        (6, 2) => "TCP_MAXSEG",
        (6, 4) => "TCP_KEEPIDLE",
        (6, 5) => "TCP_KEEPINTVL",
        (6, 6) => "TCP_KEEPCNT",
        (6, 7) => "TCP_SYNCNT",
        (6, 10) => "TCP_WINDOW_CLAMP",
        (6, 13) => "TCP_CONGESTION",
        (6, 16) => "TCP_THIN_LINEAR_TIMEOUTS",
        (6, 18) => "TCP_USER_TIMEOUT",
        (6, 25) => "TCP_NOTSENT_LOWAT",
        (6, 27) => "TCP_SAVE_SYN",
        (6, 28) => "TCP_SAVED_SYN",
        (6, 1001) => "TCP_BPF_IW",
        (6, 1002) => "TCP_BPF_SNDCWND_CLAMP",
        (6, 1003) => "TCP_BPF_DELACK_MAX",
        (6, 1004) => "TCP_BPF_RTO_MIN",
        (6, 1005) => "TCP_BPF_SYN",
        (6, 1006) => "TCP_BPF_SYN_IP",
        (6, 1007) => "TCP_BPF_SYN_MAC",
        (6, 1008) => "TCP_BPF_SOCK_OPS_CB_FLAGS",
        (1, 7) => "SO_SNDBUF",
        (1, 8) => "SO_RCVBUF",
        (1, 47) => "SO_MAX_PACING_RATE",
        (1, 36) => "SO_MARK",
        (1, 12) => "SO_PRIORITY",
        (0, 1) => "IP_TOS",
        (41, 67) => "IPV6_TCLASS",
        _ => "unknown option",
    }
}

fn map_arg(m: &Machine, handle: u64, helper: &str) -> Result<usize, String> {
    m.map_of(handle).ok_or_else(|| format!("{helper}: first argument is not a map"))
}

fn get(m: &Machine, off: usize) -> Result<u32, String> {
    Ok(m.read(sock_addr() + off as u64, 4)? as u32)
}

/// Sets a tcp_sock field from a kfunc (kernel code is not bound by the writable set).
fn set(m: &mut Machine, off: usize, v: u32) {
    if let Some(b) = m.mem.sock.get_mut(off..off + 4) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

/// Runs kfunc `k` with arguments r1-r5; returns r0.
pub(crate) fn kfunc(m: &mut Machine, k: Kfunc, a: [u64; 5]) -> Result<u64, String> {
    if a[0] != sock_addr() {
        return Err(format!("{}: first argument is not the socket", Kfunc::NAMES[k as usize]));
    }
    use offsets::*;
    match k {
        Kfunc::TcpRenoSsthresh => Ok(((get(m, SNDCWND)? >> 1).max(2)) as u64),
        Kfunc::TcpRenoUndoCwnd => Ok(get(m, SNDCWND)?.max(get(m, PRIOR_CWND)?) as u64),
        Kfunc::TcpSlowStart => Ok(tcp_slow_start(m, a[1] as u32)? as u64),
        Kfunc::TcpCongAvoidAi => {
            tcp_cong_avoid_ai(m, a[1] as u32, a[2] as u32)?;
            Ok(0)
        }
        Kfunc::TcpRenoCongAvoid => {
            // tcp_reno_cong_avoid(sk, ack, acked)
            let mut acked = a[2] as u32;
            let cwnd = get(m, SNDCWND)?;
            let ssthresh = get(m, SND_SSTHRESH)?;
            let in_slow_start = cwnd < ssthresh;
            let limited = m.read(sock_addr() + IS_CWND_LIMITED as u64, 1)? != 0;
            let cwnd_limited = limited || in_slow_start && (cwnd as u64) < 2 * get(m, MAX_PACKETS_OUT)? as u64;
            if !cwnd_limited {
                return Ok(0);
            }
            if in_slow_start {
                acked = tcp_slow_start(m, acked)?;
                if acked == 0 {
                    return Ok(0);
                }
            }
            let w = get(m, SNDCWND)?;
            tcp_cong_avoid_ai(m, w, acked)?;
            Ok(0)
        }
    }
}

/// `tcp_slow_start`: grow cwnd by `acked` up to ssthresh; return what is left of `acked`.
fn tcp_slow_start(m: &mut Machine, acked: u32) -> Result<u32, String> {
    use offsets::*;
    let cwnd0 = get(m, SNDCWND)?;
    let cwnd = cwnd0.wrapping_add(acked).min(get(m, SND_SSTHRESH)?);
    let left = acked.wrapping_sub(cwnd.wrapping_sub(cwnd0));
    let clamp = get(m, SND_CWND_CLAMP)?;
    set(m, SNDCWND, cwnd.min(clamp));
    Ok(left)
}

/// `tcp_cong_avoid_ai`: one segment per `w` segments ACKed, counted in `snd_cwnd_cnt`.
fn tcp_cong_avoid_ai(m: &mut Machine, w: u32, acked: u32) -> Result<(), String> {
    use offsets::*;
    let mut cnt = get(m, SND_CWND_CNT)?;
    let mut cwnd = get(m, SNDCWND)?;
    if cnt >= w {
        cnt = 0;
        cwnd = cwnd.wrapping_add(1);
    }
    cnt = cnt.wrapping_add(acked);
    if cnt >= w {
        // w == 0 would divide by zero in the kernel; here it adds nothing.
        let delta = cnt.checked_div(w).unwrap_or(0);
        cnt = cnt.wrapping_sub(delta.wrapping_mul(w));
        cwnd = cwnd.wrapping_add(delta);
    }
    cwnd = cwnd.min(get(m, SND_CWND_CLAMP)?);
    set(m, SND_CWND_CNT, cnt);
    set(m, SNDCWND, cwnd);
    Ok(())
}
