//! Unit tests of the check stage on `parse_quote!` inputs.
