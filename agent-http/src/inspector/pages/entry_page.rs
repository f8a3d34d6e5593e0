//! A journal entry's page (`GET /ui/runs/{id}/entries/{version}/{seq}`): the entry, whole.

use askama::Template;
use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;

use super::{PageError, html};
use crate::Reader;
use crate::extract::Path;
use crate::inspector::root_of;

#[derive(Template)]
#[template(path = "entry.html", config = "inspector/askama.toml")]
struct EntryPage<'a> {
    root: &'a str,
    title: &'a str,
    run: &'a str,
    json: &'a str,
}

/// `GET /ui/runs/{id}/entries/{version}/{seq}`: one journal entry, whole (large outputs).
pub(crate) async fn entry(
    State(app): State<Reader>,
    uri: Uri,
    Path((id, version, seq)): Path<(String, u64, u32)>,
) -> Response {
    let root = root_of(uri.path());
    let result = async {
        let entry = app
            .store
            .journal(&id, Some(version))
            .await?
            .into_iter()
            .find(|e| e.seq == seq)
            .ok_or_else(|| {
                PageError::not_found(format!("run `{id}` has no entry {version}.{seq}"))
            })?;
        let entry = serde_json::to_value(&entry).unwrap_or_default();
        let json =
            serde_json::to_string_pretty(&*agent_core::secrets::shown(&entry)).unwrap_or_default();
        let title = format!("Entry {version}.{seq} of run {id}");
        Ok(EntryPage {
            root: &root,
            title: &title,
            run: &id,
            json: &json,
        }
        .render()?)
    }
    .await;
    html(result, &uri)
}
