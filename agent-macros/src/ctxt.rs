//! Error accumulation: every stage reports into one context, so the user sees every
//! mistake at once (serde's `Ctxt`).

use std::cell::RefCell;
use std::fmt::Display;

use proc_macro2::{Span, TokenStream};

#[derive(Default)]
pub struct Ctxt {
    errors: RefCell<Vec<syn::Error>>,
}

impl Ctxt {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn error(&self, span: Span, message: impl Display) {
        self.errors
            .borrow_mut()
            .push(syn::Error::new(span, message));
    }

    pub fn syn_error(&self, error: syn::Error) {
        self.errors.borrow_mut().push(error);
    }

    pub fn has_errors(&self) -> bool {
        !self.errors.borrow().is_empty()
    }

    #[cfg(test)]
    pub fn into_errors(self) -> Vec<syn::Error> {
        self.errors.into_inner()
    }

    /// The errors in the order they were reported, as `compile_error!` invocations.
    pub fn into_compile_errors(self) -> Option<TokenStream> {
        let errors = self.errors.into_inner();
        if errors.is_empty() {
            return None;
        }
        Some(errors.iter().map(syn::Error::to_compile_error).collect())
    }
}
