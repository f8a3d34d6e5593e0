//! Labels: stored with the run, filtering `list_runs` and `count_runs`, their values
//! counted by `count_label_values`, checked at creation.

use std::sync::Arc;

use serde_json::json;

use super::{CheckResult, Ctx, new_run, stored, unique};
use agent_core::store::{Labels, RunFilter, Store, StoreError};

/// Labels are stored with the run and returned; `list_runs` keeps the runs carrying every
/// label asked for; `count_label_values` counts each value of a key under the filter, with
/// the newest run's creation time; labels that break the rules are refused at creation;
/// creating the same run again with other labels is `AlreadyExists`.
///
/// # Errors
/// What went wrong.
pub async fn check_labels_filter_runs(store: Arc<dyn Store>) -> CheckResult {
    let agent = unique("labelled");
    let tenant = unique("tenant");
    let make = |prefix: &str, labels: &[(&str, &str)]| {
        new_run(&unique(prefix), &agent, json!({})).with_labels(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )
    };
    let eu = make("eu", &[("tenant", &tenant), ("region", "eu")]);
    let us = make("us", &[("tenant", &tenant), ("region", "us")]);
    let other = make("other", &[("tenant", "someone-else"), ("region", "eu")]);
    let bare = make("bare", &[]);
    for run in [&eu, &us, &other, &bare] {
        let created = store.create_run(run.clone()).await.ctx("create_run")?;
        ensure!(
            created.labels == run.labels,
            "create_run returned labels {:?}, expected {:?}",
            created.labels,
            run.labels
        );
        ensure!(
            stored(&store, &run.id).await?.labels == run.labels,
            "load_run lost the labels of `{}`",
            run.id
        );
    }
    let listed = |labels: &[(&str, &str)]| {
        let filter = RunFilter {
            agent: Some(agent.clone()),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..RunFilter::default()
        };
        let store = Arc::clone(&store);
        async move {
            let runs = store.list_runs(&filter).await.ctx("list_runs")?;
            Ok::<Vec<String>, String>(runs.into_iter().map(|r| r.id).collect())
        }
    };
    let mine = listed(&[("tenant", &tenant)]).await?;
    ensure!(
        mine == vec![us.id.clone(), eu.id.clone()],
        "tenant filter: {mine:?}"
    );
    let mine_eu = listed(&[("tenant", &tenant), ("region", "eu")]).await?;
    ensure!(
        mine_eu == vec![eu.id.clone()],
        "every label must match: {mine_eu:?}"
    );
    let all_eu = listed(&[("region", "eu")]).await?;
    ensure!(
        all_eu == vec![other.id.clone(), eu.id.clone()],
        "region filter: {all_eu:?}"
    );
    let none = listed(&[("region", "mars")]).await?;
    ensure!(none.is_empty(), "no run carries region=mars: {none:?}");
    let counted = store
        .count_runs(&RunFilter {
            agent: Some(agent.clone()),
            labels: [("region".to_owned(), "eu".to_owned())].into(),
            ..RunFilter::default()
        })
        .await
        .ctx("count_runs")?;
    ensure!(
        counted.iter().map(|(_, n)| n).sum::<u64>() == 2,
        "count_runs with region=eu must count the 2 runs listed: {counted:?}"
    );
    // The values of `region` on the agent's runs, by value; the unlabelled run counts
    // nowhere, and a filter narrows what is counted.
    let values = |labels: &[(&str, &str)]| {
        let filter = RunFilter {
            agent: Some(agent.clone()),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            limit: Some(1),
            ..RunFilter::default()
        };
        let store = Arc::clone(&store);
        async move {
            let counts = store
                .count_label_values("region", &filter)
                .await
                .ctx("count_label_values")?;
            Ok::<_, String>(counts)
        }
    };
    let regions = values(&[]).await?;
    let newest_eu = stored(&store, &other.id)
        .await?
        .created_at
        .max(stored(&store, &eu.id).await?.created_at);
    let shape: Vec<(&str, u64)> = regions.iter().map(|c| (c.value.as_str(), c.runs)).collect();
    ensure!(
        shape == [("eu", 2), ("us", 1)],
        "count_label_values(region) must count eu twice and us once, ignoring the limit: \
         {regions:?}"
    );
    ensure!(
        regions[0].last_created_at == newest_eu,
        "count_label_values must give the newest eu run's creation time {newest_eu}: \
         {regions:?}"
    );
    let tenants_regions = values(&[("tenant", &tenant)]).await?;
    let shape: Vec<(&str, u64)> = tenants_regions
        .iter()
        .map(|c| (c.value.as_str(), c.runs))
        .collect();
    ensure!(
        shape == [("eu", 1), ("us", 1)],
        "count_label_values under a label filter counts only its runs: {tenants_regions:?}"
    );
    let unknown = store
        .count_label_values(
            "no-such-key",
            &RunFilter {
                agent: Some(agent.clone()),
                ..RunFilter::default()
            },
        )
        .await
        .ctx("count_label_values")?;
    ensure!(unknown.is_empty(), "no run carries the key: {unknown:?}");

    let everyone = listed(&[]).await?;
    ensure!(
        everyone.len() == 4,
        "no label filter lists all: {everyone:?}"
    );

    let mut relabelled = eu.clone();
    relabelled
        .labels
        .insert("region".to_owned(), "us".to_owned());
    ensure!(
        matches!(
            store.create_run(relabelled).await,
            Err(StoreError::AlreadyExists(_))
        ),
        "creating a run again with other labels must be AlreadyExists"
    );
    ensure!(
        store
            .create_run(eu.clone())
            .await
            .ctx("create_run again")?
            .labels
            == eu.labels,
        "creating the same run again returns it"
    );
    for (key, value) in [("", "x"), ("bad key", "x"), ("k", "a\u{7}b")] {
        let mut labels = Labels::new();
        labels.insert(key.to_owned(), value.to_owned());
        let bad = new_run(&unique("bad-label"), &agent, json!({})).with_labels(labels);
        let id = bad.id.clone();
        ensure!(
            matches!(
                store.create_run(bad).await,
                Err(StoreError::InvalidLabel(_))
            ),
            "label {key:?}={value:?} must be refused with InvalidLabel"
        );
        ensure!(
            store.load_run(&id).await.ctx("load_run")?.is_none(),
            "a run with a refused label must not be created"
        );
    }
    Ok(())
}
