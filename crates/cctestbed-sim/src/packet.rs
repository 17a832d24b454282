//! Packets are small `Copy` values: no allocation per packet anywhere on the hot path.

use crate::time::Nanos;

/// A data segment. Sequence numbers count segments, not bytes: every segment carries one MSS
/// except possibly the last of a fixed-size transfer, as with TSO off in Linux.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataPacket {
    pub flow: u32,
    pub seq: u64,
    /// Bytes on the wire (IP packet).
    pub size: u32,
    /// TCP payload bytes.
    pub payload: u32,
    /// Sender's transmit time (carried as the TCP timestamp option would be).
    pub sent_at: Nanos,
    /// The IP header's ECN field (RFC 3168 section 5).
    pub ecn: Ecn,
    /// The TCP header's CWR flag: the sender reduced its window after an ECN echo.
    pub cwr: bool,
    /// The timestamp echo (TSecr): the send time of the latest ACK the sender had taken in,
    /// `None` before any (the receiver's RTT is measured from it).
    pub ts_echo: Option<Nanos>,
}

/// The two ECN bits of the IP header (RFC 3168 section 5): Not-ECT, ECT(1), ECT(0), CE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ecn {
    #[default]
    NotEct,
    /// ECT(1): the L4S identifier (RFC 9331).
    Ect1,
    /// ECT(0): classic ECN-capable transport.
    Ect0,
    /// Congestion Experienced, set by a router instead of a drop.
    Ce,
}

impl Ecn {
    /// Whether a router may mark this packet instead of dropping it (ECT(0), ECT(1) or CE
    /// already, as Linux `INET_ECN_set_ce` accepts).
    pub fn is_capable(self) -> bool {
        self != Ecn::NotEct
    }
}

/// Sequence numbers that mark the handshake's packets on the data path: the SYN (and, as the
/// ACK point, the SYN-ACK) and the final ACK. They carry no data; data segments count from 0.
const SYN_SEQ: u64 = u64::MAX;
const HANDSHAKE_ACK_SEQ: u64 = u64::MAX - 1;
/// Sequence numbers from here up to the handshake's mark ACK carriers ([`DataPacket::ack_carrier`]);
/// data segments never reach them (2^63 segments).
const ACK_CARRIER_TAG: u64 = 1 << 63;
/// A SYN or SYN-ACK as Linux sends it: IPv4 (20) + TCP (20) + MSS (4), SACK-permitted and
/// timestamps (12, with padding), window scale (4) options.
pub const SYN_SIZE: u32 = 60;
/// A pure ACK with the timestamp option: IPv4 (20) + TCP (20) + timestamps (12).
pub const ACK_SIZE: u32 = 52;

impl DataPacket {
    /// The connection's SYN, sent at `now` (its timestamp option carries `now`).
    pub fn syn(flow: u32, now: Nanos) -> Self {
        // Handshake packets are never ECN-capable (RFC 3168 section 6.1.1).
        DataPacket { flow, seq: SYN_SEQ, size: SYN_SIZE, payload: 0, sent_at: now, ecn: Ecn::NotEct, cwr: false, ts_echo: None }
    }

    /// The handshake's final ACK, sent when the SYN-ACK arrives, just ahead of the data.
    pub fn handshake_ack(flow: u32, now: Nanos) -> Self {
        DataPacket { flow, seq: HANDSHAKE_ACK_SEQ, size: ACK_SIZE, payload: 0, sent_at: now, ecn: Ecn::NotEct, cwr: false, ts_echo: None }
    }

    pub fn is_syn(&self) -> bool {
        self.seq == SYN_SEQ
    }

    /// What stands for a pure ACK (or SYN-ACK, or ping reply) of `flow` in a bottleneck's
    /// queue: an [`ACK_SIZE`] packet, not ECN-capable, whose sequence number carries `id`, the
    /// key under which the simulation keeps the ACK itself until the packet leaves the queue.
    /// The queue disciplines thus see ACKs as the small packets they are, with one queue model.
    pub fn ack_carrier(flow: u32, id: u64, now: Nanos) -> Self {
        debug_assert!(id < HANDSHAKE_ACK_SEQ - ACK_CARRIER_TAG);
        DataPacket { flow, seq: ACK_CARRIER_TAG | id, size: ACK_SIZE, payload: 0, sent_at: now, ecn: Ecn::NotEct, cwr: false, ts_echo: None }
    }

    /// The id of the ACK this packet stands for, if it is an [`Self::ack_carrier`].
    pub fn carried_ack(&self) -> Option<u64> {
        (self.seq >= ACK_CARRIER_TAG && self.seq < HANDSHAKE_ACK_SEQ).then(|| self.seq - ACK_CARRIER_TAG)
    }

    pub fn is_handshake_ack(&self) -> bool {
        self.seq == HANDSHAKE_ACK_SEQ
    }
}

/// At most this many SACK blocks per ACK (Linux sends 3 alongside the timestamp option).
pub const MAX_SACK_BLOCKS: usize = 3;

/// A pure ACK: cumulative point plus SACK blocks, each `[start, end)` in segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckPacket {
    pub flow: u32,
    /// Next segment expected (cumulative ACK).
    pub ack: u64,
    pub sacks: [(u64, u64); MAX_SACK_BLOCKS],
    pub n_sacks: u8,
    /// Sent by the receiver's delayed-ACK or compressed-SACK timer rather than at once (for
    /// inspection; the sender, like Linux, cannot see it and uses FLAG_ACK_MAYBE_DELAYED).
    pub delayed: bool,
    /// Echoed timestamp (TSecr): the `sent_at` the receiver holds as `ts_recent`, `None`
    /// before any data arrived.
    pub tsecr: Option<Nanos>,
    /// The TCP ECE flag: the receiver echoes a CE mark (RFC 3168 section 6.1.3).
    pub ece: bool,
    /// The window the receiver offers beyond `ack`, in bytes (what the header's window field
    /// carries, shifted by the window scale).
    pub wnd: u64,
    /// When the receiver sent it (its timestamp value, TSval).
    pub ts_val: Nanos,
}

impl AckPacket {
    /// The SYN-ACK answering a SYN, echoing the SYN's timestamp.
    /// `wnd` is the SYN-ACK's window (never scaled), `now` when it leaves.
    pub fn syn_ack(flow: u32, syn_sent_at: Nanos, wnd: u64, now: Nanos) -> Self {
        AckPacket { flow, ack: SYN_SEQ, sacks: [(0, 0); MAX_SACK_BLOCKS], n_sacks: 0, delayed: false, tsecr: Some(syn_sent_at), ece: false, wnd, ts_val: now }
    }

    pub fn is_syn_ack(&self) -> bool {
        self.ack == SYN_SEQ
    }

    pub fn sack_blocks(&self) -> &[(u64, u64)] {
        &self.sacks[..self.n_sacks as usize]
    }
}
