//! TCP machinery shared by every congestion control: sender, receiver, RTT/RTO.

pub mod rcvbuf;
pub mod receiver;
pub mod rtt;
pub mod sender;
pub mod tso;

use crate::time::Nanos;

/// Linux's TCP timestamps tick in milliseconds (`TCP_TS_HZ` = 1000): the unit of TSval and
/// TSecr on the wire, so of every RTT sample taken from them.
pub const TCP_TS_TICK: Nanos = 1_000_000;
