//! The compile-time checks of `migrate_from(...)`: what the compiler alone cannot see.
//!
//! The derive writes the facts of every agent as consts ([`AgentFacts`]) and, for an agent
//! declaring `migrate_from(Old, ...)`, one `const _: () = ...` item per check, spanned at
//! the user's tokens. Each check is a `const fn` here that returns the message of what is
//! wrong, composed at compile time from both versions' facts ([`Text`]), and the item
//! panics with it: the compile error then names the agent, both versions, the tool or
//! signal, and what to write.

use serde_json::Value;

use super::{MigrationError, OlderVersion};
use crate::agent::Agent;

/// What a migration needs to know about an agent, beyond [`Agent`]: written by the derive
/// for every agent, so that any of them can be migrated from.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an agent",
    label = "`migrate_from(...)` names the enum of the previous version here",
    note = "a version migrates from the enum of an older version of the same agent, which derives `Agent`: keep it (say in a module `v1`) and name it, `migrate_from(v1::MyAgent, with = ...)`"
)]
pub trait AgentFacts: Agent {
    /// The hybrid tools and their compensations, by name: a completed call of one may
    /// still be compensated after a migration.
    const HYBRID_TOOLS: &'static [(&'static str, &'static str)];
    /// The waiting states and the signal each waits for: a run may be waiting there when
    /// it is migrated.
    const WAITS: &'static [(&'static str, &'static str)];
}

/// `migrate_from(Old, with = map, skip_signal(...))`, as the derive writes it. The source
/// and the mapping are named here only, and everything else reaches them through this
/// trait: a source that is not an agent, or a mapping of the wrong type, is one error at
/// the user's token (the bound below is checked at the impl, and assumed everywhere else).
pub trait MigratesFrom: AgentFacts {
    /// The previous version's enum.
    type Old: AgentFacts;
    /// The user's mapping, a plain `fn(Old) -> Self` (an exhaustive `match`).
    const MAP: fn(Self::Old) -> Self;
    /// `skip_signal(...)`: signals of `Old`'s waiting states this version may leave unwaited.
    const SKIPPED_SIGNALS: &'static [&'static str];
}

/// [`Agent::migrate`] of an agent declaring `migrate_from(...)`.
pub fn migrate<New: MigratesFrom>(
    from: u32,
    state: Value,
) -> Option<Result<Value, MigrationError>> {
    super::migrate_via::<New::Old, New>(from, state, New::MAP)
}

/// [`Agent::older_versions`] of an agent declaring `migrate_from(...)`.
#[must_use]
pub fn older_versions<New: MigratesFrom>() -> Vec<OlderVersion> {
    super::older_via::<New::Old>(New::SKIPPED_SIGNALS)
}

/// A message composed at compile time (a const panic takes a literal or one `&str`).
/// Truncated, at a character boundary, past [`Text::CAPACITY`] bytes.
pub struct Text {
    buf: [u8; Text::CAPACITY],
    len: usize,
}

impl Text {
    /// The longest message, in bytes.
    pub const CAPACITY: usize = 2048;

    /// An empty text.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            buf: [0; Self::CAPACITY],
            len: 0,
        }
    }

    /// `self` followed by `s`.
    #[must_use]
    pub const fn push(mut self, s: &str) -> Self {
        let bytes = s.as_bytes();
        // Stop before a character that would not fit whole.
        let mut end = bytes.len();
        if self.len + end > Self::CAPACITY {
            end = Self::CAPACITY - self.len;
            while end > 0 && bytes[end] & 0xC0 == 0x80 {
                end -= 1;
            }
        }
        let mut i = 0;
        while i < end {
            self.buf[self.len] = bytes[i];
            self.len += 1;
            i += 1;
        }
        self
    }

    /// `self` followed by `n` in decimal.
    #[must_use]
    pub const fn push_u32(self, n: u32) -> Self {
        let mut digits = [0u8; 10];
        let mut start = digits.len();
        let mut n = n;
        loop {
            start -= 1;
            digits[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        match core::str::from_utf8(digits.split_at(start).1) {
            Ok(s) => self.push(s),
            Err(_) => self,
        }
    }

    /// The text.
    #[must_use]
    pub const fn as_str(&self) -> &str {
        match core::str::from_utf8(self.buf.split_at(self.len).0) {
            Ok(s) => s,
            // Unreachable: only whole characters of `&str`s are pushed.
            Err(_) => "",
        }
    }

    const fn code(self, s: &str) -> Self {
        self.push("`").push(s).push("`")
    }

    /// "agent `Checkout` version 2 migrates from version 1"
    const fn header<Old: Agent, New: Agent>() -> Self {
        Self::new()
            .push("agent `")
            .push(New::NAME)
            .push("` version ")
            .push_u32(New::VERSION)
            .push(" migrates from version ")
            .push_u32(Old::VERSION)
    }
}

/// Fail the build with the message of a failed check.
///
/// # Panics
/// With the message, when there is one: evaluated in a `const` item, that is the compile
/// error (`#[track_caller]`, so that it is reported at the item, at the user's token).
#[track_caller]
pub const fn fail_if(message: Option<Text>) {
    if let Some(message) = message {
        panic!("{}", message.as_str());
    }
}

impl core::fmt::Debug for Text {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("Text").field(&self.as_str()).finish()
    }
}

impl Default for Text {
    fn default() -> Self {
        Self::new()
    }
}

const fn str_eq(a: &str, b: &str) -> bool {
    crate::__private::str_eq(a, b)
}

/// The compensation of hybrid tool `tool` among `tools`.
const fn compensation_of(
    tools: &[(&'static str, &'static str)],
    tool: &str,
) -> Option<&'static str> {
    let mut i = 0;
    while i < tools.len() {
        if str_eq(tools[i].0, tool) {
            return Some(tools[i].1);
        }
        i += 1;
    }
    None
}

const fn waits_for(waits: &[(&'static str, &'static str)], signal: &str) -> bool {
    let mut i = 0;
    while i < waits.len() {
        if str_eq(waits[i].1, signal) {
            return true;
        }
        i += 1;
    }
    false
}

const fn contains(list: &[&str], s: &str) -> bool {
    let mut i = 0;
    while i < list.len() {
        if str_eq(list[i], s) {
            return true;
        }
        i += 1;
    }
    false
}

/// ", " between items, " and " before the last of `count`.
const fn separator(text: Text, index: usize, count: usize) -> Text {
    if index == 0 {
        text
    } else if index + 1 == count {
        text.push(" and ")
    } else {
        text.push(", ")
    }
}

/// The source is a version of the same agent, with a lower version. `old_path` is the
/// source as written.
#[must_use]
pub const fn check_source<New: MigratesFrom>(old_path: &str) -> Option<Text> {
    if !same_agent_lower_version::<New::Old, New>() {
        return source_mismatch::<New::Old, New>(old_path);
    }
    None
}

/// Whether `Old` is an older version of `New`: the other checks assume it.
const fn same_agent_lower_version<Old: Agent, New: Agent>() -> bool {
    str_eq(Old::NAME, New::NAME) && Old::VERSION < New::VERSION
}

const fn source_mismatch<Old: Agent, New: Agent>(old_path: &str) -> Option<Text> {
    if !str_eq(Old::NAME, New::NAME) {
        return Some(
            Text::new()
                .push("agent `")
                .push(New::NAME)
                .push("` cannot migrate from ")
                .code(old_path)
                .push(", which is agent `")
                .push(Old::NAME)
                .push("`: a migration moves runs between versions of one agent; migrate from an older version of `")
                .push(New::NAME)
                .push("`, or give both enums the same `#[agent(name = \"...\")]` if this is one agent renamed"),
        );
    }
    if Old::VERSION >= New::VERSION {
        return Some(
            Text::new()
                .push("agent `")
                .push(New::NAME)
                .push("` version ")
                .push_u32(New::VERSION)
                .push(" cannot migrate from ")
                .code(old_path)
                .push(", which is version ")
                .push_u32(Old::VERSION)
                .push(": a migration goes from a lower version to a higher one; give this enum `version = ")
                .push_u32(Old::VERSION + 1)
                .push("` or above"),
        );
    }
    None
}

/// Every hybrid tool of `Old` is a hybrid tool of `New`: its calls completed on `Old` may
/// still be compensated after the migration, by the tool `New` declares.
#[must_use]
pub const fn check_hybrid_kept<New: MigratesFrom>() -> Option<Text> {
    if !same_agent_lower_version::<New::Old, New>() {
        return None;
    }
    hybrid_kept::<New::Old, New>()
}

const fn hybrid_kept<Old: AgentFacts, New: AgentFacts>() -> Option<Text> {
    let old = Old::HYBRID_TOOLS;
    let mut missing = 0;
    let mut i = 0;
    while i < old.len() {
        if compensation_of(New::HYBRID_TOOLS, old[i].0).is_none() {
            missing += 1;
        }
        i += 1;
    }
    if missing == 0 {
        return None;
    }
    let mut text = Text::header::<Old, New>().push(if missing == 1 {
        ", whose hybrid tool "
    } else {
        ", whose hybrid tools "
    });
    let mut listed = 0;
    i = 0;
    while i < old.len() {
        if compensation_of(New::HYBRID_TOOLS, old[i].0).is_none() {
            text = separator(text, listed, missing)
                .code(old[i].0)
                .push(" (compensation ")
                .code(old[i].1)
                .push(")");
            listed += 1;
        }
        i += 1;
    }
    text = text
        .push(if missing == 1 {
            " is not declared hybrid in version "
        } else {
            " are not declared hybrid in version "
        })
        .push_u32(New::VERSION)
        .push(": calls completed on version ")
        .push_u32(Old::VERSION)
        .push(" may still need compensating after the migration; declare ")
        .push(if missing == 1 { "it" } else { "them" })
        .push(" in the `tools(...)` of version ")
        .push_u32(New::VERSION)
        .push(" as `hybrid(");
    listed = 0;
    i = 0;
    while i < old.len() {
        if compensation_of(New::HYBRID_TOOLS, old[i].0).is_none() {
            if listed > 0 {
                text = text.push(", ");
            }
            text = text
                .push(old[i].0)
                .push("(compensate = ")
                .push(old[i].1)
                .push(")");
            listed += 1;
        }
        i += 1;
    }
    Some(text.push(")`"))
}

/// A hybrid tool of `Old` that `New` keeps has the same compensation in `New`: the calls
/// completed on `Old` are undone by the tool that undoes them.
#[must_use]
pub const fn check_compensations_kept<New: MigratesFrom>() -> Option<Text> {
    if !same_agent_lower_version::<New::Old, New>() {
        return None;
    }
    compensations_kept::<New::Old, New>()
}

const fn compensations_kept<Old: AgentFacts, New: AgentFacts>() -> Option<Text> {
    let old = Old::HYBRID_TOOLS;
    let mut i = 0;
    while i < old.len() {
        if let Some(new) = compensation_of(New::HYBRID_TOOLS, old[i].0)
            && !str_eq(new, old[i].1)
        {
            return Some(
                Text::header::<Old, New>()
                    .push(", which compensates hybrid tool ")
                    .code(old[i].0)
                    .push(" with ")
                    .code(old[i].1)
                    .push(", but version ")
                    .push_u32(New::VERSION)
                    .push(" declares `compensate = ")
                    .push(new)
                    .push("`: calls completed on version ")
                    .push_u32(Old::VERSION)
                    .push(" would be undone by another tool; keep `hybrid(")
                    .push(old[i].0)
                    .push("(compensate = ")
                    .push(old[i].1)
                    .push("))`, and give a new compensation to a new tool"),
            );
        }
        i += 1;
    }
    None
}

/// Every signal a state of `Old` waits for is waited for by a state of `New`, or named in
/// `skip_signal(...)`: a run waiting for it when it is migrated must still be woken by it.
#[must_use]
pub const fn check_signals_kept<New: MigratesFrom>() -> Option<Text> {
    if !same_agent_lower_version::<New::Old, New>() {
        return None;
    }
    signals_kept::<New::Old, New>(New::SKIPPED_SIGNALS)
}

const fn signals_kept<Old: AgentFacts, New: AgentFacts>(skipped: &[&str]) -> Option<Text> {
    let old = Old::WAITS;
    let mut missing = 0;
    // The first signal missing, named in the fix when it is the only one.
    let mut first = "";
    let mut i = 0;
    while i < old.len() {
        if !waits_for(New::WAITS, old[i].1) && !contains(skipped, old[i].1) {
            if missing == 0 {
                first = old[i].1;
            }
            missing += 1;
        }
        i += 1;
    }
    if missing == 0 {
        return None;
    }
    let mut text = Text::header::<Old, New>().push(", where ");
    let mut listed = 0;
    i = 0;
    while i < old.len() {
        if !waits_for(New::WAITS, old[i].1) && !contains(skipped, old[i].1) {
            text = separator(text, listed, missing)
                .push("state ")
                .code(old[i].0)
                .push(" waits for signal ")
                .code(old[i].1);
            listed += 1;
        }
        i += 1;
    }
    text = text
        .push(", but no state of version ")
        .push_u32(New::VERSION)
        .push(" waits for ")
        .push(if missing == 1 { "it" } else { "them" })
        .push(": a run migrated while waiting would never be woken by ")
        .push(if missing == 1 { "it" } else { "them" })
        .push("; wait for ")
        .push(if missing == 1 { "it" } else { "each" })
        .push(" in a state of version ")
        .push_u32(New::VERSION)
        .push(" (`#[agent(wait = \"")
        .push(if missing == 1 { first } else { "..." })
        .push("\")]`), or, if the migration moves such runs past the wait, add `skip_signal(");
    listed = 0;
    i = 0;
    while i < old.len() {
        if !waits_for(New::WAITS, old[i].1) && !contains(skipped, old[i].1) {
            if listed > 0 {
                text = text.push(", ");
            }
            text = text.push("\"").push(old[i].1).push("\"");
            listed += 1;
        }
        i += 1;
    }
    Some(text.push(")` to `migrate_from(...)`"))
}

/// A signal named in `skip_signal(...)` is one that a state of `Old` waits for (a typo
/// would otherwise skip nothing and hide the signal it meant).
#[must_use]
pub const fn check_skip_signal<New: MigratesFrom>(signal: &str) -> Option<Text> {
    if !same_agent_lower_version::<New::Old, New>() {
        return None;
    }
    skip_signal::<New::Old, New>(signal)
}

const fn skip_signal<Old: AgentFacts, New: Agent>(signal: &str) -> Option<Text> {
    if waits_for(Old::WAITS, signal) {
        return None;
    }
    let old = Old::WAITS;
    let mut text = Text::new()
        .push("`skip_signal(\"")
        .push(signal)
        .push("\")` names a signal that no state of agent `")
        .push(New::NAME)
        .push("` version ")
        .push_u32(Old::VERSION)
        .push(" waits for; ");
    if old.is_empty() {
        return Some(
            text.push("version ")
                .push_u32(Old::VERSION)
                .push(" waits for no signal, so remove `skip_signal(...)`"),
        );
    }
    text = text
        .push(if old.len() == 1 {
            "the signal version "
        } else {
            "the signals version "
        })
        .push_u32(Old::VERSION)
        .push(if old.len() == 1 {
            " waits for is "
        } else {
            " waits for are "
        });
    let mut i = 0;
    while i < old.len() {
        text = separator(text, i, old.len()).code(old[i].1);
        i += 1;
    }
    Some(text.push("; correct the name, or remove it"))
}

#[cfg(test)]
mod tests {
    use super::Text;

    #[test]
    fn text_composes_and_counts() {
        let t = Text::new()
            .push("version ")
            .push_u32(0)
            .push(", ")
            .push_u32(4_294_967_295);
        assert_eq!(t.as_str(), "version 0, 4294967295");
    }

    #[test]
    fn text_truncates_at_a_character_boundary() {
        let long = "é".repeat(Text::CAPACITY);
        let t = Text::new().push("a").push(&long);
        assert!(t.as_str().len() <= Text::CAPACITY);
        assert!(t.as_str().starts_with("aé"));
        assert!(t.as_str().ends_with('é'));
    }
}
