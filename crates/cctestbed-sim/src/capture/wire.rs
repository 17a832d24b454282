//! The simulator's packets as real Ethernet II / IPv4 / TCP frames.
//!
//! Addressing (one host per sender and per receiver, as on a dumbbell of machines):
//! flow `i`'s sender is 10.1.0.0 + (i + 1), its receiver 10.2.0.0 + (i + 1), both on port
//! 5201 at the receiver and 40000 + i mod 20000 at the sender; MAC addresses 02:01:<i> and
//! 02:02:<i>, the router's two ports 02:00:00:00:00:01 (sender side) and :02 (receiver side).
//! Hosts send with TTL 64; a packet that crossed the router carries 63.
//!
//! TCP: sequence and ACK numbers in bytes from a per-flow initial sequence number; data
//! segments carry the timestamps option (RFC 7323, NOP NOP TS) when `mtu - mss` leaves room
//! for it (52 bytes of headers, Linux's default), ACKs carry timestamps and up to three SACK
//! blocks (RFC 2018, NOP NOP SACK, as Linux lays them out). Payload bytes are zeros; checksums
//! are computed over the whole packet. The TS clock ticks in milliseconds (Linux's
//! `tcp_time_stamp_ms`). The ECN field of the IP header comes from [`Ecn`]: the codepoint the
//! simulated packet carries where it is captured (a packet an AQM marked is CE from the
//! router's egress on); TCP's ECE and CWR flags are the simulated segments' own.

use crate::time::Nanos;
pub use crate::packet::Ecn;
use etherparse::{IpEcn, IpNumber, Ipv4Header, TcpHeader, TcpOptionElement};

/// Receiver port of every flow (iperf's, as the kernel backend's sinks use).
pub const RCV_PORT: u16 = 5201;
/// Window scale both ends announce on the SYN (Linux's for a few MB of receive buffer).
pub const WSCALE: u8 = 7;
pub const TTL_HOST: u8 = 64;
const ETH_LEN: usize = 14;
/// Zeros standing in for payload bytes: they add nothing to the checksum.
static ZEROS: [u8; 65536] = [0; 65536];

/// The IP header's ECN field for a simulated packet's codepoint.
fn ip_ecn(e: Ecn) -> IpEcn {
    match e {
        Ecn::NotEct => IpEcn::NotEct,
        Ecn::Ect1 => IpEcn::Ect1,
        Ecn::Ect0 => IpEcn::Ect0,
        Ecn::Ce => IpEcn::CongestionExperienced,
    }
}

/// A host of the dumbbell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    Sender(u32),
    Receiver(u32),
    /// The router's port toward the senders (0) or toward the receivers (1).
    Router(u8),
}

impl Host {
    pub fn ip(self) -> [u8; 4] {
        match self {
            Host::Sender(i) => (0x0a01_0000u32 + i + 1).to_be_bytes(),
            Host::Receiver(i) => (0x0a02_0000u32 + i + 1).to_be_bytes(),
            Host::Router(p) => [10, 0, 0, p + 1],
        }
    }

    pub fn mac(self) -> [u8; 6] {
        let (kind, i) = match self {
            Host::Sender(i) => (1u8, i),
            Host::Receiver(i) => (2, i),
            Host::Router(p) => (0, p as u32 + 1),
        };
        let b = i.to_be_bytes();
        [0x02, kind, b[0], b[1], b[2], b[3]]
    }
}

pub fn sender_port(flow: u32) -> u16 {
    40000 + (flow % 20000) as u16
}

/// What one TCP segment carries, in wire units (bytes, 32-bit sequence space).
#[derive(Debug, Clone, Default)]
pub struct Segment {
    pub seq: u32,
    pub ack: Option<u32>,
    pub syn: bool,
    pub window: u16,
    pub payload: u32,
    /// TSval and TSecr (ms), when the timestamps option is carried.
    pub ts: Option<(u32, u32)>,
    pub sacks: Vec<(u32, u32)>,
    /// On a SYN: MSS, window scale, SACK permitted.
    pub syn_mss: Option<u16>,
    /// ECN codepoint of the IP header.
    pub ecn: Ecn,
    /// TCP's ECN flags (RFC 3168): ECE on ACKs echoing a CE mark, CWR on the data segment after
    /// the sender reduced its window; on a SYN both (ECN setup), on a SYN-ACK ECE.
    pub ece: bool,
    pub cwr: bool,
    pub ip_id: u16,
}

/// The TS option's clock: milliseconds of simulated time, plus one so that 0 never appears.
pub fn ts_ms(t: Nanos) -> u32 {
    ((t / 1_000_000) as u64).wrapping_add(1) as u32
}

/// Encodes one frame from `src` to `dst` (the hosts whose addresses the IP and TCP headers
/// carry), source and destination ports, sent on the link between `l2_src` and `l2_dst`, into `out` (cleared first). Returns the
/// frame's full length on the wire (before any snap length).
pub fn encode(out: &mut Vec<u8>, src: Host, dst: Host, (sport, dport): (u16, u16), l2: (Host, Host), ttl: u8, s: &Segment) -> u32 {
    out.clear();
    let mut tcp = TcpHeader::new(sport, dport, s.seq, s.window);
    tcp.syn = s.syn;
    if let Some(a) = s.ack {
        tcp.ack = true;
        tcp.acknowledgment_number = a;
    }
    tcp.psh = s.payload > 0;
    tcp.ece = s.ece;
    tcp.cwr = s.cwr;
    let mut opts: [TcpOptionElement; 8] = std::array::from_fn(|_| TcpOptionElement::Noop);
    let mut n = 0;
    let mut push = |o: TcpOptionElement, n: &mut usize| {
        opts[*n] = o;
        *n += 1;
    };
    if let Some(mss) = s.syn_mss {
        // Linux's SYN layout: MSS, SACK_PERM, TS, NOP, WS.
        push(TcpOptionElement::MaximumSegmentSize(mss), &mut n);
        push(TcpOptionElement::SelectiveAcknowledgementPermitted, &mut n);
        if let Some((v, e)) = s.ts {
            push(TcpOptionElement::Timestamp(v, e), &mut n);
        }
        push(TcpOptionElement::Noop, &mut n);
        push(TcpOptionElement::WindowScale(WSCALE), &mut n);
    } else {
        if let Some((v, e)) = s.ts {
            push(TcpOptionElement::Noop, &mut n);
            push(TcpOptionElement::Noop, &mut n);
            push(TcpOptionElement::Timestamp(v, e), &mut n);
        }
        if !s.sacks.is_empty() {
            push(TcpOptionElement::Noop, &mut n);
            push(TcpOptionElement::Noop, &mut n);
            let b = |i: usize| s.sacks.get(i).copied();
            let first = s.sacks[0];
            push(TcpOptionElement::SelectiveAcknowledgement(first, [b(1), b(2), b(3)]), &mut n);
        }
    }
    tcp.set_options(&opts[..n]).expect("options fit in 40 bytes");
    let payload = &ZEROS[..s.payload as usize];
    let mut ip = Ipv4Header::new(tcp.header_len_u16() + s.payload as u16, ttl, IpNumber::TCP, src.ip(), dst.ip())
        .expect("IP packet within 64 KB");
    ip.identification = s.ip_id;
    ip.dont_fragment = true;
    ip.ecn = ip_ecn(s.ecn);
    ip.header_checksum = ip.calc_header_checksum();
    tcp.checksum = tcp.calc_checksum_ipv4(&ip, payload).expect("TCP segment within 64 KB");
    out.extend_from_slice(&l2.1.mac());
    out.extend_from_slice(&l2.0.mac());
    out.extend_from_slice(&0x0800u16.to_be_bytes());
    ip.write(out).expect("writing to a Vec");
    tcp.write(out).expect("writing to a Vec");
    (ETH_LEN + ip.total_len as usize) as u32
}
