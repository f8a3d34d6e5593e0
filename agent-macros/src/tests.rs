//! Unit tests of the check stage on `parse_quote!` inputs, and the expansion snapshot.

use syn::{DeriveInput, parse_quote};

use crate::{ast, check, ctxt::Ctxt};

/// The messages `check` reports for `input`, in order.
fn errors(input: &DeriveInput) -> Vec<String> {
    let cx = Ctxt::new();
    if let Some(agent) = ast::parse(&cx, input) {
        check::check(&cx, &agent);
    }
    cx.into_errors()
        .into_iter()
        .map(|e| e.to_string().lines().next().unwrap_or_default().to_owned())
        .collect()
}

fn checkout() -> DeriveInput {
    parse_quote! {
        #[agent(tools(
            read(SearchProducts, GetCart),
            write(ReleaseInventory, ChargePayment),
            hybrid(ReserveInventory(compensate = ReleaseInventory)),
        ))]
        pub enum Checkout {
            #[agent(initial, tools(SearchProducts, GetCart), to(Review))]
            Browsing { cart: Cart },
            #[agent(route = llm, tools(ReserveInventory), to(Payment, Browsing), on_error = Failed)]
            Review { cart: Cart },
            #[agent(tools(ChargePayment), to(Confirm, Failed), max_tool_calls = 3, timeout_ms = 30_000)]
            Payment { order: Order },
            #[agent(wait = "approval", wait_timeout_ms = 60_000, to(Done, Failed))]
            Confirm(Order),
            #[agent(terminal)]
            Done { receipt: String },
            #[agent(terminal, compensate)]
            Failed { reason: String },
        }
    }
}

#[test]
fn checkout_is_valid() {
    assert_eq!(errors(&checkout()), Vec::<String>::new());
}

#[test]
fn expansion_snapshot() {
    let tokens = crate::derive_agent_impl(&checkout());
    let file: syn::File = syn::parse2(tokens).expect("the expansion parses as a file");
    insta::assert_snapshot!(prettyplease::unparse(&file));
}
