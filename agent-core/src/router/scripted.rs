//! A router that replays a script, for tests and offline demos.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Mutex;

use async_trait::async_trait;

use super::{RawChoice, RouteRequest, Router, RouterError, RouterReply};
use crate::tool::ErrorClass;

/// A router that replays a script: for tests and offline demos, never a real model.
///
/// Each call pops the next reply; a closure variant computes replies from the request.
pub struct ScriptedRouter {
    script: Mutex<VecDeque<RouterReply>>,
    #[allow(clippy::type_complexity)]
    func: Option<Box<dyn Fn(&RouteRequest) -> RouterReply + Send + Sync>>,
    calls: std::sync::atomic::AtomicU64,
}

impl fmt::Debug for ScriptedRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedRouter")
            .field("remaining", &self.script.lock().map_or(0, |s| s.len()))
            .finish_non_exhaustive()
    }
}

impl ScriptedRouter {
    /// Replay these replies in order.
    #[must_use]
    pub fn new(replies: impl IntoIterator<Item = RouterReply>) -> Self {
        Self {
            script: Mutex::new(replies.into_iter().collect()),
            func: None,
            calls: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Compute each reply from the request.
    pub fn from_fn(f: impl Fn(&RouteRequest) -> RouterReply + Send + Sync + 'static) -> Self {
        Self {
            script: Mutex::new(VecDeque::new()),
            func: Some(Box::new(f)),
            calls: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// A reply choosing `name` with `arguments` (JSON text).
    #[must_use]
    pub fn choose(name: &str, arguments: &str) -> RouterReply {
        RouterReply {
            choices: vec![RawChoice {
                name: name.to_owned(),
                arguments: arguments.to_owned(),
            }],
            raw_output: format!("{name}({arguments})"),
            model: "scripted".to_owned(),
            input_tokens: Some(0),
            output_tokens: Some(0),
            refusal: None,
            truncated: false,
            end_reason: None,
            conflicts: Vec::new(),
            cost: None,
        }
    }

    /// How many times it was asked.
    #[must_use]
    pub fn calls(&self) -> u64 {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait]
impl Router for ScriptedRouter {
    async fn decide(&self, request: &RouteRequest) -> Result<RouterReply, RouterError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if let Some(f) = &self.func {
            return Ok(f(request));
        }
        self.script
            .lock()
            .map_err(|_| RouterError::new(ErrorClass::Permanent, "script lock poisoned"))?
            .pop_front()
            .ok_or_else(|| {
                RouterError::new(ErrorClass::Permanent, "the script has no more replies")
            })
    }
}
