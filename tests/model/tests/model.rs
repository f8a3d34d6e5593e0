//! The protocol's model checked within bounds, and each invariant shown able to fail.
//!
//! `MODEL_FULL=1` checks larger bounds (more workers, steps and faults) than CI's.

use model::{Mutation, Protocol, RUN_COMPLETES};
use stateright::{Checker, Model};

/// CI's bounds, or the full ones.
fn bounds() -> Protocol {
    if std::env::var("MODEL_FULL").is_ok_and(|v| v == "1") {
        Protocol::new(3, 3, 4)
    } else {
        Protocol::new(2, 3, 3)
    }
}

/// Check `protocol` at CI's bounds with `what`, printing the states explored and the time.
fn check_with(what: &str, protocol: &Protocol) {
    let started = std::time::Instant::now();
    let checker = protocol.clone().checker().spawn_bfs().join();
    println!(
        "model with {what}: {} states ({} unique), {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        started.elapsed().as_secs_f64()
    );
    checker.assert_properties();
}

#[test]
fn every_invariant_holds_within_the_bounds() {
    let protocol = bounds();
    let (workers, steps, faults) = (protocol.workers, protocol.steps, protocol.faults);
    let started = std::time::Instant::now();
    let checker = protocol.checker().spawn_bfs().join();
    let elapsed = started.elapsed();
    println!(
        "model: {workers} workers, {steps} steps, {faults} faults: {} states ({} unique), depth {}, {:.1} s, {:.0} states/s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        elapsed.as_secs_f64(),
        f64::from(u32::try_from(checker.state_count()).unwrap_or(u32::MAX))
            / elapsed.as_secs_f64().max(1e-9),
    );
    // Every always/eventually property without a counterexample, every sometimes property
    // with an example.
    checker.assert_properties();
    assert!(
        checker.unique_state_count() > 1_000,
        "the bounds explore too little"
    );
}

#[test]
fn each_invariant_fails_without_its_mechanism() {
    for (property, mutations) in Mutation::BREAKING {
        let checker = model::protocol_for(mutations).checker().spawn_bfs().join();
        let path = checker.discovery(property).unwrap_or_else(|| {
            panic!(
                "{mutations:?} should break \"{property}\", and the checker found no counterexample"
            )
        });
        println!("{mutations:?} breaks \"{property}\":\n{path}");
        // The run still completes (the counterexample is the mutation's alone), but for a
        // lost signal, which leaves it waiting for good.
        assert!(
            checker.discovery(RUN_COMPLETES).is_none() || mutations == [Mutation::ConsumeApart],
            "{mutations:?} also stops the run from completing"
        );
    }
}

#[test]
fn the_version_check_alone_catches_a_blind_retry() {
    // Each of these mechanisms is defence in depth for the other: neither alone breaks the
    // chain.
    for alone in [Mutation::BlindRetry, Mutation::NoVersionCheck] {
        let checker = Protocol::new(2, 2, 2)
            .with_signal_at(1)
            .mutated(&[alone])
            .checker()
            .spawn_bfs()
            .join();
        checker.assert_no_discovery(model::ONE_CHAIN);
    }
}

#[test]
fn a_signal_is_consumed_once_by_a_committed_step() {
    let protocol = bounds().with_signal_at(1);
    check_with("a signal", &protocol);
}

#[test]
fn a_child_is_started_once_and_joined_after_it_ends() {
    let protocol = bounds().with_child_at(0);
    check_with("a child", &protocol);
}

#[test]
fn a_failed_run_is_compensated_once_last_first() {
    let protocol = bounds().with_saga_at(1);
    check_with("a saga", &protocol);
}

#[test]
fn a_run_is_migrated_once_and_resumes_from_its_base() {
    let protocol = bounds().with_migration();
    check_with("a migration", &protocol);
}

#[test]
fn a_keyed_signal_is_stored_once_and_consumed_once() {
    // The sender sends three times along a path (a retry after a lost receipt, a
    // redelivery), before or after the run consumed the signal.
    let protocol = bounds().with_keyed_signal_at(1, 3);
    check_with("a keyed signal", &protocol);
}

#[test]
fn a_turn_under_a_rate_limit_is_used_once() {
    let protocol = bounds().with_capacity_at(1);
    check_with("a rate-limited ask", &protocol);
}

#[test]
fn a_timer_fires_once_at_its_due_time() {
    let protocol = bounds().with_timer_at(1);
    check_with("a timer", &protocol);
}

#[test]
fn a_cancelled_run_commits_nothing_but_its_cancel() {
    let protocol = bounds().with_cancel();
    check_with("a cancel", &protocol);
}

#[test]
fn reading_the_agent_version_alone_keeps_one_migration() {
    // Without the agent-version check in the write, workers that read the run's version
    // before migrating still migrate it once; the check is defence in depth.
    let checker = Protocol::new(2, 2, 2)
        .with_migration()
        .mutated(&[Mutation::NoAgentVersionCheck])
        .checker()
        .spawn_bfs()
        .join();
    checker.assert_no_discovery(model::MIGRATED_ONCE);
}
