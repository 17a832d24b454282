//! TCP machinery shared by every congestion control: sender, receiver, RTT/RTO.

pub mod rcvbuf;
pub mod receiver;
pub mod rtt;
pub mod sender;
pub mod tso;
