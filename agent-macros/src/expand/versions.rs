//! Between versions: what this one tells the next (`AgentFacts`), and `migrate_from`'s checks.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::{lit, respan, stored_as_json};
use crate::ast::Agent;
use crate::attr::Kind;
use crate::names;

/// `impl AgentFacts`: the hybrid tools and waits of this version, for the checks of a
/// version migrating from it. Emitted with the stubs too, so that a later version does not
/// also report this one as "not an agent".
pub(crate) fn facts_impl(agent: &Agent) -> TokenStream {
    let private = super::private();
    let ident = &agent.ident;
    let hybrid = agent
        .tools
        .iter()
        .filter(|t| t.kind == Kind::Hybrid)
        .map(|t| {
            let tool = lit(&names::unraw(&t.ident));
            let comp = lit(&t.compensate.as_ref().map(names::unraw).unwrap_or_default());
            quote!((#tool, #comp))
        });
    let waits = agent.states.iter().filter_map(|s| {
        let (_, signal) = s.wait.as_ref()?;
        let state = lit(&s.name());
        let signal = lit(signal);
        Some(quote!((#state, #signal)))
    });
    let stored = stored_as_json(agent);
    quote! {
        #[automatically_derived]
        impl #private::AgentFacts for #ident #stored {
            const HYBRID_TOOLS: &'static [(&'static str, &'static str)] = &[#(#hybrid),*];
            const WAITS: &'static [(&'static str, &'static str)] = &[#(#waits),*];
        }
    }
}

/// For `migrate_from(Old, with = map, skip_signal(...))`: `impl MigratesFrom` (where a
/// source that is not an agent, and a mapping of the wrong type, are reported at the
/// user's tokens), for the generated block; and apart, the const checks, each panicking at
/// compile time with its message. The checks stay beside the enum, outside the block: a
/// failed one is reported as "evaluation of `_` failed", not of `_::_`.
pub(crate) fn migration(agent: &Agent) -> (TokenStream, TokenStream) {
    let Some((key, m)) = &agent.migrate_from else {
        return (TokenStream::new(), TokenStream::new());
    };
    let alias = super::private();
    let krate = &agent.krate;
    let private = quote!(#krate::__private);
    let ident = &agent.ident;
    let source = &m.source;
    let with = &m.with;
    let source_span = source.span();
    let with_span = with.span();
    let old_text = lit(&crate::attr::path_text(source));
    let stored = stored_as_json(agent);
    // Every token at the user's: a failed const evaluation is reported where its
    // expression is, and a token of the derive's own would put it on `#[derive(Agent)]`.
    let check = |span: Span, call: TokenStream| {
        respan(quote!(const _: () = #private::fail_if(#call);), span)
    };
    // At the source's last segment, the enum's name (a path's span is its first token).
    let source_name = source
        .segments
        .last()
        .map_or(source_span, |s| s.ident.span());
    let source_check = check(
        source_name,
        quote!(#private::check_source::<#ident>(#old_text)),
    );
    let hybrid_check = check(*key, quote!(#private::check_hybrid_kept::<#ident>()));
    let compensation_check = check(*key, quote!(#private::check_compensations_kept::<#ident>()));
    let signal_check = check(*key, quote!(#private::check_signals_kept::<#ident>()));
    let skipped = &m.skip_signals;
    let skip_checks = skipped
        .iter()
        .map(|s| check(s.span(), quote!(#private::check_skip_signal::<#ident>(#s))));
    let old_type = quote_spanned!(source_span=> type Old = #source;);
    let map = quote_spanned!(with_span=> const MAP: fn(Self::Old) -> Self = #with;);
    let migrates = quote! {
        #[automatically_derived]
        impl #alias::MigratesFrom for #ident #stored {
            #old_type
            #map
            const SKIPPED_SIGNALS: &'static [&'static str] = &[#(#skipped),*];
        }
    };
    let checks = quote! {
        #source_check
        #hybrid_check
        #compensation_check
        #signal_check
        #(#skip_checks)*
    };
    (migrates, checks)
}
