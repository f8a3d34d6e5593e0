//! The library is the tutorial's `src/lib.rs` block and the integration test its
//! `tests/refund.rs` block: one text, in the tutorial, compiled and run.

use std::path::PathBuf;

const TUTORIAL: &str = "../docs/tutorial.md";

/// The blocks taken from the tutorial: the line each starts with, and the file it becomes.
const BLOCKS: [(&str, &str); 2] = [
    ("// src/lib.rs", "lib.rs"),
    ("// tests/refund.rs", "refund_test.rs"),
];

fn main() {
    println!("cargo:rerun-if-changed={TUTORIAL}");
    let text = std::fs::read_to_string(TUTORIAL).expect("docs/tutorial.md is readable");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    for (marker, file) in BLOCKS {
        let block = text
            .split("```rust")
            .skip(1)
            .filter_map(|b| b.split("\n```").next())
            .map(|b| b.split_once('\n').map_or("", |(_, code)| code))
            .find(|code| code.starts_with(marker))
            .unwrap_or_else(|| panic!("docs/tutorial.md has no ```rust block starting `{marker}`"));
        std::fs::write(out.join(file), block).expect("OUT_DIR is writable");
    }
}
