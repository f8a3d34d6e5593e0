//! Capture journals of real runs of the fixture agent as the replay fixtures of item 8.
//! Run once and commit the output: `cargo run -p battery --bin gen-replay-fixtures`.

use std::sync::Arc;
use std::time::Duration;

use agent_conformance::fixture::{self, World};
use agent_core::router::{Router, ScriptedRouter};
use agent_core::store::Store;
use agent_core::store::memory::MemoryStore;
use battery::RandomCrash;
use battery::order;
use battery::replay::{capture, fixtures_dir};
use serde_json::json;

struct Scenario {
    name: &'static str,
    items: &'static [&'static str],
    router: Arc<dyn Router>,
    world: fn(&World),
    crash_p: f64,
    kill_charge: bool,
}

fn rejecting_then_cancel() -> Arc<dyn Router> {
    Arc::new(ScriptedRouter::from_fn(|req| {
        if req.feedback.is_empty() && req.tool_results.is_empty() {
            ScriptedRouter::choose("Charge", r#"{"cents": 100000}"#)
        } else if req.tool_results.is_empty() {
            ScriptedRouter::choose("Lookup", r#"{"sku": "second-look"}"#)
        } else {
            ScriptedRouter::choose("Cancelled", "{}")
        }
    }))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let scenarios = [
        Scenario {
            name: "paid",
            items: &["a", "bb"],
            router: Arc::new(fixture::router("Pay")),
            world: |w| w.configure(|s| s.charge_timeouts = 1),
            crash_p: 0.0,
            kill_charge: false,
        },
        Scenario {
            name: "declined",
            items: &["a", "bb"],
            router: Arc::new(fixture::router("Pay")),
            world: |w| w.configure(|s| s.fail_charges = true),
            crash_p: 0.0,
            kill_charge: false,
        },
        Scenario {
            name: "cancelled",
            items: &["a", "bb", "ccc"],
            router: Arc::new(fixture::router("Cancelled")),
            world: |_| {},
            crash_p: 0.0,
            kill_charge: false,
        },
        Scenario {
            name: "paid-with-crashes",
            items: &["a", "bb", "ccc"],
            router: Arc::new(fixture::router("Pay")),
            world: |w| w.configure(|s| s.charge_timeouts = 1),
            crash_p: 0.15,
            kill_charge: false,
        },
        Scenario {
            name: "rejected-then-cancelled",
            items: &["a"],
            router: rejecting_then_cancel(),
            world: |_| {},
            crash_p: 0.0,
            kill_charge: false,
        },
        Scenario {
            name: "kill-switch",
            items: &["a", "bb"],
            router: Arc::new(fixture::router("Pay")),
            world: |_| {},
            crash_p: 0.0,
            kill_charge: true,
        },
        Scenario {
            name: "read-cache",
            items: &["same", "same", "other"],
            router: Arc::new(fixture::router("Pay")),
            world: |_| {},
            crash_p: 0.0,
            kill_charge: false,
        },
    ];
    let dir = fixtures_dir();
    std::fs::create_dir_all(&dir).expect("fixtures dir");
    for s in scenarios {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let world = Arc::new(World::default());
        (s.world)(&world);
        if s.kill_charge {
            store
                .set_tool_enabled("Charge", false, Some("incident"))
                .await
                .expect("switch");
        }
        let runner = order::runner_with(
            &store,
            order::tools(&world),
            Arc::clone(&s.router),
            order::config("capture", Duration::from_secs(5)),
            Arc::new(RandomCrash::new(s.crash_p, 7)),
        );
        let run_id = format!("replay-{}", s.name);
        runner
            .start(&run_id, fixture::initial(s.items))
            .await
            .expect("start");
        let signals = vec![("confirm".to_owned(), json!({ "by": "customer" }))];
        for (name, payload) in &signals {
            runner
                .signal(&run_id, name, payload.clone())
                .await
                .expect("signal");
        }
        let captured = capture(&runner, s.name, &run_id, &signals)
            .await
            .expect("capture");
        let path = dir.join(format!("{}.json", s.name));
        let text = serde_json::to_string_pretty(&captured).expect("serialize") + "\n";
        std::fs::write(&path, text).expect("write fixture");
        let last = captured.versions.last().expect("versions");
        println!(
            "{}: {} versions, {} journal entries, ends {} in `{}`",
            path.display(),
            captured.versions.len(),
            captured.journal.len(),
            last.status,
            last.state_name
        );
    }
}
