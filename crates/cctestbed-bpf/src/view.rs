//! The programs' view of a socket and of the samples handed to them, and the target BTF that
//! CO-RE relocations are resolved against.
//!
//! Every view struct is declared once, through the `view_struct!` macro, which emits both the
//! `#[repr(C)]` Rust struct and its description in the target type table ([`TargetBtf`]) with
//! member offsets taken from `core::mem::offset_of!`: the layout the programs are relocated
//! against is by construction the layout of the Rust struct. Names are the kernel's (6.18).
//!
//! The kernel's bit fields (`icsk_ca_state:5`, `is_cwnd_limited:1`) are whole bytes here; CO-RE
//! bit-field relocations (byte offset, byte size, left and right shift) resolve against them as
//! plain `u8` fields, so a program's `BPF_CORE_READ_BITFIELD` reads the whole byte.
//!
//! A view is copied into a byte buffer at the start of a call (`store`) and read back at its end
//! (`load`), member by member, so no byte of padding is ever read and no `unsafe` is needed.

use std::collections::HashMap;

/// One type of the target BTF.
#[derive(Clone, Debug)]
pub enum TargetType {
    Int { size: usize, signed: bool },
    Struct { name: &'static str, size: usize, members: Vec<TargetMember> },
    Array { elem: usize, len: usize },
}

/// A struct member of the target BTF.
#[derive(Clone, Debug)]
pub struct TargetMember {
    pub name: &'static str,
    pub offset: usize,
    pub ty: usize,
}

/// The target BTF: the types of the view structs, named as the kernel names them.
#[derive(Clone, Debug, Default)]
pub struct TargetBtf {
    pub types: Vec<TargetType>,
    structs: HashMap<&'static str, usize>,
    ints: HashMap<(usize, bool), usize>,
}

impl TargetBtf {
    /// The target BTF of every view struct of this crate.
    pub fn of_views() -> TargetBtf {
        let mut btf = TargetBtf::default();
        TcpSock::register(&mut btf);
        AckSample::register(&mut btf);
        RateSample::register(&mut btf);
        btf
    }

    pub fn struct_by_name(&self, name: &str) -> Option<usize> {
        self.structs.get(name).copied()
    }

    pub fn size_of(&self, id: usize) -> usize {
        match &self.types[id] {
            TargetType::Int { size, .. } => *size,
            TargetType::Struct { size, .. } => *size,
            TargetType::Array { elem, len } => self.size_of(*elem) * len,
        }
    }

    fn add(&mut self, t: TargetType) -> usize {
        self.types.push(t);
        self.types.len() - 1
    }

    pub fn int(&mut self, size: usize, signed: bool) -> usize {
        if let Some(id) = self.ints.get(&(size, signed)) {
            return *id;
        }
        let id = self.add(TargetType::Int { size, signed });
        self.ints.insert((size, signed), id);
        id
    }

    pub fn array(&mut self, elem: usize, len: usize) -> usize {
        self.add(TargetType::Array { elem, len })
    }

    pub fn add_struct(&mut self, name: &'static str, size: usize, members: Vec<TargetMember>) -> usize {
        if let Some(id) = self.structs.get(name) {
            return *id;
        }
        let id = self.add(TargetType::Struct { name, size, members });
        self.structs.insert(name, id);
        id
    }
}

/// A type that can appear in a view struct: it describes itself in the target BTF and copies
/// itself to and from the bytes the program sees.
pub trait ViewType {
    const SIZE: usize;
    fn register(btf: &mut TargetBtf) -> usize;
    fn store(&self, buf: &mut [u8]);
    fn load(&mut self, buf: &[u8]);
}

macro_rules! view_int {
    ($($t:ty, $signed:expr);* $(;)?) => {$(
        impl ViewType for $t {
            const SIZE: usize = core::mem::size_of::<$t>();
            fn register(btf: &mut TargetBtf) -> usize { btf.int(Self::SIZE, $signed) }
            #[inline]
            fn store(&self, buf: &mut [u8]) { buf[..Self::SIZE].copy_from_slice(&self.to_le_bytes()); }
            #[inline]
            fn load(&mut self, buf: &[u8]) {
                let mut b = [0u8; core::mem::size_of::<$t>()];
                b.copy_from_slice(&buf[..Self::SIZE]);
                *self = <$t>::from_le_bytes(b);
            }
        }
    )*};
}
view_int!(u8, false; u16, false; u32, false; u64, false; i8, true; i16, true; i32, true; i64, true);

impl ViewType for bool {
    const SIZE: usize = 1;
    fn register(btf: &mut TargetBtf) -> usize {
        btf.int(1, false)
    }
    #[inline]
    fn store(&self, buf: &mut [u8]) {
        buf[0] = *self as u8;
    }
    #[inline]
    fn load(&mut self, buf: &[u8]) {
        *self = buf[0] != 0;
    }
}

impl<T: ViewType, const N: usize> ViewType for [T; N] {
    const SIZE: usize = T::SIZE * N;
    fn register(btf: &mut TargetBtf) -> usize {
        let elem = T::register(btf);
        btf.array(elem, N)
    }
    #[inline]
    fn store(&self, buf: &mut [u8]) {
        let buf = &mut buf[..Self::SIZE];
        for (i, e) in self.iter().enumerate() {
            e.store(&mut buf[i * T::SIZE..]);
        }
    }
    #[inline]
    fn load(&mut self, buf: &[u8]) {
        let buf = &buf[..Self::SIZE];
        for (i, e) in self.iter_mut().enumerate() {
            e.load(&buf[i * T::SIZE..]);
        }
    }
}

/// Declares a `#[repr(C)]` view struct and its target BTF description from one list of fields.
macro_rules! view_struct {
    ($(#[$m:meta])* $btf_name:literal pub struct $name:ident { $($(#[$fm:meta])* pub $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq)]
        pub struct $name { $($(#[$fm])* pub $field: $ty),* }

        impl ViewType for $name {
            const SIZE: usize = core::mem::size_of::<$name>();
            fn register(btf: &mut TargetBtf) -> usize {
                if let Some(id) = btf.struct_by_name($btf_name) {
                    return id;
                }
                let members = vec![$(TargetMember {
                    name: stringify!($field),
                    offset: core::mem::offset_of!($name, $field),
                    ty: <$ty as ViewType>::register(btf),
                }),*];
                btf.add_struct($btf_name, Self::SIZE, members)
            }
            // The buffer is cut to the struct's size first, so that every member's offset is
            // checked against a constant (and the checks fold away once inlined).
            #[inline]
            fn store(&self, buf: &mut [u8]) {
                let buf = &mut buf[..Self::SIZE];
                $(self.$field.store(&mut buf[core::mem::offset_of!($name, $field)..]);)*
            }
            #[inline]
            fn load(&mut self, buf: &[u8]) {
                let buf = &buf[..Self::SIZE];
                $(self.$field.load(&buf[core::mem::offset_of!($name, $field)..]);)*
            }
        }
    };
}

view_struct! {
    /// `struct sock`: the fields a congestion control reads or writes.
    "sock" pub struct Sock {
        pub sk_pacing_rate: u64,
        pub sk_max_pacing_rate: u64,
        pub sk_pacing_status: u32,
        pub sk_gso_max_size: u32,
        pub sk_pacing_shift: u8,
    }
}

view_struct! {
    /// `struct inet_sock`.
    "inet_sock" pub struct InetSock {
        pub sk: Sock,
    }
}

view_struct! {
    /// The kernel's anonymous `icsk_ack` struct of `struct inet_connection_sock`.
    "icsk_ack" pub struct IcskAck {
        pub pending: u8,
        pub quick: u8,
        pub pingpong: u8,
        pub retry: u8,
        pub lrcvtime: u32,
        pub last_seg_size: u16,
        pub rcv_mss: u16,
    }
}

view_struct! {
    /// `struct inet_connection_sock`. `icsk_ca_state` is a whole byte (kernel: a 5-bit field).
    "inet_connection_sock" pub struct InetConnectionSock {
        pub icsk_inet: InetSock,
        pub icsk_rto: u32,
        pub icsk_ca_state: u8,
        pub icsk_ca_initialized: u8,
        pub icsk_retransmits: u8,
        pub icsk_pending: u8,
        pub icsk_backoff: u8,
        pub icsk_ack: IcskAck,
        /// `ICSK_CA_PRIV_SIZE` = 104 bytes.
        pub icsk_ca_priv: [u64; 13],
    }
}

view_struct! {
    /// `struct minmax_sample` (lib/win_minmax.c).
    "minmax_sample" pub struct MinmaxSample {
        pub t: u32,
        pub v: u32,
    }
}

view_struct! {
    /// `struct minmax`.
    "minmax" pub struct Minmax {
        pub s: [MinmaxSample; 3],
    }
}

view_struct! {
    /// `struct tcp_sock`: what the kernel's and the selftests' congestion controls read.
    /// `is_cwnd_limited` is a whole byte (kernel: a 1-bit field).
    "tcp_sock" pub struct TcpSock {
        pub inet_conn: InetConnectionSock,
        pub snd_cwnd: u32,
        pub snd_cwnd_cnt: u32,
        pub snd_cwnd_clamp: u32,
        pub snd_cwnd_stamp: u32,
        pub snd_ssthresh: u32,
        pub prior_cwnd: u32,
        pub prior_ssthresh: u32,
        pub mss_cache: u32,
        pub srtt_us: u32,
        pub mdev_us: u32,
        pub rttvar_us: u32,
        pub rtt_min: Minmax,
        pub packets_out: u32,
        pub sacked_out: u32,
        pub lost_out: u32,
        pub retrans_out: u32,
        pub max_packets_out: u32,
        pub is_cwnd_limited: u8,
        pub ecn_flags: u8,
        pub delivered: u32,
        pub delivered_ce: u32,
        pub lost: u32,
        pub app_limited: u32,
        pub rate_delivered: u32,
        pub rate_interval_us: u32,
        pub delivered_mstamp: u64,
        pub tcp_mstamp: u64,
        pub tcp_clock_cache: u64,
        pub tcp_wstamp_ns: u64,
        pub bytes_acked: u64,
        pub snd_nxt: u32,
        pub snd_una: u32,
        pub snd_wnd: u32,
        pub rcv_nxt: u32,
        pub rcv_wnd: u32,
        pub lsndtime: u32,
        pub high_seq: u32,
        pub undo_marker: u32,
        pub reordering: u32,
        pub prr_delivered: u32,
        pub prr_out: u32,
        pub total_retrans: u32,
        pub segs_out: u32,
        pub data_segs_out: u32,
        pub tlp_high_seq: u32,
    }
}

view_struct! {
    /// `struct ack_sample` (the argument of `pkts_acked`).
    "ack_sample" pub struct AckSample {
        pub pkts_acked: u32,
        pub rtt_us: i32,
        pub in_flight: u32,
    }
}

view_struct! {
    /// `struct rate_sample` of kernel 6.18 (the last argument of `cong_control`).
    "rate_sample" pub struct RateSample {
        pub prior_mstamp: u64,
        pub prior_delivered: u32,
        pub prior_delivered_ce: u32,
        pub delivered: i32,
        pub delivered_ce: i32,
        pub interval_us: i64,
        pub snd_interval_us: u32,
        pub rcv_interval_us: u32,
        pub rtt_us: i64,
        pub losses: i32,
        pub acked_sacked: u32,
        pub prior_in_flight: u32,
        pub last_end_seq: u32,
        pub is_app_limited: bool,
        pub is_retrans: bool,
        pub is_ack_delayed: bool,
    }
}

impl TcpSock {
    /// A socket as `tcp_init_sock` leaves it: window 10, no ssthresh (`TCP_INFINITE_SSTHRESH`),
    /// no clamp, no RTT sample (`rtt_min` = ~0U), pacing shift 10, no pacing cap.
    pub fn initial(mss: u32) -> TcpSock {
        let mut tp = TcpSock {
            snd_cwnd: 10,
            snd_ssthresh: 0x7fff_ffff,
            snd_cwnd_clamp: !0,
            mss_cache: mss,
            reordering: 3,
            ..TcpSock::default()
        };
        for s in tp.rtt_min.s.iter_mut() {
            s.v = !0;
        }
        tp.inet_conn.icsk_inet.sk.sk_pacing_shift = 10;
        tp.inet_conn.icsk_inet.sk.sk_max_pacing_rate = !0;
        tp.inet_conn.icsk_inet.sk.sk_gso_max_size = 65536;
        tp
    }
}

/// Byte offsets within [`TcpSock`] of a few fields, for the kfuncs and the writable set.
pub(crate) mod offsets {
    use super::*;
    use core::mem::offset_of;

    pub const SOCK: usize = offset_of!(TcpSock, inet_conn) + offset_of!(InetConnectionSock, icsk_inet)
        + offset_of!(InetSock, sk);
    pub const ICSK: usize = offset_of!(TcpSock, inet_conn);
    pub const SNDCWND: usize = offset_of!(TcpSock, snd_cwnd);
    pub const SND_CWND_CNT: usize = offset_of!(TcpSock, snd_cwnd_cnt);
    pub const SND_CWND_CLAMP: usize = offset_of!(TcpSock, snd_cwnd_clamp);
    pub const SND_SSTHRESH: usize = offset_of!(TcpSock, snd_ssthresh);
    pub const PRIOR_CWND: usize = offset_of!(TcpSock, prior_cwnd);
    pub const MAX_PACKETS_OUT: usize = offset_of!(TcpSock, max_packets_out);
    pub const IS_CWND_LIMITED: usize = offset_of!(TcpSock, is_cwnd_limited);

    /// The fields `net/ipv4/bpf_tcp_ca.c` (`bpf_tcp_ca_btf_struct_access`) lets a program
    /// write, as (name, first byte, end byte) in [`TcpSock`].
    pub fn writable() -> Vec<(&'static str, usize, usize)> {
        let sk = |off: usize, size: usize| (SOCK + off, SOCK + off + size);
        let icsk = |off: usize, size: usize| (ICSK + off, ICSK + off + size);
        let tp = |off: usize, size: usize| (off, off + size);
        let mut v = Vec::new();
        let mut add = |name, (a, b): (usize, usize)| v.push((name, a, b));
        add("sk_pacing_rate", sk(offset_of!(Sock, sk_pacing_rate), 8));
        add("sk_pacing_status", sk(offset_of!(Sock, sk_pacing_status), 4));
        add("icsk_ca_priv", icsk(offset_of!(InetConnectionSock, icsk_ca_priv), 104));
        add("icsk_ack.pending", icsk(offset_of!(InetConnectionSock, icsk_ack) + offset_of!(IcskAck, pending), 1));
        add("snd_cwnd", tp(offset_of!(TcpSock, snd_cwnd), 4));
        add("snd_cwnd_cnt", tp(offset_of!(TcpSock, snd_cwnd_cnt), 4));
        add("snd_ssthresh", tp(offset_of!(TcpSock, snd_ssthresh), 4));
        add("ecn_flags", tp(offset_of!(TcpSock, ecn_flags), 1));
        add("app_limited", tp(offset_of!(TcpSock, app_limited), 4));
        v
    }

    /// Reads back from `buf` (the bytes of a [`TcpSock`]) only the fields of [`writable`]: after
    /// a call nothing else can differ (programs may store only there, and the kfuncs write only
    /// `snd_cwnd` and `snd_cwnd_cnt`). A `buf` of another size changes nothing.
    pub fn load_writable(tp: &mut TcpSock, buf: &[u8]) {
        if buf.len() != TcpSock::SIZE {
            return;
        }
        let sk = &mut tp.inet_conn.icsk_inet.sk;
        sk.sk_pacing_rate.load(&buf[SOCK + offset_of!(Sock, sk_pacing_rate)..]);
        sk.sk_pacing_status.load(&buf[SOCK + offset_of!(Sock, sk_pacing_status)..]);
        let icsk = &mut tp.inet_conn;
        icsk.icsk_ca_priv.load(&buf[ICSK + offset_of!(InetConnectionSock, icsk_ca_priv)..]);
        icsk.icsk_ack.pending.load(&buf[ICSK + offset_of!(InetConnectionSock, icsk_ack) + offset_of!(IcskAck, pending)..]);
        tp.snd_cwnd.load(&buf[SNDCWND..]);
        tp.snd_cwnd_cnt.load(&buf[SND_CWND_CNT..]);
        tp.snd_ssthresh.load(&buf[SND_SSTHRESH..]);
        tp.ecn_flags.load(&buf[offset_of!(TcpSock, ecn_flags)..]);
        tp.app_limited.load(&buf[offset_of!(TcpSock, app_limited)..]);
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// load_writable reads exactly the bytes of `writable()`: a view loaded whole from bytes
        /// that differ from the original only inside writable ranges equals the original
        /// with load_writable of those bytes; bytes outside them are never read.
        #[test]
        fn load_writable_reads_exactly_the_writable_fields() {
            let orig = TcpSock::initial(1448);
            let mut bytes = to_bytes(&orig);
            let w = writable();
            let inside = |i: usize| w.iter().any(|(_, s, e)| (*s..*e).contains(&i));
            for (i, b) in bytes.iter_mut().enumerate() {
                if inside(i) {
                    *b = (i as u8).wrapping_mul(37) ^ 0x5a;
                }
            }
            let mut whole = orig;
            whole.load(&bytes);
            let mut part = orig;
            load_writable(&mut part, &bytes);
            assert_eq!(whole, part);
            // bytes outside the writable fields are not read
            for (i, b) in bytes.iter_mut().enumerate() {
                if !inside(i) {
                    *b = 0xee;
                }
            }
            let mut part2 = orig;
            load_writable(&mut part2, &bytes);
            assert_eq!(part, part2);
        }
    }
}

/// The bytes a view presents to a program.
#[cfg(test)]
pub(crate) fn to_bytes<T: ViewType>(v: &T) -> Vec<u8> {
    let mut buf = vec![0u8; T::SIZE];
    v.store(&mut buf);
    buf
}
