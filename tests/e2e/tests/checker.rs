//! The checkers check: after a clean run they find nothing, and each kind of damage a broken
//! runner or store could do is reported (so a green battery means something).

use std::time::Duration;

use e2e::check::{Expect, check};
use e2e::db::{TestDb, database_url};
use e2e::procs::{WorkerOpts, create_runs, run_worker, wait_all_final};

async fn exec(db: &TestDb, sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&db.pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checker_reports_each_kind_of_damage() {
    let Some(url) = database_url("checker").await else {
        return;
    };
    let runs = 10;
    let db = TestDb::create(&url, "checker").await;
    create_runs(&db, 0, runs).await;
    let mut o = WorkerOpts::new(&url, &db.schema, "w");
    o.exit_when_done = runs;
    let report = run_worker(&o, std::future::pending()).await;
    assert!(wait_all_final(&db, runs, Duration::from_secs(30)).await);
    assert_eq!(report.runs_driven, runs);
    let expect = Expect {
        runs,
        ..Expect::default()
    };
    check(&db.pool, &expect).await.assert_clean();

    // Each damage, and the words the checker must use for it. order-000000 pays (it is not
    // one of the cancelled fifth); its Start step made keyed calls.
    let damages: &[(&str, &str)] = &[
        (
            "DELETE FROM e2e_effects WHERE key = 'order-000001:0:1'",
            "lost effect",
        ),
        (
            "INSERT INTO e2e_effects (key, tool, run_id, target, first_worker) \
             SELECT 'order-000002:0:9', tool, run_id, target, 'x' FROM e2e_effects \
             WHERE key = 'order-000002:0:1'",
            "duplicate effect",
        ),
        (
            "UPDATE transitions SET to_state = 'Done' WHERE run_id = 'order-000003' AND version = 1",
            "not a declared edge",
        ),
        (
            "UPDATE transitions SET hash = 'x' WHERE run_id = 'order-000004' AND version = 1",
            "hash chain broken",
        ),
        (
            "DELETE FROM transitions WHERE run_id = 'order-000005' AND version = 1",
            "are not the chain",
        ),
        (
            "INSERT INTO e2e_llm_calls (id, run_id, question, worker, at_ms) \
             VALUES ('dup', 'order-000006', 0, 'other', 0)",
            "asked 2 times",
        ),
        (
            "INSERT INTO e2e_calls (id, run_id, version, seq, tool, key, worker, started_ms, \
             finished_ms) SELECT 'overlap', run_id, version, seq, tool, key, 'other', \
             started_ms, finished_ms FROM e2e_calls WHERE run_id = 'order-000007' \
             AND version = 0 AND seq = 1",
            "executed the step at once",
        ),
        (
            "UPDATE transitions SET epoch = 0 WHERE run_id = 'order-000008' \
             AND version = (SELECT max(version) FROM transitions WHERE run_id = 'order-000008')",
            "after epoch",
        ),
        (
            "UPDATE runs SET status = 'dead_lettered' WHERE id = 'order-000009'",
            "ended dead_lettered",
        ),
    ];
    for (sql, _) in damages {
        exec(&db, sql).await;
    }
    let report = check(&db.pool, &expect).await;
    for (sql, words) in damages {
        assert!(
            report.violations.iter().any(|v| v.contains(words)),
            "damage not reported ({words}): {sql}\nviolations: {:#?}",
            report.violations
        );
    }
    db.drop().await;
}

/// The version checks check too: a rolling deploy's damage (a version 1 worker claiming or
/// committing a version 2 run, or running its tools; a run migrated twice, or to a state
/// the mapping does not give; a shipment applied twice) is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_checker_reports_each_kind_of_damage() {
    let Some(url) = database_url("checker_versions").await else {
        return;
    };
    let db = TestDb::create(&url, "checkver").await;
    e2e::versions::record_claims(&db).await;
    // Ten runs started on version 1, all migrated and finished by a version 2 worker; four
    // more finished by a version 1 worker.
    create_runs(&db, 0, 10).await;
    let mut o = WorkerOpts::new(&url, &db.schema, "v2-w");
    o.agent_version = 2;
    o.exit_when_done = 10;
    run_worker(&o, std::future::pending()).await;
    create_runs(&db, 10, 14).await;
    let mut o = WorkerOpts::new(&url, &db.schema, "v1-w");
    o.exit_when_done = 14;
    run_worker(&o, std::future::pending()).await;
    assert!(wait_all_final(&db, 14, Duration::from_secs(30)).await);
    let expect = Expect {
        runs: 14,
        ..Expect::default()
    };
    let is_v1 = |w: &str| w.starts_with("v1-");
    check(&db.pool, &expect).await.assert_clean();
    let clean = e2e::versions::check_versions(&db.pool, is_v1).await;
    clean.assert_clean();
    assert_eq!(clean.migrated, 10, "{clean:?}");
    assert_eq!(clean.runs_by_version.get(&1), Some(&4), "{clean:?}");

    // (damage, words of `check`, words of `check_versions`); order-000000..=9 ended on
    // version 2, order-000010..=13 on version 1. order-000000 pays.
    let damages: &[(&str, Option<&str>, Option<&str>)] = &[
        (
            "INSERT INTO e2e_claims (run_id, epoch, owner, agent_version, version, status) \
             VALUES ('order-000000', 99, 'v1-x', 2, 3, 'running')",
            None,
            Some("claimed on version 2"),
        ),
        (
            "UPDATE e2e_claims SET owner = 'v1-y' WHERE run_id = 'order-000001' AND epoch = \
             (SELECT max(epoch) FROM transitions WHERE run_id = 'order-000001')",
            None,
            Some("committed by v1-y"),
        ),
        (
            "INSERT INTO e2e_calls (id, run_id, version, seq, tool, key, worker, started_ms) \
             VALUES ('late', 'order-000002', 1, 0, 'Lookup', NULL, 'v1-z', 0)",
            None,
            Some("v1-z, a version 1 worker, executed Lookup"),
        ),
        (
            "INSERT INTO e2e_effects (key, tool, run_id, target, first_worker) \
             SELECT key || ':again', tool, run_id, target || ':again', 'x' FROM e2e_effects \
             WHERE run_id = 'order-000003' AND tool = 'Ship'",
            Some("orphan effect"),
            Some("Ship effects"),
        ),
        (
            "UPDATE transitions SET kind = 'migrated', note_by = 'migration', note_reason = \
             'Shop v1 (fingerprint x) -> v2 (fingerprint y)' WHERE run_id = 'order-000004' \
             AND version = 2",
            Some("migrated 2 times"),
            Some("after 2 migrations"),
        ),
        (
            "DELETE FROM e2e_claims WHERE run_id = 'order-000006'",
            None,
            Some("which no recorded claim set"),
        ),
        (
            "UPDATE runs SET agent_version = 2 WHERE id = 'order-000012'",
            None,
            Some("after 0 migrations"),
        ),
    ];
    for (sql, _, _) in damages {
        exec(&db, sql).await;
    }
    let report = check(&db.pool, &expect).await;
    let versions = e2e::versions::check_versions(&db.pool, is_v1).await;
    for (sql, in_check, in_versions) in damages {
        for (words, violations) in [
            (in_check, &report.violations),
            (in_versions, &versions.violations),
        ] {
            if let Some(words) = words {
                assert!(
                    violations.iter().any(|v| v.contains(words)),
                    "damage not reported ({words}): {sql}\nviolations: {violations:#?}"
                );
            }
        }
    }
    // The "migrated" transition of order-000004 moves `Start` to `Decide`: not the mapping.
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("order-000004") && v.contains("the mapping of the state before")),
        "{:#?}",
        report.violations
    );
    db.drop().await;
}
