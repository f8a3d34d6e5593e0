//! Both providers against local HTTP servers replaying the providers' real response shapes,
//! the OpenAI router against a real llama.cpp server (when built, see `llama_server`),
//! the hostile-output suite end to end through `validate`, and configuration. One test
//! binary, so reqwest and wiremock are linked once.

mod ambiguity;
mod anthropic;
mod common;
mod config;
mod generate;
mod hostile;
mod llama_server;
mod one_path;
mod openai;
mod runner;
mod streaming;
