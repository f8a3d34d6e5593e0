//! The rules for run labels, checked before a run is created with them.

use super::{Labels, StoreError};

/// At most this many labels per run.
pub const MAX_LABELS: usize = 32;

/// At most this many characters in a label key.
pub const MAX_LABEL_KEY_CHARS: usize = 63;

/// At most this many characters in a label value.
pub const MAX_LABEL_VALUE_CHARS: usize = 255;

/// Check labels before a run is created with them: at most [`MAX_LABELS`]; a key is 1 to
/// [`MAX_LABEL_KEY_CHARS`] ASCII letters, digits, `.`, `_`, `-` or `/`, starting with a
/// letter or digit (it is typed on command lines: `--label tenant=acme`); a value is at most
/// [`MAX_LABEL_VALUE_CHARS`] characters without control characters (it may be empty).
///
/// # Errors
/// [`StoreError::InvalidLabel`] naming the first label that breaks a rule, and the rule.
pub fn validate_labels(labels: &Labels) -> Result<(), StoreError> {
    if labels.len() > MAX_LABELS {
        return Err(StoreError::InvalidLabel(format!(
            "a run has at most {MAX_LABELS} labels, not {}",
            labels.len()
        )));
    }
    for (key, value) in labels {
        validate_label(key, value)?;
    }
    Ok(())
}

/// Check one label (see [`validate_labels`]).
///
/// # Errors
/// [`StoreError::InvalidLabel`] saying which rule the label breaks.
pub fn validate_label(key: &str, value: &str) -> Result<(), StoreError> {
    let invalid = |why: String| Err(StoreError::InvalidLabel(why));
    let key_chars = key.chars().count();
    if key_chars == 0 {
        return invalid("a label key must not be empty".to_owned());
    }
    if key_chars > MAX_LABEL_KEY_CHARS {
        return invalid(format!(
            "label key `{key}` has {key_chars} characters; at most {MAX_LABEL_KEY_CHARS}"
        ));
    }
    if !key.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return invalid(format!(
            "label key `{key}` must start with an ASCII letter or digit"
        ));
    }
    if let Some(c) = key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/')))
    {
        return invalid(format!(
            "label key `{key}` holds {c:?}; keys use ASCII letters, digits, `.`, `_`, `-` and `/`"
        ));
    }
    let value_chars = value.chars().count();
    if value_chars > MAX_LABEL_VALUE_CHARS {
        return invalid(format!(
            "the value of label `{key}` has {value_chars} characters; at most \
             {MAX_LABEL_VALUE_CHARS}"
        ));
    }
    if value.chars().any(char::is_control) {
        return invalid(format!(
            "the value of label `{key}` holds a control character"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn labels_follow_the_rules() {
        assert!(validate_labels(&labels(&[("tenant", "acme"), ("team/a.b-c_d", "")])).is_ok());
        for (key, value, why) in [
            ("", "x", "must not be empty"),
            ("-x", "x", "must start"),
            ("a b", "x", "holds ' '"),
            ("k", "line\nbreak", "control character"),
        ] {
            let e = validate_labels(&labels(&[(key, value)])).unwrap_err();
            assert!(e.to_string().contains(why), "{e}");
        }
        let long_key = "k".repeat(MAX_LABEL_KEY_CHARS + 1);
        assert!(validate_label(&long_key, "").is_err());
        assert!(validate_label("k", &"v".repeat(MAX_LABEL_VALUE_CHARS + 1)).is_err());
        let many: Labels = (0..=MAX_LABELS)
            .map(|i| (format!("k{i}"), String::new()))
            .collect();
        assert!(validate_labels(&many).is_err());
    }
}
