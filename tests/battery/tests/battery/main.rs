//! The in-process reliability battery (RELIABILITY.md describes each part). Reduced sizes under
//! `cargo test -p battery`; full sizes with `BATTERY_FULL=1` (see RELIABILITY.md).

mod corrupt;
mod mediation;
mod poison;
mod replay;
mod saga;
mod secrets;
