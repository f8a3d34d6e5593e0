//! Both providers against local HTTP servers replaying the providers' real response shapes,
//! the hostile-output suite end to end through `validate`, and configuration. One test
//! binary, so reqwest and wiremock are linked once.

mod anthropic;
mod common;
mod config;
mod generate;
mod hostile;
mod openai;
mod runner;
mod streaming;
