//! The example agents and the shop service they act on.
//!
//! - [`checkout`]: the checkout agent (`cargo run --example checkout`).
//! - [`shop`]: the small shop service its tools call, with idempotency keys and an effect log.

pub mod checkout;
pub mod shop;
