//! State constructors by name: `checkout::new::Receipt { customer, cart, payment_id }`, a
//! struct per state with the variant's fields, that `Ctx::to` takes (`IntoTarget`). The
//! positional `checkout::Receipt::new(customer, cart, payment_id)` stays; the named form
//! cannot swap two fields of one type.
//!
//! The structs live in a module inside the markers' module, where the user's types cannot
//! be named (the enum may be declared inside a function), so each field's type is written
//! as an associated type of the state's marker, set outside the module, as the route
//! enums' argument types are.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{Fields, Ident, Visibility};

use crate::ast::{Agent, State};
use crate::expand;

/// The module name inside the markers' module.
const MODULE: &str = "new";

fn fields_trait(state: &State) -> Ident {
    format_ident!("__FieldsOf{}", names_unraw(&state.ident))
}

fn names_unraw(ident: &Ident) -> String {
    crate::names::unraw(ident)
}

/// The enum's visibility seen from two levels down (inside `new`): the structs are exactly
/// as visible as the markers, or rustc refuses `IntoTarget::State` as a leak.
fn vis_two_down(vis: &Visibility) -> TokenStream {
    match vis {
        Visibility::Public(_) => quote!(pub),
        Visibility::Inherited => quote!(pub(in super::super)),
        Visibility::Restricted(r) => {
            let path = &r.path;
            let mut segments = path.segments.iter().peekable();
            match segments.peek().map(|s| s.ident.to_string()).as_deref() {
                Some("crate") => quote!(pub(in #path)),
                Some("self") => {
                    let rest = segments.skip(1);
                    quote!(pub(in super::super #(::#rest)*))
                }
                _ => quote!(pub(in super::super::#path)),
            }
        }
    }
}

/// Inside the markers' module: `pub mod new { ... }` and the hidden field-type traits.
pub(crate) fn inside(agent: &Agent, inner_vis: &TokenStream) -> TokenStream {
    let module = Ident::new(MODULE, proc_macro2::Span::call_site());
    let traits = agent.states.iter().map(|s| {
        let tr = fields_trait(s);
        let assoc = expand::field_params(s).into_iter().map(|(f, _)| f);
        quote! {
            #[doc(hidden)]
            #[allow(non_camel_case_types)]
            #inner_vis trait #tr {
                #(type #assoc;)*
            }
        }
    });
    let vis = vis_two_down(&agent.vis);
    let structs = agent.states.iter().map(|s| {
        let v = &s.ident;
        let tr = fields_trait(s);
        let doc = format!(
            "State `{}` of agent `{}` by its fields' names, for `Ctx::to`.",
            s.name(),
            agent.name
        );
        let params = expand::field_params(s);
        let body = match &s.fields {
            Fields::Named(_) => {
                let fields = params.iter().map(|(f, _)| {
                    let fdoc = format!("Field `{f}`.");
                    quote!(#[doc = #fdoc] #vis #f: <super::#v as super::#tr>::#f)
                });
                quote!({ #(#fields,)* })
            }
            Fields::Unnamed(_) => {
                let fields = params
                    .iter()
                    .map(|(f, _)| quote!(#vis <super::#v as super::#tr>::#f));
                quote!((#(#fields,)*);)
            }
            Fields::Unit => quote!(;),
        };
        quote! {
            #[doc = #doc]
            #[allow(missing_debug_implementations)]
            #vis struct #v #body
        }
    });
    let doc = format!(
        "The states of agent `{}` built by their fields' names: `ctx.to(new::State {{ field, .. }})`.",
        agent.name
    );
    quote! {
        #(#traits)*
        #[doc = #doc]
        #inner_vis mod #module {
            #(#structs)*
        }
    }
}

/// Outside the module: the field types, and `IntoTarget` for each struct.
pub(crate) fn outside(agent: &Agent) -> TokenStream {
    let krate = &agent.krate;
    let module = &agent.module;
    let enum_ident = &agent.ident;
    let new = Ident::new(MODULE, proc_macro2::Span::call_site());
    let impls = agent.states.iter().map(|s| {
        let v = &s.ident;
        let tr = fields_trait(s);
        let m = expand::marker(agent, s);
        let params = expand::field_params(s);
        let assoc = params.iter().map(|(f, t)| quote!(type #f = #t;));
        let value = match &s.fields {
            Fields::Named(_) => {
                let moves = params.iter().map(|(f, _)| quote!(#f: self.#f));
                quote!(#enum_ident::#v { #(#moves,)* })
            }
            Fields::Unnamed(_) => {
                let moves = (0..params.len())
                    .map(syn::Index::from)
                    .map(|i| quote!(self.#i));
                quote!(#enum_ident::#v(#(#moves,)*))
            }
            Fields::Unit => quote!(#enum_ident::#v),
        };
        quote! {
            #[automatically_derived]
            impl #module::#tr for #m {
                #(#assoc)*
            }
            #[automatically_derived]
            impl #krate::__private::IntoTarget for #module::#new::#v {
                type State = #m;
                fn into_target(self) -> #krate::__private::Target<#m> {
                    #krate::__private::Target::__new(#value)
                }
            }
        }
    });
    quote!(#(#impls)*)
}
