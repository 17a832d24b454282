//! Captures read back into per-flow series: see the module documentation of `capture`.
