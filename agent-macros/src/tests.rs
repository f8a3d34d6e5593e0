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
            #[agent(route = llm, tools(ReserveInventory), to(Payment(args = PayArgs), Browsing), on_error = Failed)]
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
fn typo_in_to_gives_one_error_with_suggestion() {
    let input = parse_quote! {
        enum A {
            #[agent(initial, to(Reveiw))]
            Browsing,
            #[agent(to(Done))]
            Review,
            #[agent(terminal)]
            Done,
        }
    };
    assert_eq!(errors(&input), ["unknown state `Reveiw` in `to(...)`"]);
    let cx = Ctxt::new();
    let agent = ast::parse(&cx, &input).unwrap();
    check::check(&cx, &agent);
    assert!(
        cx.into_errors()[0]
            .to_string()
            .contains("did you mean `Review`?")
    );
}

#[test]
fn initial_states_are_counted() {
    let none = parse_quote! {
        enum A {
            #[agent(to(B))]
            A,
            #[agent(terminal)]
            B,
        }
    };
    assert_eq!(errors(&none), ["agent `A` has no initial state"]);
    let two = parse_quote! {
        enum A {
            #[agent(initial, to(C))]
            A,
            #[agent(initial, to(C))]
            B,
            #[agent(terminal)]
            C,
        }
    };
    assert_eq!(
        errors(&two),
        ["agent `A` has more than one initial state: `A` and `B`"]
    );
}

#[test]
fn unreachable_and_dead_ends() {
    let input = parse_quote! {
        enum A {
            #[agent(initial, to(B, Done))]
            A,
            B,
            #[agent(to(Done))]
            Orphan,
            #[agent(terminal)]
            Done,
        }
    };
    assert_eq!(
        errors(&input),
        [
            "state `B` has no way out",
            "state `Orphan` is unreachable from the initial state `A`",
        ]
    );
}

#[test]
fn trap_cycles_are_reported_once_in_declaration_order() {
    let input = parse_quote! {
        enum A {
            #[agent(initial, to(Enter, Done))]
            A,
            #[agent(to(Y))]
            Enter,
            #[agent(to(X))]
            Y,
            #[agent(to(Y))]
            X,
            #[agent(terminal)]
            Done,
        }
    };
    let errs = errors(&input);
    assert_eq!(errs, ["no terminal state can be reached from `Y`, `X`"]);
}

#[test]
fn dag_cycles_name_their_states_in_order() {
    let input = parse_quote! {
        #[agent(dag)]
        enum A {
            #[agent(initial, to(B))]
            A,
            #[agent(to(C))]
            B,
            #[agent(to(D, B))]
            C,
            #[agent(terminal)]
            D,
        }
    };
    assert_eq!(
        errors(&input),
        ["agent `A` is declared `dag` but has a cycle: `B` -> `C` -> `B`"]
    );
    let self_loop = parse_quote! {
        #[agent(dag)]
        enum A {
            #[agent(initial, to(A, B))]
            A,
            #[agent(terminal)]
            B,
        }
    };
    assert_eq!(
        errors(&self_loop),
        ["agent `A` is declared `dag` but has a cycle: `A` -> `A`"]
    );
}

#[test]
fn tool_rules() {
    let input = parse_quote! {
        #[agent(tools(read(R), write(W), hybrid(H1, H2(compensate = R), H3(compensate = Q))))]
        enum A {
            #[agent(initial, tools(R, X), to(B))]
            A,
            #[agent(terminal)]
            B,
        }
    };
    assert_eq!(
        errors(&input),
        [
            "hybrid tool `H1` has no compensation",
            "compensation `R` of hybrid tool `H2` is a `read` tool, not a `write` tool",
            "unknown tool `Q` in `compensate = ...` of hybrid tool `H3`",
            "tool `X` is not declared on agent `A`",
        ]
    );
}

#[test]
fn attribute_errors_are_all_reported_and_suppress_graph_errors() {
    let input = parse_quote! {
        #[agent(max_steps = 0, dag, dag)]
        enum A {
            #[agent(inital, to(B), tools = 3)]
            A,
            #[agent(terminal, terminal)]
            B,
        }
    };
    assert_eq!(
        errors(&input),
        [
            "expected `max_steps = N (a positive integer)`",
            "duplicate key `dag` in `#[agent(...)]`",
            "unknown key `inital` in `#[agent(...)]` on a variant",
            "expected `tools(...)` with a list of tools",
            "duplicate key `terminal` in `#[agent(...)]`",
        ]
    );
}

#[test]
fn unsupported_inputs_do_not_panic() {
    for input in [
        parse_quote!(
            struct S;
        ),
        parse_quote!(
            enum E<T> {
                A(T),
            }
        ),
        parse_quote!(
            enum E {}
        ),
        parse_quote!(union U { a: u8 }),
        parse_quote!(
            #[agent]
            enum E {
                A,
            }
        ),
        parse_quote!(
            #[agent = "x"]
            enum E {
                #[agent(to())]
                A,
            }
        ),
        parse_quote!(
            enum E {
                #[agent(to(::a::B), tools(read(X)), route = llm, wait = 3)]
                A,
            }
        ),
    ] {
        assert!(!errors(&input).is_empty());
    }
}

#[test]
fn expansion_snapshot() {
    let tokens = crate::derive_agent_impl(&checkout());
    let file: syn::File = syn::parse2(tokens).expect("the expansion parses as a file");
    insta::assert_snapshot!(prettyplease::unparse(&file));
}

#[test]
fn raw_and_plain_identifiers_are_one_name() {
    let input = parse_quote! {
        #[agent(tools(read(Search, r#Search)))]
        enum A {
            #[agent(initial, tools(r#Search), to(Match))]
            Start,
            #[agent(to(r#Done, Done))]
            r#Match,
            #[agent(terminal)]
            Done,
        }
    };
    assert_eq!(
        errors(&input),
        [
            "tool `Search` is declared twice on agent `A`",
            "`Done` is listed twice in `to(...)` of state `Match`",
        ]
    );
}

#[test]
fn one_option_for_the_model_and_colliding_handlers() {
    let input = parse_quote! {
        #[agent(tools(read(Search)))]
        enum A {
            #[agent(initial, route = llm, to(HttpCall))]
            Start,
            #[agent(route = llm, tools(Search), to(HTTPCall))]
            HttpCall,
            #[agent(to(Done))]
            HTTPCall,
            #[agent(terminal)]
            Done,
        }
    };
    assert_eq!(
        errors(&input),
        [
            "LLM-routed state `Start` has only one option, `HttpCall`",
            "states `HttpCall` and `HTTPCall` have the same handler method `http_call`",
        ]
    );
}

#[test]
fn tool_attribute_mistakes_are_each_reported_and_a_stub_is_emitted() {
    let input: DeriveInput = parse_quote! {
        #[tool(kind = 3, kind = read, input = String, output = u8, retries = 0, timout_ms = 5)]
        struct Count;
    };
    let cx = Ctxt::new();
    let attrs = crate::attr::tool_attrs(&cx, &input.attrs);
    assert!(attrs.input.is_given() && attrs.output.is_given());
    let messages: Vec<String> = cx
        .into_errors()
        .iter()
        .map(|e| e.to_string().lines().next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        messages,
        [
            "expected `kind = read`",
            "duplicate key `kind` in `#[tool(...)]`",
            "`retries` counts attempts in all and must be at least 1",
            "unknown key `timout_ms` in `#[tool(...)]`",
        ]
    );
    let out = crate::tool::derive(&input).to_string();
    assert_eq!(out.matches("compile_error").count(), 4);
    assert!(out.contains("impl :: durable_agents :: Tool for Count"));
    assert!(out.contains("type Input = String"));
}

#[test]
fn transition_arguments_need_a_routed_state_and_well_formed_syntax() {
    let input = parse_quote! {
        enum A {
            #[agent(initial, to(B(args = X), C))]
            A,
            #[agent(route = llm, to(C(Y), A(arg = X), B(args = X, args = Y)))]
            B,
            #[agent(terminal)]
            C,
        }
    };
    assert_eq!(
        errors(&input),
        [
            "expected `C(args = Y)`",
            "unknown key `arg` in `#[agent(...)]` on a transition",
            "duplicate key `args` on transition `B`",
            "transition `A` -> `B` takes an argument, but `A` is not LLM-routed",
        ]
    );
    let ok = parse_quote! {
        enum A {
            #[agent(initial, route = llm, to(B(args = Vec<u8>), C(args = path::to::X), A))]
            A,
            #[agent(to(C))]
            B,
            #[agent(terminal)]
            C,
        }
    };
    assert_eq!(errors(&ok), Vec::<String>::new());
    let cx = Ctxt::new();
    let agent = ast::parse(&cx, &ok).unwrap();
    let a = &agent.states[0];
    assert_eq!(a.to.len(), 3);
    assert_eq!(a.args.len(), 2);
    assert_eq!(a.args[0].to, "B");
    assert!(a.argument(&a.to[2]).is_none());
}
