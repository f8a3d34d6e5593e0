//! The cost of scrubbing configured secrets from one string, as the runner does for every
//! string it journals or prompts when `RunnerConfig::secrets` is set: a 4 KB tool output
//! without any secret (the common case), and the same with one secret split in two. The
//! baseline, measured in the same run, is what a whole-secret scan costs (`str::contains` for
//! each secret), the redactor's former fast path.
//!
//! ```sh
//! cargo bench -p durable-agents-core --bench redaction
//! ```

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Instant;

use durable_agents::runner::redact_secrets;

const SECRETS: [&str; 2] = ["sk-proj-4f9a1c7e2b8d6a3f0e5c", "db-password-91c3e7a2f4"];

fn output(with_split_secret: bool) -> String {
    let mut s = String::from(r#"{"items":["#);
    let mut i = 0;
    while s.len() < 4096 {
        let _ = write!(
            s,
            r#"{{"sku":"SKU-{i:05}","title":"A product with a longer title \"{i}\"","cents":{}}},"#,
            i * 37
        );
        i += 1;
    }
    if with_split_secret {
        s.push_str("\"sk-proj-4f9a1c7e\u{200b}2b8d6a3f0e5c\"");
    }
    s.push_str("]}");
    s
}

fn per_call_us(iterations: u32, f: impl Fn() -> usize) -> f64 {
    let started = Instant::now();
    let mut sink = 0;
    for _ in 0..iterations {
        sink += f();
    }
    black_box(sink);
    started.elapsed().as_secs_f64() * 1e6 / f64::from(iterations)
}

fn main() {
    let iterations = 2_000;
    let clean = output(false);
    let split = output(true);
    println!(
        "scrubbing {} secrets from a {}-byte string, {iterations} calls each",
        SECRETS.len(),
        clean.len()
    );
    let baseline = per_call_us(iterations, || {
        SECRETS
            .iter()
            .filter(|s| black_box(&clean).contains(**s))
            .count()
    });
    let no_secret = per_call_us(iterations, || {
        redact_secrets(black_box(&clean), &SECRETS).len()
    });
    let with_split = per_call_us(iterations, || {
        redact_secrets(black_box(&split), &SECRETS).len()
    });
    println!("  whole-secret scan (baseline) : {baseline:>8.2} µs/call");
    println!(
        "  redactor, no secret in it    : {no_secret:>8.2} µs/call ({:.1}x the baseline)",
        no_secret / baseline
    );
    println!(
        "  redactor, one split secret   : {with_split:>8.2} µs/call ({:.1}x the baseline)",
        with_split / baseline
    );
}
