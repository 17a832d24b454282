//! Packets are small `Copy` values: no allocation per packet anywhere on the hot path.

use crate::config::Nanos;

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
}

impl AckPacket {
    pub fn sack_blocks(&self) -> &[(u64, u64)] {
        &self.sacks[..self.n_sacks as usize]
    }
}
