//! Simulated time. Every module keeps time in [`Nanos`]; it lives here, beneath them all, and
//! not in the trial's configuration, which is one of its users.

/// Simulated time and durations, in integer nanoseconds (never a float: the same trial gives the
/// same order of events on every machine).
pub type Nanos = i64;
