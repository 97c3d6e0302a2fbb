//! The row pattern of `MATCH_RECOGNIZE` (SQL:2016 row pattern recognition, ISO/IEC 9075-2
//! §7.6 `<row pattern>`; ISO/IEC TR 19075-5): its syntax tree and checks on it.
//!
//! The text inside `PATTERN ( ... )` is parsed by `sluice_sql::row_pattern_parser` into a
//! [`RowPattern`]; the runtime compiles it to an automaton
//! (`sluice_runtime::operators::match_recognize::nfa`). This module only holds the tree, so
//! both crates share one vocabulary.
//!
//! Shapes (SQL:2016 names in parentheses):
//! - [`RowPattern::Var`]: a primary row pattern variable (`A`, `"my var"`); it maps exactly one
//!   row.
//! - [`RowPattern::Concat`]: concatenation (`A B C`); `Concat(vec![])` is the empty pattern `()`.
//! - [`RowPattern::Alt`]: alternation (`A | B`), lowest precedence.
//! - [`RowPattern::Repeat`]: a quantified primary (`A*`, `A+`, `A?`, `A{n}`, `A{n,}`, `A{n,m}`,
//!   `A{,m}`, each optionally followed by `?` for the reluctant form).
//! - [`RowPattern::Permute`]: `PERMUTE(A, B, C)`, i.e. the alternation of all permutations of
//!   its elements in lexicographic order of their positions.
//!
//! Anchors (`^`, `$`) and exclusion (`{- ... -}`) are not supported and have no shape here.

use std::fmt;

/// A row pattern: the syntax tree of the text inside `PATTERN ( ... )`.
///
/// Trees produced by the parser are *canonical*: `Concat` and `Alt` have at least two
/// elements (except `Concat(vec![])`, the empty pattern `()`), `Permute` has at least one, a
/// parenthesized group is not a node of its own, and `Repeat` bounds satisfy
/// `min <= max` and `max >= 1`. For canonical trees `Display` prints text that parses back
/// to an equal tree.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RowPattern {
    /// A primary row pattern variable; maps exactly one row. The name keeps its case as written
    /// (quotes removed) and is compared case-sensitively.
    Var(String),
    /// Concatenation: the parts match consecutive row sequences, in order. Preference is
    /// lexicographic on the parts (the first part's preference decides first). The empty
    /// concatenation is the empty pattern `()`, which matches zero rows.
    Concat(Vec<RowPattern>),
    /// Alternation: one of the branches. SQL:2016 prefers the leftmost branch that leads to
    /// a match.
    Alt(Vec<RowPattern>),
    /// A quantified pattern: `body` repeated between `min` and `max` times (`None`: no upper
    /// bound). A greedy quantifier prefers more iterations, a reluctant one (`greedy: false`,
    /// written with a trailing `?`) fewer.
    Repeat {
        /// The repeated pattern.
        body: Box<RowPattern>,
        /// Least number of iterations.
        min: u32,
        /// Greatest number of iterations; `None` for unbounded (`*`, `+`, `{n,}`).
        max: Option<u32>,
        /// `true` for greedy (`*`), `false` for reluctant (`*?`).
        greedy: bool,
    },
    /// `PERMUTE(p1, ..., pn)`: the alternation of all permutations of the elements, the
    /// permutations ordered lexicographically by element position (SQL:2016:
    /// `PERMUTE(A, B, C)` ≡ `(A B C | A C B | B A C | B C A | C A B | C B A)`).
    Permute(Vec<RowPattern>),
}

impl RowPattern {
    /// Shorthand for [`RowPattern::Var`].
    pub fn var(name: impl Into<String>) -> RowPattern {
        RowPattern::Var(name.into())
    }

    /// Shorthand for [`RowPattern::Repeat`].
    pub fn repeat(body: RowPattern, min: u32, max: Option<u32>, greedy: bool) -> RowPattern {
        RowPattern::Repeat {
            body: Box::new(body),
            min,
            max,
            greedy,
        }
    }

    /// The distinct variable names, in order of first appearance in the pattern text.
    /// A variable's `VarId` elsewhere is its index in this list.
    pub fn variables(&self) -> Vec<String> {
        fn walk(p: &RowPattern, out: &mut Vec<String>) {
            match p {
                RowPattern::Var(name) => {
                    if !out.iter().any(|v| v == name) {
                        out.push(name.clone());
                    }
                }
                RowPattern::Concat(ps) | RowPattern::Alt(ps) | RowPattern::Permute(ps) => {
                    for p in ps {
                        walk(p, out);
                    }
                }
                RowPattern::Repeat { body, .. } => walk(body, out),
            }
        }
        let mut out = Vec::new();
        walk(self, &mut out);
        out
    }

    /// Whether the pattern can match the empty row sequence. SQL:2016 allows such patterns,
    /// but an empty match is useless in a stream (it maps no row and, skipping past its
    /// "last row", would loop), so the runtime rejects them with this check.
    pub fn can_match_empty(&self) -> bool {
        match self {
            RowPattern::Var(_) => false,
            RowPattern::Concat(ps) | RowPattern::Permute(ps) => {
                ps.iter().all(|p| p.can_match_empty())
            }
            RowPattern::Alt(ps) => ps.iter().any(|p| p.can_match_empty()),
            RowPattern::Repeat { body, min, .. } => *min == 0 || body.can_match_empty(),
        }
    }

    /// Checks the shape rules every tree must satisfy to be compiled: variable names are
    /// non-empty, `Alt` and `Permute` have at least one element, and `Repeat` has
    /// `max >= 1` and `min <= max`. Returns a description of the first violation.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            RowPattern::Var(name) if name.is_empty() => Err("empty pattern variable name".into()),
            RowPattern::Var(_) => Ok(()),
            RowPattern::Alt(ps) if ps.is_empty() => Err("alternation without branches".into()),
            RowPattern::Permute(ps) if ps.is_empty() => Err("PERMUTE without elements".into()),
            RowPattern::Concat(ps) | RowPattern::Alt(ps) | RowPattern::Permute(ps) => {
                ps.iter().try_for_each(|p| p.validate())
            }
            RowPattern::Repeat { body, min, max, .. } => {
                if let Some(max) = max {
                    if *max == 0 {
                        return Err("quantifier upper bound must be at least 1".into());
                    }
                    if min > max {
                        return Err(format!(
                            "quantifier lower bound {min} exceeds upper bound {max}"
                        ));
                    }
                }
                body.validate()
            }
        }
    }
}

/// Whether `name` can be written without quotes: a letter or `_`, then letters, digits or
/// `_`, and not the keyword `PERMUTE` (in any case).
pub fn is_plain_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_alphabetic() || c == '_' => {}
        _ => return false,
    }
    chars.all(|c| c.is_alphanumeric() || c == '_') && !name.eq_ignore_ascii_case("PERMUTE")
}

/// Writes a variable name: plain if [`is_plain_identifier`], else double-quoted with `"`
/// doubled.
fn write_var(name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    if is_plain_identifier(name) {
        f.write_str(name)
    } else {
        write!(f, "\"{}\"", name.replace('"', "\"\""))
    }
}

/// Strips one-element `Concat` / `Alt` wrappers (they print as their element).
fn unwrap_single(mut p: &RowPattern) -> &RowPattern {
    loop {
        match p {
            RowPattern::Concat(ps) | RowPattern::Alt(ps) if ps.len() == 1 => p = &ps[0],
            _ => return p,
        }
    }
}

/// Alternation level: `a | b | c`.
fn fmt_alt(p: &RowPattern, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match unwrap_single(p) {
        RowPattern::Alt(ps) if !ps.is_empty() => {
            for (i, c) in ps.iter().enumerate() {
                if i > 0 {
                    f.write_str(" | ")?;
                }
                let c = unwrap_single(c);
                if matches!(c, RowPattern::Alt(_)) {
                    f.write_str("(")?;
                    fmt_alt(c, f)?;
                    f.write_str(")")?;
                } else {
                    fmt_concat(c, f)?;
                }
            }
            Ok(())
        }
        p => fmt_concat(p, f),
    }
}

/// Concatenation level: `a b c`.
fn fmt_concat(p: &RowPattern, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match unwrap_single(p) {
        RowPattern::Concat(ps) if ps.len() >= 2 => {
            for (i, c) in ps.iter().enumerate() {
                if i > 0 {
                    f.write_str(" ")?;
                }
                let c = unwrap_single(c);
                match c {
                    RowPattern::Concat(cs) if !cs.is_empty() => {
                        f.write_str("(")?;
                        fmt_alt(c, f)?;
                        f.write_str(")")?;
                    }
                    RowPattern::Alt(_) => {
                        f.write_str("(")?;
                        fmt_alt(c, f)?;
                        f.write_str(")")?;
                    }
                    _ => fmt_term(c, f)?,
                }
            }
            Ok(())
        }
        p => fmt_term(p, f),
    }
}

/// Term level: a primary with an optional quantifier.
fn fmt_term(p: &RowPattern, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match unwrap_single(p) {
        RowPattern::Repeat {
            body,
            min,
            max,
            greedy,
        } => {
            fmt_primary(body, f)?;
            match (*min, *max) {
                (0, None) => f.write_str("*")?,
                (1, None) => f.write_str("+")?,
                (0, Some(1)) => f.write_str("?")?,
                (n, None) => write!(f, "{{{n},}}")?,
                (n, Some(m)) if n == m => write!(f, "{{{n}}}")?,
                (0, Some(m)) => write!(f, "{{,{m}}}")?,
                (n, Some(m)) => write!(f, "{{{n},{m}}}")?,
            }
            if !greedy {
                f.write_str("?")?;
            }
            Ok(())
        }
        p => fmt_primary(p, f),
    }
}

/// Primary level: a variable, `PERMUTE(...)`, `()` or a parenthesized pattern.
fn fmt_primary(p: &RowPattern, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match unwrap_single(p) {
        RowPattern::Var(name) => write_var(name, f),
        RowPattern::Permute(ps) => {
            f.write_str("PERMUTE(")?;
            for (i, c) in ps.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                fmt_alt(c, f)?;
            }
            f.write_str(")")
        }
        RowPattern::Concat(ps) if ps.is_empty() => f.write_str("()"),
        // An empty alternation matches nothing and has no text; print something that fails
        // to parse rather than something that means another pattern.
        RowPattern::Alt(ps) if ps.is_empty() => f.write_str("(|)"),
        p => {
            f.write_str("(")?;
            fmt_alt(p, f)?;
            f.write_str(")")
        }
    }
}

/// Prints pattern text (without the surrounding `PATTERN ( )`) that parses back to an equal
/// tree when the tree is canonical (see [`RowPattern`]); one-element `Concat` / `Alt` print as
/// their element. Variables are quoted when [`is_plain_identifier`] is false.
impl fmt::Display for RowPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_alt(self, f)
    }
}

/// A syntax error in row pattern text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternError {
    /// Byte offset into the pattern text where the problem was found.
    pub offset: usize,
    /// What was expected and what was found, e.g.
    /// `Expected: a pattern variable, '(' or PERMUTE, found: ')'`.
    pub message: String,
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (at offset {} of the PATTERN)",
            self.message, self.offset
        )
    }
}

impl std::error::Error for PatternError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(n: &str) -> RowPattern {
        RowPattern::var(n)
    }

    #[test]
    fn variables_in_first_appearance_order() {
        let p = RowPattern::Alt(vec![
            RowPattern::Concat(vec![v("B"), v("A")]),
            RowPattern::Permute(vec![v("C"), v("B"), v("a")]),
        ]);
        assert_eq!(p.variables(), vec!["B", "A", "C", "a"]);
    }

    #[test]
    fn can_match_empty_rules() {
        assert!(!v("A").can_match_empty());
        assert!(RowPattern::repeat(v("A"), 0, None, true).can_match_empty());
        assert!(!RowPattern::repeat(v("A"), 1, None, true).can_match_empty());
        assert!(RowPattern::Concat(vec![]).can_match_empty());
        assert!(
            !RowPattern::Concat(vec![RowPattern::repeat(v("A"), 0, Some(1), true), v("B")])
                .can_match_empty()
        );
        assert!(
            RowPattern::Alt(vec![v("A"), RowPattern::repeat(v("B"), 0, Some(1), false)])
                .can_match_empty()
        );
        assert!(
            RowPattern::repeat(RowPattern::repeat(v("A"), 0, None, true), 2, Some(3), true)
                .can_match_empty()
        );
        assert!(
            !RowPattern::Permute(vec![v("A"), RowPattern::repeat(v("B"), 0, None, true)])
                .can_match_empty()
        );
    }

    #[test]
    fn validate_rejects_bad_shapes() {
        assert!(RowPattern::Alt(vec![]).validate().is_err());
        assert!(RowPattern::Permute(vec![]).validate().is_err());
        assert!(RowPattern::repeat(v("A"), 0, Some(0), true)
            .validate()
            .is_err());
        assert!(RowPattern::repeat(v("A"), 3, Some(2), true)
            .validate()
            .is_err());
        assert!(v("").validate().is_err());
        assert!(RowPattern::repeat(v("A"), 2, Some(2), false)
            .validate()
            .is_ok());
    }

    #[test]
    fn display_prints_minimal_parentheses() {
        let p = RowPattern::Alt(vec![
            RowPattern::Concat(vec![v("A"), v("B")]),
            RowPattern::Concat(vec![v("C"), RowPattern::repeat(v("D"), 0, None, true)]),
        ]);
        assert_eq!(p.to_string(), "A B | C D*");
        let p = RowPattern::Concat(vec![
            v("A"),
            RowPattern::repeat(RowPattern::Alt(vec![v("B"), v("C")]), 2, Some(4), false),
            RowPattern::repeat(v("x y"), 0, Some(3), true),
            RowPattern::repeat(v("permute"), 3, None, true),
            RowPattern::Permute(vec![v("A"), RowPattern::Alt(vec![v("B"), v("C")])]),
        ]);
        assert_eq!(
            p.to_string(),
            "A (B | C){2,4}? \"x y\"{,3} \"permute\"{3,} PERMUTE(A, B | C)"
        );
        assert_eq!(RowPattern::Concat(vec![]).to_string(), "()");
        assert_eq!(v("a\"b").to_string(), "\"a\"\"b\"");
    }
}
