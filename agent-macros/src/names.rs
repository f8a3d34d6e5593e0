//! Name helpers: case conversion, keyword escaping, "did you mean" suggestions and lists.

use heck::ToSnakeCase;
use proc_macro2::Span;
use syn::Ident;
use syn::ext::IdentExt;

/// `ReviewOrder` -> `review_order`, `HTTPCall` -> `http_call`.
pub(crate) fn snake_case(name: &str) -> String {
    name.strip_prefix("r#").unwrap_or(name).to_snake_case()
}

const KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "do", "dyn",
    "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl", "in", "let",
    "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref", "return",
    "static", "struct", "trait", "true", "try", "type", "typeof", "unsafe", "unsized", "use",
    "virtual", "where", "while", "yield",
];

/// The keywords that cannot be raw identifiers either (`r#self` is not one).
const NOT_RAW: &[&str] = &["self", "super", "crate", "Self", "_"];

/// Whether `name` can name nothing the derive generates (a module, a method), raw or not.
pub(crate) fn reserved(name: &str) -> bool {
    NOT_RAW.contains(&name)
}

/// An identifier for `name`, raw when `name` is a keyword. A name that cannot be an
/// identifier at all (`self`, see [`reserved`]) gets a trailing `_`: the checks report it,
/// and the stubs emitted next to the error must still parse.
pub(crate) fn ident(name: &str, span: Span) -> Ident {
    if reserved(name) {
        Ident::new(&format!("{name}_"), span)
    } else if KEYWORDS.contains(&name) {
        Ident::new_raw(name, span)
    } else {
        Ident::new(name, span)
    }
}

/// The identifier's text without `r#`: `r#Match` and `Match` are one name to Rust.
pub(crate) fn unraw(ident: &Ident) -> String {
    ident.unraw().to_string()
}

/// Whether two identifiers are one name (`r#Match` is `Match`).
pub(crate) fn same(a: &Ident, b: &Ident) -> bool {
    a.unraw() == b.unraw()
}

/// The closest candidate to `name`, if one is close enough to be a likely typo.
pub(crate) fn closest<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let lower = name.to_lowercase();
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let d = if c.to_lowercase() == lower {
            0
        } else {
            strsim::levenshtein(&lower, &c.to_lowercase())
        };
        let limit = (name.chars().count().max(c.chars().count()) / 3).max(1);
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// `` `A`, `B`, `C` `` in the given order.
pub(crate) fn list<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    names
        .into_iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The help ``did you mean `X`?``, if a candidate is close to `name`.
pub(crate) fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    closest(name, candidates).map(|c| format!("did you mean `{c}`?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake() {
        assert_eq!(snake_case("Browsing"), "browsing");
        assert_eq!(snake_case("ReviewOrder"), "review_order");
        assert_eq!(snake_case("HTTPCall"), "http_call");
        assert_eq!(snake_case("Step2Done"), "step2_done");
        assert_eq!(snake_case("A"), "a");
    }

    #[test]
    fn suggestions() {
        let states = ["Browsing", "Review", "Payment"];
        assert_eq!(closest("Reveiw", states), Some("Review"));
        assert_eq!(closest("review", states), Some("Review"));
        assert_eq!(closest("Shipping", states), None);
        assert_eq!(ident("type", Span::call_site()).to_string(), "r#type");
        assert_eq!(ident("super", Span::call_site()).to_string(), "super_");
        assert!(reserved("self") && !reserved("type"));
    }
}
