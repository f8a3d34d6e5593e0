//! Error accumulation: every stage reports into one context, so the user sees every
//! mistake at once (serde's `Ctxt`).

use std::cell::RefCell;
use std::fmt::Display;

use proc_macro2::{Span, TokenStream};

#[derive(Default)]
pub(crate) struct Ctxt {
    errors: RefCell<Vec<syn::Error>>,
}

impl Ctxt {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn error(&self, span: Span, message: impl Display) {
        self.errors
            .borrow_mut()
            .push(syn::Error::new(span, message));
    }

    pub(crate) fn syn_error(&self, error: syn::Error) {
        self.errors.borrow_mut().push(error);
    }

    pub(crate) fn has_errors(&self) -> bool {
        !self.errors.borrow().is_empty()
    }

    #[cfg(test)]
    pub(crate) fn into_errors(self) -> Vec<syn::Error> {
        self.errors.into_inner()
    }

    /// The errors in the order they were reported, as `compile_error!` invocations.
    pub(crate) fn into_compile_errors(self) -> Option<TokenStream> {
        let errors = self.errors.into_inner();
        if errors.is_empty() {
            return None;
        }
        Some(errors.iter().map(syn::Error::to_compile_error).collect())
    }
}

/// An error message in rustc's shape: the problem on the first line, then the `= help:` and
/// `= note:` lines under it. The one place that decides how they are laid out.
pub(crate) struct Message {
    problem: String,
    lines: Vec<(&'static str, String)>,
}

impl Message {
    pub(crate) fn new(problem: impl Into<String>) -> Self {
        Self {
            problem: problem.into(),
            lines: Vec::new(),
        }
    }

    /// How to fix it.
    #[must_use]
    pub(crate) fn help(mut self, text: impl Into<String>) -> Self {
        self.lines.push(("help", text.into()));
        self
    }

    /// What else the user needs to know.
    #[must_use]
    pub(crate) fn note(mut self, text: impl Into<String>) -> Self {
        self.lines.push(("note", text.into()));
        self
    }
}

impl Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.problem)?;
        for (kind, text) in &self.lines {
            write!(f, "\n= {kind}: {text}")?;
        }
        Ok(())
    }
}
