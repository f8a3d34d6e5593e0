//! The state structs: one type per state, `checkout::Receipt { customer, cart, payment_id }`,
//! with the variant's fields by name (a tuple struct for a tuple variant, a unit struct for
//! a unit variant). It is at once the marker `Ctx<'_, checkout::Receipt>` is typed by, the
//! value the handler receives and destructures by field name, and the value `Ctx::to`
//! takes (`State::__into_agent`): one name and one constructor per state, which cannot swap
//! two fields of one type.
//!
//! The structs live in the markers' module, where the user's types cannot be named (the
//! enum may be declared inside a function), so each field's type is written as an
//! associated type of the state's struct, set outside the module, as the route enums'
//! argument types are.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{Attribute, Fields, Ident};

use crate::ast::{Agent, State};
use crate::expand;

fn fields_trait(state: &State) -> Ident {
    format_ident!("__FieldsOf{}", crate::names::unraw(&state.ident))
}

/// The `#[doc]` attributes of the variant's fields, in order, so the struct's fields carry
/// the user's docs.
fn field_docs(state: &State) -> Vec<Vec<&Attribute>> {
    state
        .fields
        .iter()
        .map(|f| {
            f.attrs
                .iter()
                .filter(|a| a.path().is_ident("doc"))
                .collect()
        })
        .collect()
}

/// A field's docs: the user's, then its type as written (the field's type in the struct is
/// the associated type that names it, which is all rustdoc shows).
fn field_doc(docs: &[&Attribute], ty: &syn::Type) -> TokenStream {
    let ty = format!("Type: `{}`.", expand::type_text(ty));
    if docs.is_empty() {
        quote!(#[doc = #ty])
    } else {
        quote!(#(#docs)* #[doc = ""] #[doc = #ty])
    }
}

/// Inside the markers' module: the hidden field-type traits and one struct per state, as
/// visible as the enum (`inner_vis`), its fields too.
pub(crate) fn inside(agent: &Agent, vis: &TokenStream) -> TokenStream {
    // A unit state has no field types to name: no trait.
    let traits = agent
        .states
        .iter()
        .filter(|s| !s.fields.is_empty())
        .map(|s| {
            let tr = fields_trait(s);
            let assoc = expand::field_params(s).into_iter().map(|(f, _)| f);
            quote! {
                #[doc(hidden)]
                #[allow(non_camel_case_types)]
                #vis trait #tr {
                    #(type #assoc;)*
                }
            }
        });
    let structs = agent.states.iter().map(|s| {
        let v = &s.ident;
        let tr = fields_trait(s);
        let doc = format!(
            "State `{}` of agent `{}`: the value its handler receives and destructures by field name, the type its `Ctx` is typed by, and the target `ctx.to(...)` takes.",
            s.name(),
            agent.name,
        );
        let params = expand::field_params(s);
        let docs = field_docs(s);
        let body = match &s.fields {
            Fields::Named(_) => {
                let fields = params.iter().zip(&docs).map(|((f, ty), docs)| {
                    let docs = field_doc(docs, ty);
                    quote!(#docs #vis #f: <#v as #tr>::#f)
                });
                quote!({ #(#fields,)* })
            }
            Fields::Unnamed(_) => {
                let fields = params.iter().zip(&docs).map(|((f, ty), docs)| {
                    let docs = field_doc(docs, ty);
                    quote!(#docs #vis <#v as #tr>::#f)
                });
                quote!((#(#fields,)*);)
            }
            Fields::Unit => quote!(;),
        };
        quote! {
            #[doc = #doc]
            #[allow(missing_debug_implementations, missing_copy_implementations)]
            #vis struct #v #body
        }
    });
    quote! {
        #(#traits)*
        #(#structs)*
    }
}

/// Outside the module: the field types, `State` with the move into the enum, and `Debug`
/// and `Clone` when every field has them.
pub(crate) fn outside(agent: &Agent) -> TokenStream {
    let private = expand::private();
    let module = &agent.module;
    let enum_ident = &agent.ident;
    let stored = expand::stored_as_json(agent);
    let impls = agent.states.iter().map(|s| {
        let v = &s.ident;
        let n = s.name();
        let name = syn::LitStr::new(&n, proc_macro2::Span::call_site());
        let tr = fields_trait(s);
        let m = expand::marker(agent, s);
        let params = expand::field_params(s);
        let assoc = params.iter().map(|(f, t)| quote!(type #f = #t;));
        // `f` of the generated fn, not a name of the user's.
        let f = Ident::new("f", proc_macro2::Span::mixed_site());
        let (value, debug, clone) = match &s.fields {
            Fields::Named(_) => {
                let names: Vec<&Ident> = params.iter().map(|(f, _)| f).collect();
                let texts = names.iter().map(|i| crate::names::unraw(i));
                let value = quote!(#enum_ident::#v { #(#names: self.#names,)* });
                let debug = quote! {
                    #f.debug_struct(#name)
                        #(.field(#texts, &self.#names))*
                        .finish()
                };
                let clone = quote!(#m { #(#names: #private::Clone::clone(&self.#names),)* });
                (value, debug, clone)
            }
            Fields::Unnamed(_) => {
                let index: Vec<syn::Index> = (0..params.len()).map(syn::Index::from).collect();
                let value = quote!(#enum_ident::#v(#(self.#index,)*));
                let debug = quote! {
                    #f.debug_tuple(#name)
                        #(.field(&self.#index))*
                        .finish()
                };
                let clone = quote!(#m(#(#private::Clone::clone(&self.#index),)*));
                (value, debug, clone)
            }
            Fields::Unit => (
                quote!(#enum_ident::#v),
                quote!(#f.write_str(#name)),
                quote!(#m),
            ),
        };
        // `for<'__agent>`: a bound that does not hold drops the impl instead of failing the
        // build (the enum need not be `Debug`; its fields then need not be either).
        let types: Vec<&syn::Type> = params.iter().map(|(_, t)| *t).collect();
        let bounded = |tr: TokenStream| {
            if types.is_empty() {
                TokenStream::new()
            } else {
                quote!(where #(for<'__agent> #types: #tr,)*)
            }
        };
        let debug_bound = bounded(quote!(#private::Debug));
        let clone_bound = bounded(quote!(#private::Clone));
        let fields_impl = (!params.is_empty()).then(|| {
            quote! {
                #[automatically_derived]
                impl #module::#tr for #m {
                    #(#assoc)*
                }
            }
        });
        quote! {
            #fields_impl
            #[automatically_derived]
            impl #private::State for #m #stored {
                type Agent = #enum_ident;
                const NAME: &'static str = #name;
                fn __into_agent(self) -> #enum_ident {
                    #value
                }
            }
            #[automatically_derived]
            impl #private::Debug for #m #debug_bound {
                fn fmt(&self, #f: &mut #private::Formatter<'_>) -> #private::FmtResult {
                    #debug
                }
            }
            #[automatically_derived]
            impl #private::Clone for #m #clone_bound {
                fn clone(&self) -> Self {
                    #clone
                }
            }
        }
    });
    quote!(#(#impls)*)
}
