//! Small helpers that turn records into text for the pages: times, JSON, the change from
//! one state to the next.

use std::collections::BTreeMap;

use agent_core::started_by::StartedBy;
use agent_core::store::{Labels, Millis, WaitingFor};
use serde_json::Value;

/// What a waiting run waits for, as the pages show it: `its timer` (when it is due shows
/// beside it), `room under <limit>` for a run handed back until a rate limit has room,
/// else the stored text (a signal's name, a children marker).
pub(crate) fn waiting_for(w: &WaitingFor) -> String {
    match w {
        WaitingFor::Timer => "its timer".to_owned(),
        WaitingFor::Capacity(_) => format!("room under {}", w.limit().unwrap_or_default()),
        other => other.to_string(),
    }
}

/// What started a run, from the labels its starter gave it: a schedule's tick, a webhook's
/// delivery, or a message trigger's message. Empty for a run started by code or the API.
pub(crate) fn started_by(labels: &Labels) -> String {
    StartedBy::of(labels)
        .map(|s| s.to_string())
        .unwrap_or_default()
}

/// A time as `2026-01-31 12:34:56Z` (UTC), or `—` for none.
pub(crate) fn time(ms: Millis) -> String {
    if ms <= 0 {
        return "—".to_owned();
    }
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// JSON, pretty, sealed values shown as sealed (`"[sealed:<key id>]"`), cut at `max` bytes
/// (on a character boundary) with a note saying so.
pub(crate) fn json(value: &Value, max: usize) -> (String, bool) {
    let value = agent_core::secrets::shown(value);
    let text = serde_json::to_string_pretty(&*value).unwrap_or_else(|_| value.to_string());
    cut(text, max)
}

/// `text` cut at `max` bytes (on a character boundary) with a note saying so, and whether
/// it was cut.
pub(crate) fn cut(text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (
        format!("{}\n… ({} bytes in all)", &text[..end], text.len()),
        true,
    )
}

/// Where the search `needle` is found in a run: `id` when the run's id starts with it, else
/// the first field of its state (in path order) whose name or value holds it, ignoring case,
/// as `/path = value` (cut short). `None` when it is not found or the needle is empty.
/// Sealed values are searched as shown (`[sealed:…]`), never opened.
pub(crate) fn found_in(id: &str, state: &Value, needle: &str) -> Option<String> {
    if needle.is_empty() {
        return None;
    }
    if id.starts_with(needle) {
        return Some("id".to_owned());
    }
    let needle = needle.to_lowercase();
    let state = agent_core::secrets::shown(state);
    let mut leaves = BTreeMap::new();
    flatten(&state, String::new(), &mut leaves);
    leaves
        .into_iter()
        .find(|(path, value)| {
            path.to_lowercase().contains(&needle) || value.to_lowercase().contains(&needle)
        })
        .map(|(path, value)| cut(format!("{path} = {value}"), 120).0)
}

/// One line of a state's change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    /// `+` added, `-` removed, `~` changed, `>` the state moved to another variant
    /// (`before` and `after` are the variants' names, `path` empty).
    pub(crate) sign: &'static str,
    /// Where, as a JSON pointer within the state's fields (`/cart/items/0`).
    pub(crate) path: String,
    /// The value before (changed, removed).
    pub(crate) before: String,
    /// The value after (changed, added).
    pub(crate) after: String,
}

fn flatten(value: &Value, path: String, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let key = k.replace('~', "~0").replace('/', "~1");
                flatten(v, format!("{path}/{key}"), out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, v) in items.iter().enumerate() {
                flatten(v, format!("{path}/{i}"), out);
            }
        }
        leaf => {
            out.insert(
                if path.is_empty() {
                    "/".to_owned()
                } else {
                    path
                },
                leaf.to_string(),
            );
        }
    }
}

/// A state as stored (serde's external tagging): its variant's name and its fields, `{"Name":
/// {..}}` or `"Name"` for a variant without fields. `None` for any other shape.
fn variant(state: &Value) -> Option<(&str, &Value)> {
    const NO_FIELDS: &Value = &Value::Null;
    match state {
        Value::String(name) => Some((name, NO_FIELDS)),
        Value::Object(map) if map.len() == 1 => map.iter().next().map(|(k, v)| (k.as_str(), v)),
        _ => None,
    }
}

/// What changed from one state to the next, field by field within the variant: a move to
/// another variant is one line of its own (`>`), then only the fields whose values differ
/// (a field the next state carries over unchanged is not a change, whatever its variant);
/// leaf by leaf, in path order. States that are not enum variants are compared whole.
pub(crate) fn diff(before: &Value, after: &Value) -> Vec<Change> {
    match (variant(before), variant(after)) {
        (Some((was, old)), Some((now, new))) => {
            let mut out = Vec::new();
            if was != now {
                out.push(Change {
                    sign: ">",
                    path: String::new(),
                    before: was.to_owned(),
                    after: now.to_owned(),
                });
            }
            out.extend(leaf_diff(old, new));
            out
        }
        _ => leaf_diff(before, after),
    }
}

/// What changed from `before` to `after`, leaf by leaf, in path order.
fn leaf_diff(before: &Value, after: &Value) -> Vec<Change> {
    let mut a = BTreeMap::new();
    let mut b = BTreeMap::new();
    if !before.is_null() {
        flatten(before, String::new(), &mut a);
    }
    if !after.is_null() {
        flatten(after, String::new(), &mut b);
    }
    let mut out = Vec::new();
    for (path, old) in &a {
        match b.get(path) {
            None => out.push(Change {
                sign: "-",
                path: path.clone(),
                before: old.clone(),
                after: String::new(),
            }),
            Some(new) if new != old => out.push(Change {
                sign: "~",
                path: path.clone(),
                before: old.clone(),
                after: new.clone(),
            }),
            Some(_) => {}
        }
    }
    for (path, new) in &b {
        if !a.contains_key(path) {
            out.push(Change {
                sign: "+",
                path: path.clone(),
                before: String::new(),
                after: new.clone(),
            });
        }
    }
    out.sort_by(|x, y| x.path.cmp(&y.path));
    out
}

#[cfg(test)]
mod tests {
    use super::{diff, json, time};
    use serde_json::json;

    #[test]
    fn form_help_drops_intra_doc_link_brackets() {
        assert_eq!(
            super::plain_doc("The [`RefundRequest::binding`] of [`Order`], as sent."),
            "The `RefundRequest::binding` of `Order`, as sent."
        );
    }

    #[test]
    fn times_read_as_utc() {
        assert_eq!(time(0), "—");
        assert_eq!(time(1_700_000_000_000), "2023-11-14 22:13:20Z");
        assert_eq!(time(951_782_400_000), "2000-02-29 00:00:00Z");
    }

    #[test]
    fn a_diff_names_each_leaf_added_removed_or_changed() {
        let a = json!({"Cart": {"items": ["apple", "kiwi"], "n": 2}});
        let b = json!({"Cart": {"items": ["apple"], "n": 1, "note": "x"}});
        let d: Vec<(String, String)> = diff(&a, &b)
            .into_iter()
            .map(|c| (c.sign.to_owned(), c.path))
            .collect();
        assert_eq!(
            d,
            [
                ("-".to_owned(), "/items/1".to_owned()),
                ("~".to_owned(), "/n".to_owned()),
                ("+".to_owned(), "/note".to_owned()),
            ]
        );
        assert!(diff(&a, &a).is_empty());
    }

    #[test]
    fn a_move_to_another_variant_shows_only_what_differs() {
        let shown = |a: serde_json::Value, b: serde_json::Value| -> Vec<String> {
            diff(&a, &b)
                .into_iter()
                .map(|c| format!("{} {} {} {}", c.sign, c.path, c.before, c.after))
                .collect()
        };
        // The order is carried over unchanged: only the move, the dropped reason and the
        // new field show.
        assert_eq!(
            shown(
                json!({"Review": {"order": {"id": "1", "cents": 42}, "reason": "broken"}}),
                json!({"Refunding": {"order": {"id": "1", "cents": 42}, "refund": "r-1"}}),
            ),
            [
                ">  Review Refunding",
                "- /reason \"broken\" ",
                "+ /refund  \"r-1\"",
            ]
        );
        // To and from a variant without fields.
        assert_eq!(
            shown(json!({"Paying": {"cents": 5}}), json!("Done")),
            [">  Paying Done", "- /cents 5 "]
        );
        assert_eq!(shown(json!("Idle"), json!("Idle")), Vec::<String>::new());
        // Not an enum's variant: compared whole.
        assert_eq!(
            shown(json!({"a": 1, "b": 2}), json!({"a": 1, "b": 3})),
            ["~ /b 2 3"]
        );
    }

    #[test]
    fn a_search_finds_an_id_prefix_or_a_field() {
        use super::found_in;
        let state = json!({"Cart": {"items": ["Apple", "kiwi"], "owner": "ada"}});
        assert_eq!(found_in("order-7", &state, "order-").as_deref(), Some("id"));
        assert_eq!(
            found_in("x", &state, "apple").as_deref(),
            Some("/Cart/items/0 = \"Apple\"")
        );
        assert_eq!(
            found_in("x", &state, "OWNER").as_deref(),
            Some("/Cart/owner = \"ada\"")
        );
        assert_eq!(found_in("x", &state, "pear"), None);
        assert_eq!(found_in("x", &state, ""), None);
    }

    #[test]
    fn long_json_is_cut_on_a_character_boundary() {
        let (text, cut) = json(&json!("ééééééééé"), 6);
        assert!(cut);
        assert!(text.contains("bytes in all"));
    }
}

/// One control of a signal form, built from a property of the payload's JSON Schema.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct FormField {
    /// The property's name (the payload's key).
    pub(crate) name: String,
    /// `boolean`, `integer`, `number`, `string`, `choice` (a string enum) or `json` (any
    /// other shape, typed as JSON).
    pub(crate) control: &'static str,
    pub(crate) required: bool,
    /// The property's description (its doc comment), shown as help.
    pub(crate) help: String,
    /// The choices of a string enum.
    pub(crate) choices: Vec<String>,
}

/// The controls of a form for a payload whose schema is `schema`: one per property of an
/// object schema, in the order the schema's object lists them; `None` when the payload is not an object with
/// properties (the page then asks for JSON).
pub(crate) fn form_fields(schema: &Value) -> Option<Vec<FormField>> {
    let properties = schema.get("properties")?.as_object()?;
    if properties.is_empty() {
        return None;
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    Some(
        properties
            .iter()
            .map(|(name, p)| {
                let choices: Vec<String> = p
                    .get("enum")
                    .and_then(Value::as_array)
                    .map(|e| {
                        e.iter()
                            .filter_map(|v| v.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                // `Option<T>` reads `"type": ["T", "null"]`: the control is T's, not required.
                let types: Vec<&str> = match p.get("type") {
                    Some(Value::String(t)) => vec![t.as_str()],
                    Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
                    _ => Vec::new(),
                };
                let non_null: Vec<&str> = types.into_iter().filter(|t| *t != "null").collect();
                let control = match non_null.as_slice() {
                    ["string"] if !choices.is_empty() => "choice",
                    ["boolean"] => "boolean",
                    ["integer"] => "integer",
                    ["number"] => "number",
                    ["string"] => "string",
                    _ => "json",
                };
                FormField {
                    name: name.clone(),
                    control,
                    required: required.contains(&name.as_str()),
                    help: plain_doc(
                        p.get("description")
                            .and_then(Value::as_str)
                            .unwrap_or_default(),
                    ),
                    choices,
                }
            })
            .collect(),
    )
}

/// A doc comment as a person reads it in a form's help: rustdoc's intra-doc links
/// (``[`RefundRequest::binding`]``) without their brackets.
fn plain_doc(doc: &str) -> String {
    doc.replace("[`", "`").replace("`]", "`")
}

/// How a state's data reads as JSON under serde's default (externally tagged) representation,
/// from the data as written in the source ([`StateDescription::data`]).
///
/// [`StateDescription::data`]: agent_core::graph::StateDescription::data
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DataShape {
    /// A unit variant: the state is its name, `"Cancelled"`.
    Unit,
    /// Named fields: `{"Start": {...}}`, each field with its JSON Schema's type (the form's
    /// controls come from it, through [`form_fields`]).
    Fields(Value),
    /// Anything else (a tuple variant): `{"Name": value}`, the value typed as JSON.
    Json,
}

/// The shape of a state's data written `{ items : Vec < String > , cents : u64 }` (the
/// tokens as the derive stores them): a field of a primitive type gets its JSON type, an
/// `Option<T>` is T's and not required, any other type is left untyped (a JSON control).
/// The derive keeps no attribute, so a field renamed with `#[serde(rename)]` shows under
/// its Rust name; the API's answer then says what is wrong.
pub(crate) fn data_shape(data: &str) -> DataShape {
    let data = data.trim();
    if data.is_empty() {
        return DataShape::Unit;
    }
    let Some(inner) = data.strip_prefix('{').and_then(|d| d.strip_suffix('}')) else {
        return DataShape::Json;
    };
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for field in split_top_level(inner) {
        let Some((name, ty)) = field.split_once(':') else {
            return DataShape::Json;
        };
        let name = name.trim().trim_start_matches("pub").trim();
        let ty: String = ty.split_whitespace().collect();
        if name.is_empty() || ty.is_empty() {
            return DataShape::Json;
        }
        let (ty, optional) = match ty
            .strip_prefix("Option<")
            .or_else(|| ty.strip_prefix("std::option::Option<"))
            .and_then(|t| t.strip_suffix('>'))
        {
            Some(t) => (t.to_owned(), true),
            None => (ty, false),
        };
        let json_type = match ty.rsplit("::").next().unwrap_or_default() {
            "bool" => Some("boolean"),
            "u8" | "u16" | "u32" | "u64" | "u128" | "usize" | "i8" | "i16" | "i32" | "i64"
            | "i128" | "isize" => Some("integer"),
            "f32" | "f64" => Some("number"),
            "String" | "char" | "&str" | "&'staticstr" => Some("string"),
            _ => None,
        };
        let schema = match (json_type, optional) {
            (Some(t), false) => serde_json::json!({ "type": t }),
            (Some(t), true) => serde_json::json!({ "type": [t, "null"] }),
            (None, _) => serde_json::json!({}),
        };
        if !optional {
            required.push(Value::String(name.to_owned()));
        }
        properties.insert(name.to_owned(), schema);
    }
    DataShape::Fields(serde_json::json!({
        "type": "object",
        "properties": properties,
        "required": required,
    }))
}

/// `inner` split at its commas outside `<>`, `()` and `[]`, empty pieces dropped.
fn split_top_level(inner: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' | ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&inner[start..]);
    out.into_iter().filter(|f| !f.trim().is_empty()).collect()
}

#[cfg(test)]
mod form_tests {
    use serde_json::json;

    use super::form_fields;

    #[test]
    fn a_form_has_one_control_per_property_typed_by_its_schema() {
        let schema = json!({
            "type": "object",
            "properties": {
                "approved": {"type": "boolean", "description": "Yes or no."},
                "cents": {"type": "integer"},
                "rate": {"type": "number"},
                "who": {"type": "string"},
                "note": {"type": ["string", "null"]},
                "level": {"type": "string", "enum": ["low", "high"]},
                "items": {"type": "array", "items": {"type": "string"}},
                "refund": {"$ref": "#/$defs/Refund"}
            },
            "required": ["approved", "who"],
            "additionalProperties": false
        });
        let fields = form_fields(&schema).unwrap();
        let mut got: Vec<(&str, &str, bool)> = fields
            .iter()
            .map(|f| (f.name.as_str(), f.control, f.required))
            .collect();
        got.sort_unstable();
        let mut want = vec![
            ("approved", "boolean", true),
            ("cents", "integer", false),
            ("rate", "number", false),
            ("who", "string", true),
            ("note", "string", false),
            ("level", "choice", false),
            ("items", "json", false),
            ("refund", "json", false),
        ];
        want.sort_unstable();
        assert_eq!(got, want);
        let field = |name: &str| fields.iter().find(|f| f.name == name).unwrap();
        assert_eq!(field("approved").help, "Yes or no.");
        assert_eq!(field("level").choices, ["low", "high"]);
        assert!(form_fields(&json!({"type": "boolean"})).is_none());
        assert!(form_fields(&json!({"type": "object", "properties": {}})).is_none());
    }

    #[test]
    fn a_states_data_reads_as_a_schema_of_its_fields() {
        use super::{DataShape, data_shape};
        assert_eq!(data_shape(""), DataShape::Unit);
        assert_eq!(data_shape("(u32)"), DataShape::Json);
        let DataShape::Fields(schema) = data_shape(
            "{ items : Vec < String > , cents : u64 , note : Option < String > , \
             rate : f64 , ok : bool , map : BTreeMap < String , u32 > }",
        ) else {
            panic!("named fields")
        };
        assert_eq!(
            schema["required"],
            json!(["items", "cents", "rate", "ok", "map"])
        );
        let mut got: Vec<(String, &str, bool)> = form_fields(&schema)
            .unwrap()
            .into_iter()
            .map(|f| (f.name, f.control, f.required))
            .collect();
        got.sort_unstable();
        assert_eq!(
            got,
            [
                ("cents".to_owned(), "integer", true),
                ("items".to_owned(), "json", true),
                ("map".to_owned(), "json", true),
                ("note".to_owned(), "string", false),
                ("ok".to_owned(), "boolean", true),
                ("rate".to_owned(), "number", true),
            ]
        );
    }
}
