//! axum's extractors, with their rejections answered as the API's JSON errors (axum's own
//! answer in plain text, which the document does not describe).

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, OptionalFromRequest, Request};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON body ([`axum::Json`]), and a JSON answer.
pub(crate) struct Json<T>(pub(crate) T);

impl<T, S> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let req = without_nul(req, state).await?;
        <axum::Json<T> as FromRequest<S>>::from_request(req, state)
            .await
            .map(|axum::Json(v)| Self(v))
            .map_err(|r| json_rejection(&r))
    }
}

/// The request, its body read (within the body limit) and refused when a string in it
/// holds a NUL ([`crate::edge`]) or it is an array; then given back whole to axum's JSON
/// extractor.
async fn without_nul<S: Send + Sync>(req: Request, state: &S) -> Result<Request, ApiError> {
    let headers = req.headers().clone();
    let bytes = axum::body::Bytes::from_request(req, state)
        .await
        .map_err(|r| ApiError::rejected(r.status(), r.body_text()))?;
    if crate::edge::json_holds_nul(&bytes) {
        return Err(ApiError::bad_request(
            "a string of the body holds a NUL character: names, notes and payloads are text",
        ));
    }
    // Every body of the API is an object; serde would read a struct from an array too
    // (`[]` as an empty operator note), which the document does not allow.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(ApiError::unprocessable(
            "the body is a JSON object, not an array",
        ));
    }
    let mut rebuilt = Request::new(axum::body::Body::from(bytes));
    *rebuilt.headers_mut() = headers;
    Ok(rebuilt)
}

impl<T, S> OptionalFromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Option<Self>, Self::Rejection> {
        let req = without_nul(req, state).await?;
        <axum::Json<T> as OptionalFromRequest<S>>::from_request(req, state)
            .await
            .map(|v| v.map(|axum::Json(v)| Self(v)))
            .map_err(|r| json_rejection(&r))
    }
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

fn json_rejection(r: &JsonRejection) -> ApiError {
    ApiError::rejected(r.status(), r.body_text())
}

/// The query string ([`axum::extract::Query`]).
pub(crate) struct Query<T>(pub(crate) T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(v)| Self(v))
            .map_err(|r: QueryRejection| ApiError::rejected(r.status(), r.body_text()))
    }
}

/// The path's parameters ([`axum::extract::Path`]).
pub(crate) struct Path<T>(pub(crate) T);

impl<T, S> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(v)| Self(v))
            .map_err(|r: PathRejection| ApiError::rejected(r.status(), r.body_text()))
    }
}

/// `value` when it is within what the stores count in (versions, positions: a signed 64-bit
/// integer, as the document's `int64` says), else `400` naming `name`.
pub(crate) fn at_most_i64(name: &str, value: Option<u64>) -> Result<Option<u64>, ApiError> {
    match value {
        Some(v) if i64::try_from(v).is_err() => Err(ApiError::bad_request(format!(
            "`{name}` is at most {}, not {v}",
            i64::MAX
        ))),
        v => Ok(v),
    }
}

/// `value` when it is within a signed 32-bit integer (an agent version, a journal index: the
/// document's `int32`, and PostgreSQL's `integer`), else `400` naming `name`.
pub(crate) fn at_most_i32(name: &str, value: Option<u32>) -> Result<Option<u32>, ApiError> {
    match value {
        Some(v) if i32::try_from(v).is_err() => Err(ApiError::bad_request(format!(
            "`{name}` is at most {}, not {v}",
            i32::MAX
        ))),
        v => Ok(v),
    }
}

/// An `i64` written as a JSON integer or as a number with no fraction (`-3.0`), as
/// [`integral`] reads a `u64`.
pub(crate) fn integral_i64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    use serde::Deserialize as _;
    use serde::de::Error as _;
    let n = serde_json::Number::deserialize(d)?;
    if let Some(v) = n.as_i64() {
        return Ok(v);
    }
    match n.as_f64() {
        // Whole and strictly inside `i64`'s range: a literal just past either end (an
        // integer too large for `i64`, read as a float) rounds to `-2^63` or `2^63`, so
        // both are refused as floats (`i64::MIN` itself arrives as an integer).
        #[allow(clippy::cast_possible_truncation)]
        Some(f)
            if f.fract() == 0.0
                && f > -9_223_372_036_854_775_808.0
                && f < 9_223_372_036_854_775_808.0 =>
        {
            Ok(f as i64)
        }
        _ => Err(D::Error::custom(format!("expected an integer, not {n}"))),
    }
}

/// A `u64` written as a JSON integer or as a number with no fraction (`3.0`): JSON Schema's
/// `integer`, which the document says, takes both.
pub(crate) fn integral<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    use serde::Deserialize as _;
    use serde::de::Error as _;
    let n = serde_json::Number::deserialize(d)?;
    if let Some(v) = n.as_u64() {
        return Ok(v);
    }
    match n.as_f64() {
        // Exactly representable and in range: 2^64 itself (`u64::MAX as f64`) is not.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Some(f) if f.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&f) => {
            Ok(f as u64)
        }
        _ => Err(D::Error::custom(format!(
            "expected a non-negative integer, not {n}"
        ))),
    }
}
