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

pub const HELPER_MAP_LOOKUP_ELEM: u32 = 1;
pub const HELPER_MAP_UPDATE_ELEM: u32 = 2;
pub const HELPER_MAP_DELETE_ELEM: u32 = 3;
pub const HELPER_KTIME_GET_NS: u32 = 5;
pub const HELPER_GET_PRANDOM_U32: u32 = 7;
pub const HELPER_SK_STORAGE_GET: u32 = 107;
pub const HELPER_SK_STORAGE_DELETE: u32 = 108;
pub const HELPER_TCP_SEND_ACK: u32 = 116;
pub const HELPER_JIFFIES64: u32 = 118;
pub const HELPER_KTIME_GET_COARSE_NS: u32 = 160;

/// The helpers implemented, by id.
pub const HELPERS: [(u32, &str); 10] = [
    (HELPER_MAP_LOOKUP_ELEM, "bpf_map_lookup_elem"),
    (HELPER_MAP_UPDATE_ELEM, "bpf_map_update_elem"),
    (HELPER_MAP_DELETE_ELEM, "bpf_map_delete_elem"),
    (HELPER_KTIME_GET_NS, "bpf_ktime_get_ns"),
    (HELPER_GET_PRANDOM_U32, "bpf_get_prandom_u32"),
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
        HELPER_SK_STORAGE_GET => {
            let map = map_arg(m, a[0], "bpf_sk_storage_get")?;
            let def = m.object.maps[map].clone();
            if def.kind != MAP_TYPE_SK_STORAGE {
                return Err(format!("bpf_sk_storage_get on map {}, which is not BPF_MAP_TYPE_SK_STORAGE", def.name));
            }
            if a[1] != sock_addr() || a[3] > 1 {
                return Ok(0); // NULL socket or bad flags: the kernel returns NULL
            }
            if m.sk_storage[map].is_none() {
                if a[3] & 1 == 0 {
                    return Ok(0);
                }
                let init = if a[2] != 0 { m.slice(a[2], def.value_size as usize)?.to_vec() } else { vec![0; def.value_size as usize] };
                m.sk_storage[map] = Some(init);
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
            Ok(if m.sk_storage[map].take().is_some() { 0 } else { errno(ENOENT) })
        }
        _ => Err(format!("unknown helper {id}")),
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
    if let Some(b) = m.sock.get_mut(off..off + 4) {
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
