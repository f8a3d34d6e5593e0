//! What every request's text must be, checked once at the edge so that both stores see
//! only valid input and errors have the API's shape: no NUL or other control character in
//! a path or query (ids, names, filters, cursors) or in a JSON body's strings (signal
//! names, notes, tool names). PostgreSQL refuses a NUL in text with an error of its own;
//! SQLite would store it; neither is what a client meant.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Refuse a request whose path or query holds a control character, percent-encoded or
/// not (`%00`, `%0A`, …): `400`, before anything behind it runs.
pub(crate) async fn check_uri(request: Request, next: Next) -> Response {
    let uri = request.uri();
    let text = uri.path_and_query().map_or("", |p| p.as_str());
    if let Some(what) = control_in_uri(text) {
        return ApiError::bad_request(format!(
            "the path or query holds {what}: ids, names and filters are printable text"
        ))
        .into_response();
    }
    next.run(request).await
}

/// The first control character `text` holds, raw or percent-encoded, described.
fn control_in_uri(text: &str) -> Option<String> {
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Some(format!("the control character U+{:04X}", u32::from(c)));
    }
    let bytes = text.as_bytes();
    bytes.windows(3).find_map(|w| {
        let hex = std::str::from_utf8(&w[1..]).ok()?;
        let byte = u8::from_str_radix(hex, 16).ok()?;
        (w[0] == b'%' && (byte < 0x20 || byte == 0x7f))
            .then(|| format!("the control character `%{hex}`"))
    })
}

/// Whether a JSON text holds a NUL in a string (JSON writes it `\u0000`; a raw control
/// character is not JSON at all).
pub(crate) fn json_holds_nul(body: &[u8]) -> bool {
    fn walk(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::String(s) => s.contains('\0'),
            serde_json::Value::Array(items) => items.iter().any(walk),
            serde_json::Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || walk(v)),
            _ => false,
        }
    }
    // Only a body that spells `\u0000` somewhere is read to see whether it is a NUL (and not
    // an escaped backslash followed by `u0000`).
    body.windows(6)
        .any(|w| w[0] == b'\\' && w[1] == b'u' && w[2..].iter().all(|b| *b == b'0'))
        && serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|v| walk(&v))
}

#[cfg(test)]
mod tests {
    use super::{control_in_uri, json_holds_nul};

    #[test]
    fn controls_are_found_raw_and_encoded() {
        for bad in [
            "/v1/runs/a%00b",
            "/v1/runs?agent=x%0a",
            "/v1/runs/%7F",
            "/v1/runs/a%1Fb",
        ] {
            assert!(control_in_uri(bad).is_some(), "{bad}");
        }
        for good in [
            "/v1/runs/order-1",
            "/v1/runs?label=a%3Db",
            "/v1/runs/caf%C3%A9",
            "/100%25",
        ] {
            assert_eq!(control_in_uri(good), None, "{good}");
        }
        assert!(json_holds_nul(br#"{"name":"a\u0000"}"#));
        assert!(json_holds_nul(br#"{"a\u0000":1}"#));
        // An escaped backslash followed by `u0000` is text, not a NUL.
        assert!(!json_holds_nul(br#"{"name":"a\\u0000"}"#));
        assert!(!json_holds_nul(br#"{"name":"a\u0041"}"#));
    }
}
