//! The library is the tutorial's `src/lib.rs` block: one text, in the tutorial, compiled.

use std::path::PathBuf;

const TUTORIAL: &str = "../docs/tutorial.md";
const MARKER: &str = "// src/lib.rs";

fn main() {
    println!("cargo:rerun-if-changed={TUTORIAL}");
    let text = std::fs::read_to_string(TUTORIAL).expect("docs/tutorial.md is readable");
    let block = text
        .split("```rust")
        .skip(1)
        .filter_map(|b| b.split("\n```").next())
        .map(|b| b.split_once('\n').map_or("", |(_, code)| code))
        .find(|code| code.starts_with(MARKER))
        .unwrap_or_else(|| panic!("docs/tutorial.md has no ```rust block starting `{MARKER}`"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("lib.rs"), block).expect("OUT_DIR is writable");
}
