//! The compile-time contract of `#[derive(Agent)]`, `#[derive(Tool)]` and `#[tool_fn]`: every
//! mistake the macros catch has a spec under
//! `ui/{attr,graph,tools,transitions,children,timers,tool-fn,runner,versions,names}/`, and the legal counterparts compile
//! under `ui/pass/`.
//!
//! The `.stderr` files belong to the compiler recorded in `RUSTC_VERSION`. On any other
//! compiler the specs are skipped with one line saying how to regenerate them, except under
//! `CI=true`: there a skip would let the contract pass unchecked, so it fails.

use std::process::Command;

const RECORDED: &str = include_str!("../RUSTC_VERSION");

fn rustc_version() -> Option<String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let out = Command::new(rustc).arg("--version").output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[test]
fn ui() {
    let recorded = RECORDED.trim();
    let current = rustc_version().unwrap_or_default();
    if current != recorded {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "ui specs cannot be checked: .stderr files were generated with `{recorded}`, CI runs `{current}`; regenerate them with that compiler (TRYBUILD=overwrite cargo test -p ui-tests) and update ui-tests/RUSTC_VERSION"
        );
        println!(
            "ui specs SKIPPED: .stderr files were generated with `{recorded}`, this is `{current}`; regenerate with `TRYBUILD=overwrite cargo test -p ui-tests`, review the diff, and write the new version to ui-tests/RUSTC_VERSION"
        );
        return;
    }
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/attr/*.rs");
    t.compile_fail("tests/ui/graph/*.rs");
    t.compile_fail("tests/ui/tools/*.rs");
    t.compile_fail("tests/ui/transitions/*.rs");
    t.compile_fail("tests/ui/children/*.rs");
    t.compile_fail("tests/ui/timers/*.rs");
    t.compile_fail("tests/ui/tool-fn/*.rs");
    t.compile_fail("tests/ui/runner/*.rs");
    t.compile_fail("tests/ui/versions/*.rs");
    t.compile_fail("tests/ui/names/*.rs");
}
