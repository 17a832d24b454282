//! What the link model needs from a real frame: its IPv4 size, ECN field, flow and TCP payload,
//! and writing a router's CE mark into it.
//!
//! Frames are Ethernet II (the topology's veths carry no VLAN tags) with IPv4 at byte 14.
//! Headers are read with `etherparse`, which validates them; a frame it refuses is not IPv4
//! to the model and passes on the delay line alone, as ARP would.
//!
//! CE marking is Linux `IP_ECN_set_ce` (`include/net/inet_ecn.h`): only an ECN-capable packet
//! (ECT(0), ECT(1)) is marked, and the header checksum is updated incrementally, RFC 1624
//! equation 3, `HC' = ~(~HC + ~m + m')`, over the 16-bit word that holds the TOS byte.
//! Equation 3 never produces the checksum `-0` (0x0000 from a header whose sum is not
//! zero), the fault of RFC 1141's form that RFC 1624 corrects.

use ccsim::packet::Ecn;
use etherparse::{IpNumber, Ipv4HeaderSlice};

/// Ethernet II header length.
pub const ETH_HEADER: usize = 14;
const ETH_P_IP: u16 = 0x0800;

/// An IPv4 frame as the link model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Frame {
    /// The IP packet's length (the header's total length), as the simulator counts a packet.
    pub ip_len: u32,
    pub ecn: Ecn,
    /// TCP or UDP ports, if the packet is either (and not a later fragment).
    pub ports: Option<(u16, u16)>,
    /// TCP payload bytes (0 for anything else).
    pub payload: u32,
}

/// The ECN codepoint of an IP header's two low TOS bits (RFC 3168 section 5).
pub fn ecn_of(bits: u8) -> Ecn {
    match bits & 3 {
        0 => Ecn::NotEct,
        1 => Ecn::Ect1,
        2 => Ecn::Ect0,
        _ => Ecn::Ce,
    }
}

/// Reads an IPv4 frame's fields; `None` for anything else or a malformed header.
pub fn parse(frame: &[u8]) -> Option<Ipv4Frame> {
    if frame.len() < ETH_HEADER + 20 || u16::from_be_bytes([frame[12], frame[13]]) != ETH_P_IP {
        return None;
    }
    let ip = Ipv4HeaderSlice::from_slice(&frame[ETH_HEADER..]).ok()?;
    let ip_len = ip.total_len() as u32;
    let l4 = &frame[ETH_HEADER + ip.slice().len()..];
    let first_fragment = ip.fragments_offset().value() == 0;
    let proto = ip.protocol();
    let ports = if first_fragment && (proto == IpNumber::TCP || proto == IpNumber::UDP) && l4.len() >= 4 {
        Some((u16::from_be_bytes([l4[0], l4[1]]), u16::from_be_bytes([l4[2], l4[3]])))
    } else {
        None
    };
    let payload = if first_fragment && proto == IpNumber::TCP && l4.len() >= 13 {
        let tcp_header = ((l4[12] >> 4) as u32) * 4;
        ip_len.saturating_sub(ip.slice().len() as u32 + tcp_header)
    } else {
        0
    };
    Some(Ipv4Frame { ip_len, ecn: ecn_of(ip.ecn().value()), ports, payload })
}

/// Sets CE in an IPv4 frame's header and updates its checksum (RFC 1624 eq. 3). Returns false,
/// changing nothing, if the packet is not ECN-capable or already CE (`IP_ECN_set_ce`).
pub fn set_ce(frame: &mut [u8]) -> bool {
    if frame.len() < ETH_HEADER + 20 {
        return false;
    }
    let h = &mut frame[ETH_HEADER..];
    let ecn = h[1] & 3;
    if ecn == 0 || ecn == 3 {
        return false;
    }
    let old = u16::from_be_bytes([h[0], h[1]]);
    h[1] |= 3;
    let new = u16::from_be_bytes([h[0], h[1]]);
    let hc = u16::from_be_bytes([h[10], h[11]]);
    let sum = checksum_update(hc, old, new);
    h[10..12].copy_from_slice(&sum.to_be_bytes());
    true
}

/// RFC 1624 equation 3: the checksum `hc` after one 16-bit word of the header changes from
/// `old` to `new`, in one's complement arithmetic.
pub fn checksum_update(hc: u16, old: u16, new: u16) -> u16 {
    let mut sum = (!hc) as u32 + (!old) as u32 + new as u32;
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{Ipv4Header, PacketBuilder};

    /// A TCP/IPv4 frame with `payload` bytes and the given TOS byte, its checksum computed.
    fn tcp_frame(tos: u8, payload: usize, ident: u16) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([10, 1, 2, 1], [10, 1, 2, 129], 64)
            .tcp(20_003, 5201, 1, 65535);
        let mut out = Vec::new();
        b.write(&mut out, &vec![0xab; payload]).unwrap();
        // Set TOS and the identification, then recompute the header checksum from scratch.
        out[ETH_HEADER + 1] = tos;
        out[ETH_HEADER + 4..ETH_HEADER + 6].copy_from_slice(&ident.to_be_bytes());
        let sum = full_checksum(&out);
        out[ETH_HEADER + 10..ETH_HEADER + 12].copy_from_slice(&sum.to_be_bytes());
        out
    }

    fn full_checksum(frame: &[u8]) -> u16 {
        let (h, _) = Ipv4Header::from_slice(&frame[ETH_HEADER..]).unwrap();
        h.calc_header_checksum()
    }

    fn stored_checksum(frame: &[u8]) -> u16 {
        u16::from_be_bytes([frame[ETH_HEADER + 10], frame[ETH_HEADER + 11]])
    }

    #[test]
    fn ce_is_set_on_ect0_and_ect1_with_the_checksum_recomputed_from_scratch() {
        for (tos, dscp) in [(0b10, 0u8), (0b01, 0), (0b10 | (46 << 2), 46), (0b01 | (8 << 2), 8)] {
            let mut f = tcp_frame(tos, 1448, 0x1234);
            assert!(set_ce(&mut f), "tos {tos:#x}");
            assert_eq!(f[ETH_HEADER + 1] & 3, 3, "CE");
            assert_eq!(f[ETH_HEADER + 1] >> 2, dscp, "DSCP kept");
            assert_eq!(stored_checksum(&f), full_checksum(&f));
            assert_eq!(parse(&f).unwrap().ecn, Ecn::Ce);
        }
    }

    #[test]
    fn not_ect_and_ce_packets_are_left_alone() {
        for tos in [0u8, 3, 0xb8, 0xbb] {
            let f0 = tcp_frame(tos, 100, 7);
            let mut f = f0.clone();
            assert!(!set_ce(&mut f));
            assert_eq!(f, f0);
        }
        assert!(!set_ce(&mut [0u8; 20]));
    }

    #[test]
    fn incremental_update_equals_full_recomputation_over_many_headers() {
        // Every identification value sweeps the checksum through its whole range, including
        // headers whose checksum is 0x0000 or 0xffff before or after the mark.
        let mut edges = 0;
        for ident in 0..=u16::MAX {
            for tos in [0b01u8, 0b10] {
                let mut f = tcp_frame(tos, 40 + (ident as usize % 1400), ident);
                let before = stored_checksum(&f);
                edges += (before == 0 || before == 0xffff) as u32;
                assert!(set_ce(&mut f));
                assert_eq!(stored_checksum(&f), full_checksum(&f), "ident {ident} tos {tos}");
            }
        }
        assert!(edges > 0, "the sweep reached the checksum's edge values");
    }

    #[test]
    fn rfc_1624_example() {
        // RFC 1624 section 4: HC = 0xdd2f, m = 0x5555 -> m' = 0x3285 gives HC' = 0x0000.
        assert_eq!(checksum_update(0xdd2f, 0x5555, 0x3285), 0x0000);
        // and the word changing back restores it
        assert_eq!(checksum_update(0x0000, 0x3285, 0x5555), 0xdd2f);
    }

    #[test]
    fn parse_reads_size_ecn_ports_and_tcp_payload() {
        let f = tcp_frame(0b10, 1448, 1);
        let p = parse(&f).unwrap();
        assert_eq!(p, Ipv4Frame { ip_len: 1488, ecn: Ecn::Ect0, ports: Some((20_003, 5201)), payload: 1448 });
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(parse(&arp), None);
        assert_eq!(parse(&f[..30]), None);
        let b = PacketBuilder::ethernet2([2; 6], [3; 6]).ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64).udp(20_001, 5201);
        let mut u = Vec::new();
        b.write(&mut u, &[0u8; 100]).unwrap();
        let p = parse(&u).unwrap();
        assert_eq!((p.ip_len, p.ports, p.payload, p.ecn), (128, Some((20_001, 5201)), 0, Ecn::NotEct));
    }
}
