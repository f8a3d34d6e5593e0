//! Shared code of the example agents.
