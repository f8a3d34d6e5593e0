//! The checker checks: after a clean run it finds nothing, and each kind of damage a broken
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
