//! The one redactor: every byte that leaves the process (the store, logs, feedback to the
//! model, the durable event stream, the live token bus, exported spans) passes it.
//!
//! It finds a configured secret written plainly, JSON-escaped (up to three levels deep),
//! percent-encoded, in hex (either case) or in base64 (standard or URL alphabet, at any of
//! the three alignments a secret can take inside a longer base64 text), and every piece of
//! [`SECRET_PIECE`] characters of one, so a secret cut in two or split by an inserted
//! character leaves nothing of it that long. Object keys are scrubbed like values, and the
//! values of sensitive field names are replaced.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};

use aho_corasick::AhoCorasick;
use base64::Engine as _;
use serde_json::Value;

use super::envelope::{sealed_text, show_sealed};

/// What a secret (or a sensitive field's value) is replaced by.
pub const REDACTED: &str = "[redacted]";

/// The shortest piece of a secret redacted on its own (in characters).
pub const SECRET_PIECE: usize = 8;

/// Escape levels looked through: a secret in an argument string inside a JSON body is
/// escaped twice; one more for a body quoted inside an error message.
const ESCAPE_LEVELS: usize = 3;

/// What a live stream holds back, in bytes: more than the longest raw form of a piece
/// (eight characters, each up to a twelve-byte `%XX%XX%XX%XX` or a doubly escaped `\u`
/// sequence), so no piece of a secret is published before the text after it is seen.
pub const STREAM_HOLD_BACK: usize = 160;

/// The redactor of one configuration: configured secrets, in every form above, and the
/// values of sensitive field names. Cheap to clone; the matchers of a list of secrets are
/// built once per process.
#[derive(Clone, Default)]
pub struct Redactor {
    secrets: Arc<[String]>,
    fields: Arc<[String]>,
    matchers: Option<Arc<Matchers>>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secrets themselves.
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .field("fields", &self.fields)
            .finish_non_exhaustive()
    }
}

impl Redactor {
    /// A redactor of these secrets (values shorter than 4 characters are ignored: they
    /// would shred text), with no sensitive field names.
    #[must_use]
    pub fn new<S: AsRef<str>>(secrets: &[S]) -> Self {
        let secrets: Vec<String> = (secrets.iter())
            .map(|s| s.as_ref().to_owned())
            .filter(|s| s.len() >= 4)
            .collect();
        let matchers = matchers(&secrets);
        Self {
            secrets: secrets.into(),
            fields: Arc::from([]),
            matchers,
        }
    }

    /// The same redactor, also replacing the values of these field names (matched
    /// case-insensitively, at any depth) in [`Self::value`].
    #[must_use]
    pub fn with_fields<S: AsRef<str>>(mut self, fields: &[S]) -> Self {
        self.fields = fields.iter().map(|f| f.as_ref().to_owned()).collect();
        self
    }

    /// The same redactor, hiding `secret` too.
    #[must_use]
    pub fn with_secret(&self, secret: &str) -> Self {
        self.with_secrets(&[secret])
    }

    /// The same redactor, hiding these `secrets` too.
    #[must_use]
    pub fn with_secrets<S: AsRef<str>>(&self, more: &[S]) -> Self {
        let mut secrets: Vec<String> = self.secrets.to_vec();
        for secret in more.iter().map(AsRef::as_ref) {
            if secret.len() >= 4 && !secrets.iter().any(|s| s == secret) {
                secrets.push(secret.to_owned());
            }
        }
        Self {
            matchers: matchers(&secrets),
            secrets: secrets.into(),
            fields: Arc::clone(&self.fields),
        }
    }

    /// Whether there is any secret to hide.
    #[must_use]
    pub fn has_secrets(&self) -> bool {
        self.matchers.is_some()
    }

    /// The sensitive field names.
    #[must_use]
    pub fn fields(&self) -> &[String] {
        &self.fields
    }

    /// Whether `name` is a sensitive field name.
    #[must_use]
    pub fn is_sensitive_field(&self, name: &str) -> bool {
        self.fields.iter().any(|f| f.eq_ignore_ascii_case(name))
    }

    /// Whether `text` shows a secret (or a piece of one), in any form.
    #[must_use]
    pub fn contains_secret(&self, text: &str) -> bool {
        self.matchers
            .as_ref()
            .is_some_and(|m| !m.ranges(text).is_empty())
    }

    /// `text` with every secret, and every piece of one, replaced by [`REDACTED`];
    /// overlapping and touching pieces become one.
    #[must_use]
    pub fn text(&self, text: &str) -> String {
        let Some(m) = &self.matchers else {
            return text.to_owned();
        };
        let ranges = m.ranges(text);
        if ranges.is_empty() {
            return text.to_owned();
        }
        replace_ranges(text, ranges)
    }

    /// Scrub `value` in place: the values of sensitive field names become [`REDACTED`],
    /// every string and object key showing a secret is redacted (two keys that become the
    /// same are told apart by a suffix, so no entry is lost), and sealed values are shown
    /// as `"[sealed:<key id>]"`.
    pub fn value(&self, value: &mut Value) {
        if sealed_text(value).is_some() {
            show_sealed(value);
            return;
        }
        match value {
            Value::String(s) if self.contains_secret(s) => *s = self.text(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.value(v)),
            Value::Object(map) => {
                let dirty: Vec<String> = (map.keys())
                    .filter(|k| self.contains_secret(k))
                    .cloned()
                    .collect();
                for key in dirty {
                    if let Some(v) = map.remove(&key) {
                        let clean = self.text(&key);
                        let mut name = clean.clone();
                        let mut n = 1;
                        while map.contains_key(&name) {
                            n += 1;
                            name = format!("{clean}#{n}");
                        }
                        map.insert(name, v);
                    }
                }
                for (k, v) in map.iter_mut() {
                    if self.is_sensitive_field(k) {
                        *v = Value::String(REDACTED.to_owned());
                    } else {
                        self.value(v);
                    }
                }
            }
            _ => {}
        }
    }

    /// A redactor for text that arrives in pieces (a model's tokens): see
    /// [`StreamRedactor`].
    #[must_use]
    pub fn stream(&self) -> StreamRedactor {
        StreamRedactor {
            redactor: self.clone(),
            held: String::new(),
        }
    }
}

/// Redacts text that arrives in pieces, so a secret split across pieces is hidden too: it
/// holds back the end of the text that could still begin a secret (the longest end that
/// begins one of the forms it looks for; the last [`STREAM_HOLD_BACK`] bytes when an escape
/// or a `%` is among them), and any match reaching into it, until the text after it is
/// seen or [`finish`](Self::finish) says there is none. Without secrets it holds nothing
/// back.
#[derive(Debug)]
pub struct StreamRedactor {
    redactor: Redactor,
    held: String,
}

impl StreamRedactor {
    /// Take `text`; returns what may be published now, redacted.
    pub fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        let Some(m) = &self.redactor.matchers else {
            return std::mem::take(&mut self.held);
        };
        let hold = m.hold_back(&self.held);
        if hold >= self.held.len() {
            return String::new();
        }
        let mut cut = self.held.floor_char_boundary(self.held.len() - hold);
        let ranges = m.ranges(&self.held);
        // A match reaching past the cut waits whole, with what may still extend it (and so
        // does any match overlapping that one: repeat until the cut stays put).
        loop {
            let before = cut;
            for &(start, end) in &ranges {
                if start < cut && end > cut {
                    cut = start;
                }
            }
            if cut == before {
                break;
            }
        }
        let rest = self.held.split_off(cut);
        let out = std::mem::replace(&mut self.held, rest);
        let ranges: Vec<(usize, usize)> = ranges.into_iter().filter(|r| r.1 <= cut).collect();
        if ranges.is_empty() {
            out
        } else {
            replace_ranges(&out, ranges)
        }
    }

    /// Everything still held back, redacted: the text is complete.
    pub fn finish(&mut self) -> String {
        let held = std::mem::take(&mut self.held);
        self.redactor.text(&held)
    }
}

/// `text` with every occurrence of one of `secrets` replaced by [`REDACTED`], in every form
/// [`Redactor`] knows.
#[must_use]
pub fn redact_secrets(text: &str, secrets: &[&str]) -> String {
    Redactor::new(secrets).text(text)
}

/// Replace the values of object fields named in `fields` (case-insensitively, at any depth)
/// by [`REDACTED`].
pub fn redact_fields(value: &mut Value, fields: &[String]) {
    if fields.is_empty() {
        return;
    }
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if fields.iter().any(|f| f.eq_ignore_ascii_case(k)) {
                    *v = Value::String(REDACTED.to_owned());
                } else {
                    redact_fields(v, fields);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redact_fields(v, fields)),
        _ => {}
    }
}

/// `text` with the byte `ranges` (sorted or not, overlapping or not) replaced, one
/// [`REDACTED`] per run of overlapping or touching ranges.
fn replace_ranges(text: &str, mut ranges: Vec<(usize, usize)>) -> String {
    ranges.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    let mut current: Option<(usize, usize)> = None;
    for (start, end) in ranges
        .into_iter()
        .chain(std::iter::once((usize::MAX, usize::MAX)))
    {
        match current {
            Some((a, b)) if start <= b => current = Some((a, b.max(end))),
            Some((a, b)) => {
                out.push_str(&text[pos..a]);
                out.push_str(REDACTED);
                pos = b;
                current = Some((start, end));
            }
            None => current = Some((start, end)),
        }
    }
    out.push_str(&text[pos..]);
    out
}

/// The automatons of one list of secrets.
struct Matchers {
    /// Every pattern, to tell how much of a stream's end could begin one.
    patterns: Vec<String>,
    /// Every piece of [`SECRET_PIECE`] characters of every secret (the whole secret when
    /// shorter) as written, in hex (both cases) and in base64 (both alphabets, three
    /// alignments): one automaton, one pass over the text and over each of its decoded
    /// (JSON-unescaped, percent-decoded) views.
    all: AhoCorasick,
}

impl Matchers {
    /// How many bytes at the end of `text` could begin a secret in some form: the longest
    /// end that is the beginning of a pattern, or [`STREAM_HOLD_BACK`] when an escape or a
    /// percent sign is among the last bytes (decoding could make anything of them).
    fn hold_back(&self, text: &str) -> usize {
        let tail = &text[text.floor_char_boundary(text.len().saturating_sub(STREAM_HOLD_BACK))..];
        if tail.contains(['\\', '%']) {
            return STREAM_HOLD_BACK.min(text.len());
        }
        let mut longest = 0;
        for p in &self.patterns {
            for k in (longest + 1..p.len()).rev() {
                if p.is_char_boundary(k) && text.ends_with(&p[..k]) {
                    longest = k;
                    break;
                }
            }
        }
        longest
    }

    /// The raw byte ranges of `text` that show a secret or a piece of one.
    fn ranges(&self, text: &str) -> Vec<(usize, usize)> {
        // The text as it is, read directly; decoded views only when there is something to
        // decode.
        let mut ranges: Vec<(usize, usize)> = (self.all.find_overlapping_iter(text))
            .map(|m| (m.start(), m.end()))
            .collect();
        let (escaped, percent) = (text.contains('\\'), text.contains('%'));
        if !escaped && !percent {
            return ranges;
        }
        let mut view: Vec<Decoded> = text
            .char_indices()
            .map(|(i, c)| Decoded {
                c,
                start: i,
                end: i + c.len_utf8(),
            })
            .collect();
        let mut level = 0;
        loop {
            if level > 0 {
                find(&view, &self.all, &mut ranges);
            }
            if view.iter().any(|d| d.c == '%') {
                find(&percent_decode(&view), &self.all, &mut ranges);
            }
            level += 1;
            if level > ESCAPE_LEVELS || !view.iter().any(|d| d.c == '\\') {
                break;
            }
            view = unescape_once(&view);
        }
        ranges
    }
}

/// The matchers of `secrets`, or `None` when no secret is long enough to look for. Built
/// once per list: a runner passes the same list for every string it scrubs.
fn matchers(secrets: &[String]) -> Option<Arc<Matchers>> {
    type Cache = Mutex<Option<HashMap<Vec<String>, Arc<Matchers>>>>;
    // A few lists at most (one per runner configuration, one more per provider key);
    // cleared if a process makes many.
    const CACHED_LISTS: usize = 32;
    static CACHE: Cache = Mutex::new(None);
    if secrets.is_empty() {
        return None;
    }
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let cache = cache.get_or_insert_with(HashMap::new);
    if let Some(m) = cache.get(secrets) {
        return Some(Arc::clone(m));
    }
    let mut plain = BTreeSet::new();
    let mut encoded = BTreeSet::new();
    for secret in secrets {
        let chars: Vec<char> = secret.chars().collect();
        for window in chars.windows(chars.len().min(SECRET_PIECE)) {
            let piece: String = window.iter().collect();
            encoded.insert(hex::encode(piece.as_bytes()));
            encoded.insert(hex::encode_upper(piece.as_bytes()));
            for engine in [
                &base64::engine::general_purpose::STANDARD,
                &base64::engine::general_purpose::URL_SAFE,
            ] {
                for form in base64_cores(engine, piece.as_bytes()) {
                    encoded.insert(form);
                }
            }
            plain.insert(piece);
        }
    }
    // Pieces are plain strings; building fails only past the automaton's size limits,
    // which a list of secrets never reaches.
    let patterns: Vec<String> = plain.into_iter().chain(encoded).collect();
    let m = Arc::new(Matchers {
        // A DFA: a few hundred short patterns make a small one, and it reads every text the
        // runner stores or streams.
        all: AhoCorasick::builder()
            .kind(Some(aho_corasick::AhoCorasickKind::DFA))
            .build(&patterns)
            .ok()?,
        patterns,
    });
    if cache.len() >= CACHED_LISTS {
        cache.clear();
    }
    cache.insert(secrets.to_vec(), Arc::clone(&m));
    Some(m)
}

/// The base64 characters that `bytes` alone decide, at each of the three alignments they
/// can take in a longer text (0, 1 or 2 bytes before them in their group of three): the
/// characters every base64 text containing `bytes` at that alignment contains.
fn base64_cores(engine: &base64::engine::GeneralPurpose, bytes: &[u8]) -> Vec<String> {
    let mut out = Vec::with_capacity(3);
    for align in 0..3usize {
        let mut padded = vec![0u8; align];
        padded.extend_from_slice(bytes);
        let text = engine.encode(&padded);
        let chars = text.as_bytes();
        // Character i covers bits [6i, 6i + 6); it is the secret's alone when they all lie
        // within its bits [8 * align, 8 * (align + len)).
        let first = (8 * align).div_ceil(6);
        let last = (8 * (align + bytes.len())) / 6;
        if last > first + 2 && last <= chars.len() {
            out.push(String::from_utf8_lossy(&chars[first..last]).into_owned());
        }
    }
    out
}

/// One character of a text seen through some decoding (JSON escapes, percent-encoding),
/// with the byte range of the raw text it came from.
#[derive(Clone, Copy)]
struct Decoded {
    c: char,
    start: usize,
    end: usize,
}

/// Push the raw byte ranges of `view` where `matcher` finds a pattern.
fn find(view: &[Decoded], matcher: &AhoCorasick, ranges: &mut Vec<(usize, usize)>) {
    let text: String = view.iter().map(|d| d.c).collect();
    // Byte offset in `text` → index in `view`, for the characters' first bytes.
    let mut at = vec![0; text.len() + 1];
    for (i, (offset, _)) in text.char_indices().enumerate() {
        at[offset] = i;
    }
    for m in matcher.find_overlapping_iter(&text) {
        let (first, last) = (at[m.start()], at[text.floor_char_boundary(m.end() - 1)]);
        ranges.push((view[first].start, view[last].end));
    }
}

/// Decode `%XX` sequences (a UTF-8 character spread over several of them included);
/// anything else is kept as it is.
fn percent_decode(view: &[Decoded]) -> Vec<Decoded> {
    let byte = |i: usize| -> Option<u8> {
        if view.get(i)?.c != '%' {
            return None;
        }
        let hi = view.get(i + 1)?.c.to_digit(16)?;
        let lo = view.get(i + 2)?.c.to_digit(16)?;
        u8::try_from(hi * 16 + lo).ok()
    };
    let mut out = Vec::with_capacity(view.len());
    let mut i = 0;
    while i < view.len() {
        let Some(first) = byte(i) else {
            out.push(view[i]);
            i += 1;
            continue;
        };
        let len = match first {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 0,
        };
        let bytes: Option<Vec<u8>> = (0..len).map(|k| byte(i + 3 * k)).collect();
        let c = bytes
            .as_deref()
            .and_then(|b| std::str::from_utf8(b).ok())
            .and_then(|s| s.chars().next());
        if let Some(c) = c {
            out.push(Decoded {
                c,
                start: view[i].start,
                end: view[i + 3 * len - 1].end,
            });
            i += 3 * len;
        } else {
            out.push(view[i]);
            i += 1;
        }
    }
    out
}

/// Decode one level of JSON string escapes (`\n`, `\"`, `\/`, `\u0041`, surrogate pairs);
/// anything else is kept as it is.
fn unescape_once(view: &[Decoded]) -> Vec<Decoded> {
    let hex = |from: usize| -> Option<u32> {
        let digits: String = view.get(from..from + 4)?.iter().map(|d| d.c).collect();
        u32::from_str_radix(&digits, 16).ok()
    };
    let mut out = Vec::with_capacity(view.len());
    let mut i = 0;
    while i < view.len() {
        let d = view[i];
        if d.c != '\\' || i + 1 >= view.len() {
            out.push(d);
            i += 1;
            continue;
        }
        let simple = match view[i + 1].c {
            '"' => Some('"'),
            '\\' => Some('\\'),
            '/' => Some('/'),
            'b' => Some('\u{8}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(Decoded {
                c,
                start: d.start,
                end: view[i + 1].end,
            });
            i += 2;
            continue;
        }
        if view[i + 1].c == 'u'
            && let Some(unit) = hex(i + 2)
        {
            // A high surrogate followed by `\uDC00`..`\uDFFF` is one character.
            if (0xD800..0xDC00).contains(&unit)
                && view.get(i + 6).is_some_and(|d| d.c == '\\')
                && view.get(i + 7).is_some_and(|d| d.c == 'u')
                && let Some(low) = hex(i + 8).filter(|l| (0xDC00..0xE000).contains(l))
                && let Some(c) = char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))
            {
                out.push(Decoded {
                    c,
                    start: d.start,
                    end: view[i + 11].end,
                });
                i += 12;
                continue;
            }
            if let Some(c) = char::from_u32(unit) {
                out.push(Decoded {
                    c,
                    start: d.start,
                    end: view[i + 5].end,
                });
                i += 6;
                continue;
            }
        }
        out.push(d);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use serde_json::json;

    use super::*;

    fn redactor(secrets: &[&str]) -> Redactor {
        Redactor::new(secrets)
    }

    #[test]
    fn secrets_are_scrubbed_from_text_and_values() {
        let r = redactor(&["sk-canary-123", "ab"]);
        assert_eq!(r.text("key sk-canary-123 abab"), "key [redacted] abab");
        let mut v = json!({ "note": ["Bearer sk-canary-123"], "n": 1 });
        r.value(&mut v);
        assert_eq!(v, json!({ "note": ["Bearer [redacted]"], "n": 1 }));
    }

    #[test]
    fn keys_are_scrubbed_like_values_and_no_entry_is_lost() {
        let r = redactor(&["sk-canary-123456"]);
        let mut v =
            json!({"sk-canary-123456": 1, "x sk-canary-123456": 2, "ok": {"sk-canary-123456": 3}});
        r.value(&mut v);
        let text = v.to_string();
        assert!(!text.contains("canary-1"), "{text}");
        assert_eq!(v.as_object().unwrap().len(), 3, "{text}");
        assert_eq!(v["ok"]["[redacted]"], json!(3));
    }

    #[test]
    fn escaped_secrets_are_scrubbed() {
        let secret = "sk-canary-123456";
        let r = redactor(&[secret]);
        let once = serde_json::to_string(&json!({"k": secret})).unwrap();
        let unicode = r#"{"k":"\u0073k-canary-1234\u0035\u0036"}"#;
        let dash = r#"{"k":"sk\u002dcanary-123456"}"#;
        let twice = serde_json::to_string(&json!({"arguments": unicode})).unwrap();
        let thrice = serde_json::to_string(&json!({"body": twice})).unwrap();
        for text in [once, unicode.to_owned(), dash.to_owned(), twice, thrice] {
            let clean = r.text(&text);
            assert!(clean.contains(REDACTED), "{text} -> {clean}");
            assert!(!clean.contains("canary-1234"), "{text} -> {clean}");
        }
        // Escapes that decode to something else are left alone.
        assert_eq!(r.text(r"a\nb \u00e9"), r"a\nb \u00e9");
    }

    #[test]
    fn encoded_secrets_are_found_at_any_alignment() {
        let secret = "sk-canary-9f8e7d6c5b4a";
        let r = redactor(&[secret]);
        let std = &base64::engine::general_purpose::STANDARD;
        let url = &base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut encoded = vec![
            hex::encode(secret),
            hex::encode_upper(secret),
            secret.bytes().fold(String::new(), |mut out, b| {
                use std::fmt::Write as _;
                let _ = write!(out, "%{b:02X}");
                out
            }),
            secret.replace('-', "%2D"),
        ];
        for prefix in ["", "a", "ab", "abc", "Bearer:"] {
            let both = format!("{prefix}{secret} and more");
            encoded.push(std.encode(&both));
            encoded.push(url.encode(&both));
        }
        for text in encoded {
            let wrapped = format!("the header was {text}.");
            assert!(r.contains_secret(&wrapped), "not found in {wrapped}");
            let clean = r.text(&wrapped);
            assert!(!r.contains_secret(&clean), "{wrapped} -> {clean}");
            assert!(clean.starts_with("the header was "), "{clean}");
        }
        // Ordinary text, hex and base64 that do not encode it pass unchanged.
        for text in [
            "a plain sentence",
            "deadbeef00112233",
            "aGVsbG8gd29ybGQ=",
            "100%25 sure",
        ] {
            assert_eq!(r.text(text), text);
        }
    }

    #[test]
    fn pieces_of_a_split_secret_are_scrubbed() {
        let secret = "tok-PLANTED-5e0c2b9a71d4";
        let r = redactor(&[secret]);
        // Cut in two, split by a zero-width space or a space, or written partly escaped.
        let split = [
            "first tok-PLANTED- then 5e0c2b9a71d4".to_owned(),
            "tok-PLANTED-\u{200b}5e0c2b9a71d4".to_owned(),
            "tok-PLANTED- 5e0c2b9a71d4".to_owned(),
            r#"{"k":"tok-PLAN\u0054ED-5e0c \u0032b9a71d4"}"#.to_owned(),
        ];
        for text in split {
            let clean = r.text(&text);
            let chars: Vec<char> = secret.chars().collect();
            for piece in chars.windows(SECRET_PIECE) {
                let piece: String = piece.iter().collect();
                assert!(!clean.contains(&piece), "{text} -> {clean}: `{piece}` left");
            }
        }
        // One `[redacted]` per run of pieces, and what is around it is kept.
        assert_eq!(r.text("a tok-PLANTED-5e0c2b9a71d4 b"), "a [redacted] b");
        assert_eq!(
            r.text("x tok-PLANTED- y 5e0c2b9a z"),
            "x [redacted] y [redacted] z"
        );
        // Seven characters of it are not a piece.
        assert_eq!(r.text("tok-PLA"), "tok-PLA");
    }

    #[test]
    fn named_fields_are_replaced_at_any_depth() {
        let mut v =
            json!({ "user": "a", "API_KEY": "k", "nested": [{ "password": "p", "ok": 1 }] });
        redact_fields(&mut v, &["api_key".into(), "password".into()]);
        assert_eq!(
            v,
            json!({ "user": "a", "API_KEY": "[redacted]", "nested": [{ "password": "[redacted]", "ok": 1 }] })
        );
        let mut v = json!({ "Token": "t", "n": [{"secret": 1}] });
        Redactor::new::<&str>(&[])
            .with_fields(&["token", "secret"])
            .value(&mut v);
        assert_eq!(
            v,
            json!({ "Token": "[redacted]", "n": [{"secret": "[redacted]"}] })
        );
    }

    /// A secret cut anywhere across the pieces of a stream never shows, in any form, and
    /// the text around it arrives whole and in order.
    #[test]
    fn a_stream_split_anywhere_never_shows_a_secret() {
        let secret = "sk-live-0123456789abcdef";
        let r = redactor(&[secret]);
        let text = format!(
            "{}{secret} and {} end",
            "x".repeat(300),
            hex::encode(secret)
        );
        for cut in [1, 2, 3, 5, 7, 11, 64] {
            let mut s = r.stream();
            let mut out = String::new();
            let chars: Vec<char> = text.chars().collect();
            for chunk in chars.chunks(cut) {
                let piece: String = chunk.iter().collect();
                let published = s.push(&piece);
                assert!(!r.contains_secret(&format!("{out}{published}")));
                out.push_str(&published);
            }
            out.push_str(&s.finish());
            assert!(!r.contains_secret(&out), "cut {cut}: {out}");
            assert_eq!(out, r.text(&text), "cut {cut}");
        }
        // Without secrets, nothing is held back.
        let mut s = Redactor::default().stream();
        assert_eq!(s.push("abc"), "abc");
    }
}
