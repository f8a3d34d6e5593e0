//! The size bound of what a run stores ([`RunnerConfig::max_payload_bytes`]): a value is
//! measured as the JSON the store writes, without building the text.
//!
//! [`RunnerConfig::max_payload_bytes`]: super::RunnerConfig::max_payload_bytes

use std::io;

use serde_json::Value;

/// `Ok` when `value`, as compact JSON, fits in `limit` bytes; otherwise why not, naming
/// `what` ("the state \`Review\`", "the output of \`search\`") and both sizes.
pub(crate) fn fits(value: &Value, limit: usize, what: &str) -> Result<(), String> {
    let bytes = serialized_len(value, limit);
    if bytes <= limit {
        return Ok(());
    }
    Err(format!(
        "{what} is {} as JSON, more than the {} a stored value may take \
         (`RunnerConfig::max_payload_bytes`)",
        size(bytes),
        size(limit)
    ))
}

/// The length of `value` as compact JSON, counted up to just past `limit` (a value far
/// over it is not walked to its end).
fn serialized_len(value: &Value, limit: usize) -> usize {
    struct Count {
        bytes: usize,
        limit: usize,
    }
    impl io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.bytes += buf.len();
            if self.bytes > self.limit {
                // Stop the walk: the answer is known.
                return Err(io::Error::other("over the limit"));
            }
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count { bytes: 0, limit };
    // An error is the early stop above (a `Value` always serializes).
    let _ = serde_json::to_writer(&mut count, value);
    count.bytes
}

/// `bytes` for a reader: `512 B`, `3.2 KiB`, `16.0 MiB`.
fn size(bytes: usize) -> String {
    #[allow(clippy::cast_precision_loss, reason = "one decimal is shown")]
    let b = bytes as f64;
    if bytes < 1024 {
        format!("{bytes} B")
    } else if bytes < 1024 * 1024 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{:.1} MiB", b / (1024.0 * 1024.0))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_value_is_measured_as_the_json_stored() {
        let v = json!({ "a": [1, 2, 3], "b": "text" });
        let len = serde_json::to_string(&v).unwrap().len();
        assert_eq!(serialized_len(&v, usize::MAX), len);
        assert!(fits(&v, len, "it").is_ok());
        let e = fits(&v, len - 1, "the state `S`").unwrap_err();
        assert!(e.starts_with("the state `S` is "), "{e}");
        assert!(e.contains("max_payload_bytes"), "{e}");
    }

    #[test]
    fn a_large_value_is_not_walked_to_its_end() {
        let v = json!({ "big": "x".repeat(10_000), "after": [1, 2, 3] });
        let whole = serde_json::to_string(&v).unwrap().len();
        assert!(serialized_len(&v, 100) > 100);
        assert!(serialized_len(&v, 100) < whole, "stopped before the end");
        assert_eq!(size(3 * 1024 * 1024 + 200_000), "3.2 MiB");
        assert_eq!(size(2048), "2.0 KiB");
    }
}
