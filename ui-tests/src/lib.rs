//! trybuild specs live under `tests/`.
