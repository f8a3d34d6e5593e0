//! `budget(tokens = N, cost = X, asks = N, tool_calls = N)`: on the enum each run's budget, on a
//! variant what one visit of the state may spend. Any of the limits, each once and above zero;
//! `cost` is a decimal amount of the price table's currency, kept exact in millionths.

use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{Lit, Token};

use crate::ctxt::{Ctxt, Message};
use crate::names;

use super::values::{Written, empty_parens, key_of, skip_value};
use super::{ASKS, BUDGET_KEYS, COST, TOKENS, TOOL_CALLS};

/// The limits as the core's `Budget` holds them; `None`: no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Budget {
    pub(crate) tokens: Option<u64>,
    pub(crate) cost_micros: Option<u64>,
    pub(crate) asks: Option<u64>,
    pub(crate) tool_calls: Option<u64>,
}

const EXAMPLE: &str = "budget(tokens = 20_000, cost = 0.50)";

impl Budget {
    fn slot(&mut self, key: &str) -> Option<&mut Option<u64>> {
        match key {
            TOKENS => Some(&mut self.tokens),
            COST => Some(&mut self.cost_micros),
            ASKS => Some(&mut self.asks),
            TOOL_CALLS => Some(&mut self.tool_calls),
            _ => None,
        }
    }
}

/// `budget(...)`, kept only when every limit in it is well formed (each mistake is reported).
pub(super) fn budget(cx: &Ctxt, meta: &ParseNestedMeta<'_>) -> syn::Result<Option<Budget>> {
    let keys = names::list(BUDGET_KEYS.iter().copied());
    if !meta.input.peek(syn::token::Paren) {
        cx.error(
            meta.path.span(),
            Message::new("expected `budget(...)` with the limits it sets")
                .help(format!("write `{EXAMPLE}`, with any of {keys}")),
        );
        skip_value(meta.input)?;
        return Ok(None);
    }
    if empty_parens(meta.input)? {
        cx.error(
            meta.path.span(),
            Message::new("`budget()` sets no limit").help(format!(
                "set one or more of {keys}, like `{EXAMPLE}`, or remove `budget()`"
            )),
        );
        return Ok(None);
    }
    let mut out = Budget::default();
    let mut written: Vec<String> = Vec::new();
    let mut whole = true;
    let nested = meta.parse_nested_meta(|item| {
        let key = key_of(&item);
        let Some(slot) = out.slot(&key) else {
            whole = false;
            unknown_limit(cx, &item, &key, &keys);
            return skip_value(item.input);
        };
        if written.contains(&key) {
            whole = false;
            cx.error(
                item.path.span(),
                Message::new(format!("duplicate key `{key}` in `budget(...)`"))
                    .help(format!("remove this `{key}`; each limit may be set once")),
            );
            return skip_value(item.input);
        }
        written.push(key.clone());
        match limit(cx, &item, &key)? {
            Some(n) => *slot = Some(n),
            None => whole = false,
        }
        Ok(())
    });
    if let Err(e) = nested {
        cx.syn_error(e);
        return Ok(None);
    }
    Ok(whole.then_some(out))
}

fn unknown_limit(cx: &Ctxt, item: &ParseNestedMeta<'_>, key: &str, keys: &str) {
    let msg = Message::new(format!("unknown key `{key}` in `budget(...)`"));
    let msg = if key == "cost_micros" {
        msg.help("write `cost` in the currency, like `cost = 0.50`; it is kept in millionths")
    } else {
        match names::did_you_mean(key, BUDGET_KEYS.iter().copied()) {
            Some(hint) => msg.help(hint),
            None => msg,
        }
    };
    cx.error(
        item.path.span(),
        msg.note(format!("a budget sets any of {keys}")),
    );
}

/// How a limit is written, for the messages.
fn example(key: &str) -> &'static str {
    match key {
        TOKENS => "tokens = 20_000",
        COST => "cost = 0.50",
        ASKS => "asks = 5",
        _ => "tool_calls = 10",
    }
}

/// One limit's value: a whole number above zero, or for `cost` a decimal amount above zero
/// with at most six decimal places. Reported at the value otherwise.
fn limit(cx: &Ctxt, item: &ParseNestedMeta<'_>, key: &str) -> syn::Result<Option<u64>> {
    let example = example(key);
    let what = if key == COST {
        "X a decimal amount above zero"
    } else {
        "N a whole number of 1 or more"
    };
    let placeholder = if key == COST { 'X' } else { 'N' };
    if !item.input.peek(Token![=]) {
        cx.error(
            item.path.span(),
            Message::new(format!("expected `{key} = {placeholder}`"))
                .help(format!("write the limit, like `{example}`")),
        );
        skip_value(item.input)?;
        return Ok(None);
    }
    item.input.parse::<Token![=]>()?;
    let written = Written::read(item)?;
    let value = match syn::parse2::<Lit>(written.tokens.clone()) {
        Ok(Lit::Int(lit)) if lit.suffix().is_empty() => Some(lit.base10_digits().to_owned()),
        // A decimal, not `1e3`: the amount is read digit by digit.
        Ok(Lit::Float(lit))
            if lit.suffix().is_empty()
                && key == COST
                && !lit.base10_digits().contains(['e', 'E']) =>
        {
            Some(lit.base10_digits().to_owned())
        }
        _ => None,
    }
    // syn reads `-5` as one literal: a negative limit is not a number too large.
    .filter(|digits| !digits.starts_with('-'));
    let problem = match value.as_deref().map(|digits| amount(key, digits)) {
        Some(Ok(0)) => Message::new("a budget of zero can never be met").help(format!(
            "set `{key}` to more than zero, like `{example}`, or remove it"
        )),
        Some(Ok(n)) => return Ok(Some(n)),
        Some(Err(Amount::Places(places))) => Message::new(format!(
            "`cost = {}` has {places} decimal places, and a cost is counted in millionths",
            written.text
        ))
        .help("round it to 6 decimal places at most"),
        Some(Err(Amount::TooLarge)) => {
            let max = if key == COST {
                format!("{} (whole units of the currency)", u64::MAX / 1_000_000)
            } else {
                u64::MAX.to_string()
            };
            Message::new(format!("`{key} = {}` is too large to count", written.text))
                .help(format!("a limit is at most {max}"))
        }
        None if written.text.starts_with('-') => Message::new(format!(
            "a budget cannot be negative: `{key} = {}`",
            written.text
        ))
        .help(format!("set a limit above zero, like `{example}`")),
        None => Message::new(format!(
            "expected `{key} = {placeholder}` with {what}, found {}",
            written.shown()
        ))
        .help(if written.is_quoted() {
            format!("write the number without quotes, like `{example}`")
        } else {
            format!("write it like `{example}`")
        }),
    };
    cx.error(written.span, problem);
    Ok(None)
}

enum Amount {
    /// A cost with more decimal places than millionths hold.
    Places(usize),
    TooLarge,
}

/// The limit of `digits` (a literal's, without underscores): the number itself, or for `cost`
/// the amount in millionths, computed from the digits so that it is exact.
fn amount(key: &str, digits: &str) -> Result<u64, Amount> {
    if key != COST {
        return digits.parse().map_err(|_| Amount::TooLarge);
    }
    let (units, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if fraction.len() > 6 {
        return Err(Amount::Places(fraction.len()));
    }
    let units: u64 = units.parse().map_err(|_| Amount::TooLarge)?;
    let fraction: u64 = format!("{fraction:0<6}")
        .parse()
        .map_err(|_| Amount::TooLarge)?;
    units
        .checked_mul(1_000_000)
        .and_then(|u| u.checked_add(fraction))
        .ok_or(Amount::TooLarge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_are_exact_millionths() {
        let micros = |d: &str| amount(COST, d).ok();
        assert_eq!(micros("0.50"), Some(500_000));
        assert_eq!(micros("2"), Some(2_000_000));
        assert_eq!(micros("2."), Some(2_000_000));
        assert_eq!(micros("0.000001"), Some(1));
        assert_eq!(micros("12.345678"), Some(12_345_678));
        assert_eq!(micros("0.1"), Some(100_000));
        assert!(matches!(amount(COST, "0.0000001"), Err(Amount::Places(7))));
        assert!(matches!(
            amount(COST, "18446744073709.551616"),
            Err(Amount::TooLarge)
        ));
        assert_eq!(amount(TOKENS, "20000").ok(), Some(20_000));
    }
}
