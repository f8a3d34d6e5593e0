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
        ), budget(tokens = 50_000, cost = 2))]
        pub enum Checkout {
            #[agent(initial, tools(SearchProducts, GetCart), to(Review))]
            Browsing { cart: Cart },
            #[agent(route = llm, tools(ReserveInventory), to(Payment(args = PayArgs), Browsing), on_error = Failed, on_budget = Failed, budget(asks = 3, cost = 0.25))]
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
fn an_on_error_state_holds_one_field_at_most() {
    let input = parse_quote! {
        enum A {
            #[agent(initial, to(Next), on_error = Failed)]
            Start,
            #[agent(to(Done), on_error = Broken)]
            Next,
            #[agent(terminal)]
            Done,
            #[agent(terminal)]
            Failed { reason: String, at: u64 },
            #[agent(terminal)]
            Broken(String, u32),
        }
    };
    assert_eq!(
        errors(&input),
        [
            "state `Failed` cannot be entered on error: it has 2 fields, and a failure fills one",
            "state `Broken` cannot be entered on error: it has 2 fields, and a failure fills one",
        ]
    );
    let shapes = parse_quote! {
        enum A {
            #[agent(initial, to(B), on_error = Unit)]
            A,
            #[agent(to(C), on_error = Named)]
            B,
            #[agent(to(Done), on_error = Unnamed)]
            C,
            #[agent(terminal)]
            Done,
            #[agent(terminal)]
            Unit,
            #[agent(terminal)]
            Named { reason: Failure },
            #[agent(terminal)]
            Unnamed(String),
        }
    };
    assert_eq!(errors(&shapes), Vec::<String>::new());
}

#[test]
fn budgets_are_read_on_the_enum_and_on_states() {
    use crate::attr::Budget;
    let input = parse_quote! {
        #[agent(budget(tokens = 50_000, cost = 2))]
        enum A {
            #[agent(initial, to(Done), on_budget = Over, budget(cost = 0.25, asks = 3, tool_calls = 1_0))]
            Start,
            #[agent(terminal)]
            Done,
            #[agent(terminal)]
            Over(String),
        }
    };
    let cx = Ctxt::new();
    let agent = ast::parse(&cx, &input).unwrap();
    check::check(&cx, &agent);
    assert!(cx.into_errors().is_empty());
    let budget = |tokens, cost_micros, asks, tool_calls| Budget {
        tokens,
        cost_micros,
        asks,
        tool_calls,
    };
    assert_eq!(
        agent.budget,
        Some(budget(Some(50_000), Some(2_000_000), None, None))
    );
    let start = &agent.states[0];
    assert_eq!(
        start.budget.map(|b| b.1),
        Some(budget(None, Some(250_000), Some(3), Some(10)))
    );
    assert_eq!(
        start.on_budget.as_ref().map(ToString::to_string).as_deref(),
        Some("Over")
    );
    assert_eq!(start.successors().len(), 2, "`on_budget` is a successor");
}

#[test]
fn budget_mistakes_are_each_reported() {
    let agent = |limits: proc_macro2::TokenStream| -> DeriveInput {
        parse_quote! {
            enum A {
                #[agent(initial, to(Done), budget(#limits))]
                Start,
                #[agent(terminal)]
                Done,
            }
        }
    };
    for (limits, error) in [
        (
            quote::quote!(tokns = 5),
            "unknown key `tokns` in `budget(...)`",
        ),
        (
            quote::quote!(asks = 1, asks = 2),
            "duplicate key `asks` in `budget(...)`",
        ),
        (quote::quote!(asks = 0), "a budget of zero can never be met"),
        (
            quote::quote!(cost = 0.0),
            "a budget of zero can never be met",
        ),
        (
            quote::quote!(tool_calls = -1),
            "a budget cannot be negative: `tool_calls = -1`",
        ),
        (
            quote::quote!(tokens = "10"),
            "expected `tokens = N` with N a whole number of 1 or more, found `\"10\"`",
        ),
        (
            quote::quote!(tokens = 1.5),
            "expected `tokens = N` with N a whole number of 1 or more, found `1.5`",
        ),
        (
            quote::quote!(cost = 1e3),
            "expected `cost = X` with X a decimal amount above zero, found `1e3`",
        ),
        (
            quote::quote!(cost = 0.1234567),
            "`cost = 0.1234567` has 7 decimal places, and a cost is counted in millionths",
        ),
        (
            quote::quote!(tokens = 18446744073709551616),
            "`tokens = 18446744073709551616` is too large to count",
        ),
        (quote::quote!(cost), "expected `cost = X`"),
        (quote::quote!(), "`budget()` sets no limit"),
    ] {
        assert_eq!(errors(&agent(limits)), [error]);
    }
    let misplaced = parse_quote! {
        enum A {
            #[agent(initial, to(Done), on_budget = Ovr)]
            Start,
            #[agent(terminal, on_budget = Over, budget(asks = 1))]
            Done,
            #[agent(terminal)]
            Over { a: u8, b: u8 },
        }
    };
    assert_eq!(
        errors(&misplaced),
        [
            "unknown state `Ovr` in `on_budget = ...`",
            "terminal state `Done` has transitions",
            "`budget(...)` has no effect on terminal state `Done`",
            "state `Over` cannot be entered when a budget is exceeded: it has 2 fields, and a failure fills one",
        ]
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
    assert!(out.contains("impl :: durable_agents :: __private :: Tool for Count"));
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

#[test]
fn version_takes_a_whole_number_of_one_or_more() {
    let agent = |version: proc_macro2::TokenStream| -> DeriveInput {
        parse_quote! {
            #[agent(version = #version)]
            enum A {
                #[agent(initial, to(Done))]
                Start,
                #[agent(terminal)]
                Done,
            }
        }
    };
    assert_eq!(errors(&agent(quote::quote!(7))), Vec::<String>::new());
    assert_eq!(
        errors(&agent(quote::quote!(0))),
        ["versions start at 1: `version = 0` is not a version"]
    );
    for (written, shown) in [
        (quote::quote!(-1), "`-1`"),
        (quote::quote!(1.5), "`1.5`"),
        (quote::quote!("2"), "`\"2\"`"),
        (quote::quote!(2u8), "`2u8`"),
        (quote::quote!(4294967296), "`4294967296`"),
    ] {
        assert_eq!(
            errors(&agent(written)),
            [format!(
                "expected `version = N` with N a whole number of 1 or more, found {shown}"
            )]
        );
    }
}

fn migrating(attr: &proc_macro2::TokenStream) -> DeriveInput {
    parse_quote! {
        #[agent(#attr)]
        enum Checkout {
            #[agent(initial, to(Done))]
            Start,
            #[agent(terminal)]
            Done,
        }
    }
}

#[test]
fn migrate_from_is_read_whole() {
    let cx = Ctxt::new();
    let input = migrating(&quote::quote!(
        version = 3,
        migrate_from(v2::Checkout, with = maps::from_v2, skip_signal("a", "b"))
    ));
    let agent = ast::parse(&cx, &input).expect("an agent");
    assert!(cx.into_errors().is_empty());
    assert_eq!(agent.version.map(|v| v.1), Some(3));
    let (_, m) = agent.migrate_from.as_ref().expect("migrate_from");
    assert_eq!(crate::attr::path_text(&m.source), "v2::Checkout");
    assert_eq!(crate::attr::path_text(&m.with), "maps::from_v2");
    let skipped: Vec<String> = m.skip_signals.iter().map(syn::LitStr::value).collect();
    assert_eq!(skipped, ["a", "b"]);
}

#[test]
fn malformed_migrate_from_is_reported_and_dropped() {
    let cases = [
        (
            quote::quote!(migrate_from(v1::Checkout, with = from_v1)),
            "`migrate_from(...)` needs a `version = N` on `Checkout`, above the version it migrates from",
        ),
        (
            quote::quote!(version = 2, migrate_from(v1::Checkout)),
            "`migrate_from(v1::Checkout)` has no `with = function` mapping its states",
        ),
        (
            quote::quote!(version = 2, migrate_from(with = from_v1)),
            "`migrate_from(...)` does not name the previous version's enum",
        ),
        (
            quote::quote!(
                version = 2,
                migrate_from(v1::Checkout, with = from_v1, skip = "a")
            ),
            "unknown key `skip` in `#[agent(...)]` on `migrate_from(...)`",
        ),
        (
            quote::quote!(
                version = 2,
                migrate_from(v1::Checkout, v0::Checkout, with = from_v1)
            ),
            "`migrate_from(...)` names one source, and `v0::Checkout` is a second",
        ),
        (
            quote::quote!(
                version = 2,
                migrate_from(v1::Checkout, with = from_v1, skip_signal(a))
            ),
            "expected `skip_signal(\"signal\", ...)` with the signals' names as strings",
        ),
        (
            quote::quote!(
                version = 2,
                migrate_from(v1::Checkout, with = from_v1, skip_signal("a", "a"))
            ),
            "signal `a` is named twice in `skip_signal(...)`",
        ),
        (
            quote::quote!(
                version = 2,
                migrate_from(v1::Checkout, with = from_v1, skip_signal())
            ),
            "`skip_signal()` names no signal",
        ),
        (
            quote::quote!(version = 2, migrate_from),
            "expected `migrate_from(...)` with the previous version's enum and its mapping",
        ),
    ];
    for (attr, expected) in cases {
        let cx = Ctxt::new();
        let input = migrating(&attr);
        let agent = ast::parse(&cx, &input).expect("an agent");
        let errors: Vec<String> = cx
            .into_errors()
            .into_iter()
            .map(|e| e.to_string().lines().next().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(errors, [expected], "for `{attr}`");
        if expected.contains("needs a `version") {
            continue;
        }
        assert!(agent.migrate_from.is_none(), "kept a malformed `{attr}`");
    }
}

#[test]
fn migration_expansion_snapshot() {
    let input = migrating(&quote::quote!(
        version = 2,
        migrate_from(v1::Checkout, with = from_v1, skip_signal("approval"))
    ));
    let tokens = crate::derive_agent_impl(&input);
    let file: syn::File = syn::parse2(tokens).expect("the expansion parses as a file");
    let text = prettyplease::unparse(&file);
    // The parts this feature adds; the rest is the ordinary expansion, snapshotted above:
    // the const checks beside the enum, then the impls in the generated block.
    let checks_start = text
        .find("const _: () = ::durable_agents::__private::fail_if")
        .expect("the checks");
    let checks_end = checks_start
        + text[checks_start..]
            .find("const _: () = {")
            .expect("the block");
    let start = text
        .find("impl __agent_private::AgentFacts")
        .expect("the facts impl");
    let migrates = start
        + text[start..]
            .find("impl __agent_private::MigratesFrom")
            .expect("the migration's impl");
    let end = migrates
        + text[migrates..]
            .find("#[automatically_derived]")
            .expect("the impls after the migration's");
    let version_and_migrate: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("VERSION") || l.contains("migrate") || l.contains("older_versions"))
        .collect();
    insta::assert_snapshot!(format!(
        "{}\n---\n{}{}",
        version_and_migrate.join("\n"),
        &text[start..end],
        &text[checks_start..checks_end],
    ));
}
