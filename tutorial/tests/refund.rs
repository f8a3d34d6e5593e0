//! The tutorial's step 6, `tests/refund.rs`, as a reader writes it: the block is taken from
//! `docs/tutorial.md` by build.rs, so the page and this test cannot differ.

include!(concat!(env!("OUT_DIR"), "/refund_test.rs"));
