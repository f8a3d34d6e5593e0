//! Integers as JSON Schema's `integer` reads them: a JSON integer, or a number with no
//! fraction (`3.0`). A schedule arrives as a JSON body (the HTTP API, whose document says
//! `integer`), and a client may write either.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// The number as an `i128`, when it is whole and within `i64` or `u64`.
fn whole<'de, D: Deserializer<'de>>(d: D) -> Result<i128, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    if let Some(v) = n.as_i64() {
        return Ok(i128::from(v));
    }
    if let Some(v) = n.as_u64() {
        return Ok(i128::from(v));
    }
    match n.as_f64() {
        // Whole and strictly inside the range of `i64` and `u64` together: a literal just
        // past either end (too large for both, read as a float) rounds to `-2^63` or
        // `2^64`, so both are refused as floats (`i64::MIN` itself arrives as an integer).
        #[allow(
            clippy::cast_possible_truncation,
            reason = "whole and checked to be in range first"
        )]
        Some(f)
            if f.fract() == 0.0
                && f > -9_223_372_036_854_775_808.0
                && f < 18_446_744_073_709_551_616.0 =>
        {
            Ok(f as i128)
        }
        _ => Err(D::Error::custom(format!("expected an integer, not {n}"))),
    }
}

fn fit<T: TryFrom<i128>, E: serde::de::Error>(v: i128) -> Result<T, E> {
    T::try_from(v).map_err(|_| E::custom(format!("{v} is out of range")))
}

/// A `u64`.
pub(super) fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    fit(whole(d)?)
}

/// An `i64`.
pub(super) fn i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    fit(whole(d)?)
}

/// A `u32`.
pub(super) fn u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    fit(whole(d)?)
}

/// An optional `u64` (`null` is `None`).
pub(super) fn opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Option::<serde_json::Number>::deserialize(d)?
        .map(u64)
        .transpose()
        .map_err(|e: serde_json::Error| D::Error::custom(e.to_string()))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct Body {
        #[serde(deserialize_with = "super::u64")]
        a: u64,
        #[serde(deserialize_with = "super::i64")]
        b: i64,
        #[serde(default, deserialize_with = "super::opt_u64")]
        c: Option<u64>,
    }

    #[test]
    fn whole_floats_read_as_integers_and_fractions_do_not() {
        let body: Body = serde_json::from_str(r#"{"a": 3.0, "b": -8052.0, "c": 7}"#).unwrap();
        assert_eq!((body.a, body.b, body.c), (3, -8052, Some(7)));
        let body: Body = serde_json::from_str(r#"{"a": 1, "b": 2, "c": null}"#).unwrap();
        assert_eq!(body.c, None);
        assert!(serde_json::from_str::<Body>(r#"{"a": 1.5, "b": 0}"#).is_err());
        assert!(serde_json::from_str::<Body>(r#"{"a": -1, "b": 0}"#).is_err());
        assert!(serde_json::from_str::<Body>(r#"{"a": 1, "b": 1e300}"#).is_err());
        // One past `i64::MIN` reads as a float that rounds to it: refused, not clamped.
        assert!(serde_json::from_str::<Body>(r#"{"a": 1, "b": -9223372036854775809}"#).is_err());
        let min: Body = serde_json::from_str(r#"{"a": 1, "b": -9223372036854775808}"#).unwrap();
        assert_eq!(min.b, i64::MIN);
    }
}
