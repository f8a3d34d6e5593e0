//! The in-process reliability battery (issue 7, items 5–8, 10, 11). Reduced sizes under
//! `cargo test -p battery`; full sizes with `BATTERY_FULL=1` (see RELIABILITY.md).

mod corrupt;
mod mediation;
mod poison;
mod replay;
mod saga;
mod secrets;
