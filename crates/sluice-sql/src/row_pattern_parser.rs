//! Parser for the text inside `PATTERN ( ... )` of `MATCH_RECOGNIZE` (SQL:2016
//! `<row pattern>`), producing a [`RowPattern`].
//!
//! Grammar (whitespace allowed between any two tokens):
//!
//! ```text
//! pattern    := concat ( '|' concat )*                 -- alternation, lowest precedence
//! concat     := term term*                             -- juxtaposition
//! term       := primary quantifier?
//! primary    := variable
//!             | '(' ')'                                -- the empty pattern
//!             | '(' pattern ')'
//!             | PERMUTE '(' pattern ( ',' pattern )* ')'   -- keyword in any case
//! quantifier := ( '*' | '+' | '?' | '{' n '}' | '{' n? ',' m? '}' ) '?'?   -- '?': reluctant
//! variable   := [letter _][letter digit _]*  |  '"' ( any char but '"' | '""' )+ '"'
//! ```
//!
//! `{n}` means exactly n, `{n,}` at least n, `{,m}` at most m, `{n,m}` between; the bounds
//! must fit in `u32`, satisfy `n <= m` and `m >= 1`. `{n}?` is accepted (it means the same as
//! `{n}`). Variables keep their case as written. Anchors (`^`, `$`) and exclusion
//! (`{- ... -}`) are rejected as not supported. Errors are [`PatternError`]s with the byte
//! offset of the offending token and a message `Expected: ..., found: ...`.

// The one import of the syntax tree: change only this line to build the file elsewhere.
use sluice_common::row_pattern::*;

/// Parses row pattern text (what is written between the parentheses of `PATTERN ( ... )`).
///
/// Returns a canonical tree (see [`RowPattern`]): a group `( ... )` is not a node of its
/// own, `Concat`/`Alt` nodes have at least two elements, `()` is `Concat(vec![])`.
pub fn parse_row_pattern(text: &str) -> Result<RowPattern, PatternError> {
    let mut p = Parser { text, pos: 0 };
    p.skip_ws();
    let pattern = p.parse_alt()?;
    p.skip_ws();
    if p.pos < text.len() {
        return Err(p.expected("'|', a pattern term or the end of the pattern"));
    }
    Ok(pattern)
}

/// What a primary may start with, for error messages.
const PRIMARY: &str = "a pattern variable, '(' or PERMUTE";

struct Parser<'a> {
    text: &'a str,
    /// Byte offset of the next unread character.
    pos: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    /// The character after the next one (no whitespace skipping).
    fn peek2(&self) -> Option<char> {
        let mut it = self.text[self.pos..].chars();
        it.next();
        it.next()
    }

    fn bump(&mut self) {
        if let Some(c) = self.peek() {
            self.pos += c.len_utf8();
        }
    }

    fn skip_ws(&mut self) {
        while let Some(c) = self.peek() {
            if c.is_whitespace() {
                self.pos += c.len_utf8();
            } else {
                break;
            }
        }
    }

    /// Describes the token at the current position (after whitespace) for "found: ...".
    fn found(&self) -> String {
        let rest = &self.text[self.pos..];
        let Some(c) = rest.chars().next() else {
            return "end of pattern".to_string();
        };
        if c.is_alphabetic() || c == '_' {
            let end = rest
                .char_indices()
                .find(|&(_, c)| !(c.is_alphanumeric() || c == '_'))
                .map_or(rest.len(), |(i, _)| i);
            format!("'{}'", &rest[..end])
        } else if c.is_ascii_digit() {
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            format!("'{}'", &rest[..end])
        } else {
            format!("'{c}'")
        }
    }

    /// An "Expected: `what`, found: <token here>" error at the current position.
    fn expected(&mut self, what: &str) -> PatternError {
        self.skip_ws();
        PatternError {
            offset: self.pos,
            message: format!("Expected: {what}, found: {}", self.found()),
        }
    }

    fn error_at(offset: usize, message: impl Into<String>) -> PatternError {
        PatternError {
            offset,
            message: message.into(),
        }
    }

    /// `concat ( '|' concat )*`
    fn parse_alt(&mut self) -> Result<RowPattern, PatternError> {
        let mut branches = vec![self.parse_concat()?];
        loop {
            self.skip_ws();
            if self.peek() == Some('|') {
                self.bump();
                branches.push(self.parse_concat()?);
            } else {
                break;
            }
        }
        Ok(if branches.len() == 1 {
            branches.pop().unwrap()
        } else {
            RowPattern::Alt(branches)
        })
    }

    /// `term term*`, ending before `|`, `)`, `,` or the end of the text.
    fn parse_concat(&mut self) -> Result<RowPattern, PatternError> {
        let mut terms = Vec::new();
        loop {
            self.skip_ws();
            match self.peek() {
                None | Some('|') | Some(')') | Some(',') => break,
                _ => terms.push(self.parse_term()?),
            }
        }
        match terms.len() {
            0 => Err(self.expected(PRIMARY)),
            1 => Ok(terms.pop().unwrap()),
            _ => Ok(RowPattern::Concat(terms)),
        }
    }

    /// `primary quantifier?`
    fn parse_term(&mut self) -> Result<RowPattern, PatternError> {
        let primary = self.parse_primary()?;
        self.skip_ws();
        let (min, max) = match self.peek() {
            Some('*') => {
                self.bump();
                (0, None)
            }
            Some('+') => {
                self.bump();
                (1, None)
            }
            Some('?') => {
                self.bump();
                (0, Some(1))
            }
            Some('{') if self.peek2() == Some('-') => return Err(self.exclusion_error()),
            Some('{') => self.parse_bounds()?,
            _ => return Ok(primary),
        };
        self.skip_ws();
        let greedy = if self.peek() == Some('?') {
            self.bump();
            false
        } else {
            true
        };
        Ok(RowPattern::Repeat {
            body: Box::new(primary),
            min,
            max,
            greedy,
        })
    }

    fn exclusion_error(&self) -> PatternError {
        Self::error_at(
            self.pos,
            "Row pattern exclusion '{- ... -}' is not supported",
        )
    }

    /// `'{' n '}' | '{' n? ',' m? '}'`, at the `{`.
    fn parse_bounds(&mut self) -> Result<(u32, Option<u32>), PatternError> {
        let open = self.pos;
        self.bump(); // '{'
        self.skip_ws();
        let first = self.parse_number()?;
        self.skip_ws();
        let (min, max) = match self.peek() {
            Some('}') if first.is_some() => {
                let n = first.unwrap();
                (n, Some(n))
            }
            Some(',') => {
                self.bump();
                self.skip_ws();
                let second = self.parse_number()?;
                (first.unwrap_or(0), second)
            }
            _ if first.is_none() => return Err(self.expected("a number or ','")),
            _ => return Err(self.expected("',' or '}'")),
        };
        self.skip_ws();
        if self.peek() != Some('}') {
            return Err(
                self.expected(if max.is_none() && min == first.unwrap_or(0) {
                    "a number or '}'"
                } else {
                    "'}'"
                }),
            );
        }
        self.bump();
        if let Some(m) = max {
            if m == 0 {
                return Err(Self::error_at(
                    open,
                    "Quantifier upper bound must be at least 1, found: 0",
                ));
            }
            if min > m {
                return Err(Self::error_at(
                    open,
                    format!("Quantifier lower bound {min} exceeds upper bound {m}"),
                ));
            }
        }
        Ok((min, max))
    }

    /// An unsigned decimal number fitting in `u32`, or `None` if no digit is here.
    fn parse_number(&mut self) -> Result<Option<u32>, PatternError> {
        let start = self.pos;
        let mut value: u32 = 0;
        let mut overflow = false;
        while let Some(c) = self.peek() {
            let Some(d) = c.to_digit(10).filter(|_| c.is_ascii_digit()) else {
                break;
            };
            match value.checked_mul(10).and_then(|v| v.checked_add(d)) {
                Some(v) => value = v,
                None => overflow = true,
            }
            self.bump();
        }
        if self.pos == start {
            return Ok(None);
        }
        if overflow {
            return Err(Self::error_at(
                start,
                format!(
                    "Quantifier bound {} is too large (at most {})",
                    &self.text[start..self.pos],
                    u32::MAX
                ),
            ));
        }
        Ok(Some(value))
    }

    /// A variable, `()`, `( pattern )` or `PERMUTE( pattern, ... )`.
    fn parse_primary(&mut self) -> Result<RowPattern, PatternError> {
        self.skip_ws();
        let start = self.pos;
        match self.peek() {
            Some('(') => {
                self.bump();
                self.skip_ws();
                if self.peek() == Some(')') {
                    self.bump();
                    return Ok(RowPattern::Concat(Vec::new()));
                }
                let inner = self.parse_alt()?;
                self.skip_ws();
                if self.peek() != Some(')') {
                    return Err(self.expected("')'"));
                }
                self.bump();
                Ok(inner)
            }
            Some('"') => {
                self.bump();
                let mut name = String::new();
                loop {
                    match self.peek() {
                        None => {
                            return Err(Self::error_at(
                                start,
                                "Unterminated quoted pattern variable: expected a closing '\"'",
                            ))
                        }
                        Some('"') => {
                            self.bump();
                            if self.peek() == Some('"') {
                                self.bump();
                                name.push('"');
                            } else {
                                break;
                            }
                        }
                        Some(c) => {
                            self.bump();
                            name.push(c);
                        }
                    }
                }
                if name.is_empty() {
                    return Err(Self::error_at(
                        start,
                        "Expected: a pattern variable name, found: empty quoted identifier '\"\"'",
                    ));
                }
                Ok(RowPattern::Var(name))
            }
            Some(c) if c.is_alphabetic() || c == '_' => {
                while let Some(c) = self.peek() {
                    if c.is_alphanumeric() || c == '_' {
                        self.bump();
                    } else {
                        break;
                    }
                }
                let word = &self.text[start..self.pos];
                if word.eq_ignore_ascii_case("PERMUTE") {
                    self.parse_permute_args()
                } else {
                    Ok(RowPattern::Var(word.to_string()))
                }
            }
            Some('^') | Some('$') => Err(Self::error_at(
                start,
                format!(
                    "Row pattern anchor '{}' is not supported",
                    self.peek().unwrap()
                ),
            )),
            Some('{') if self.peek2() == Some('-') => Err(self.exclusion_error()),
            _ => Err(self.expected(PRIMARY)),
        }
    }

    /// `'(' pattern ( ',' pattern )* ')'` after the keyword PERMUTE.
    fn parse_permute_args(&mut self) -> Result<RowPattern, PatternError> {
        self.skip_ws();
        if self.peek() != Some('(') {
            return Err(self.expected("'(' after PERMUTE"));
        }
        self.bump();
        let mut elements = Vec::new();
        loop {
            elements.push(self.parse_alt()?);
            self.skip_ws();
            match self.peek() {
                Some(',') => self.bump(),
                Some(')') => {
                    self.bump();
                    break;
                }
                _ => return Err(self.expected("',' or ')'")),
            }
        }
        Ok(RowPattern::Permute(elements))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(n: &str) -> RowPattern {
        RowPattern::var(n)
    }
    fn cat(ps: Vec<RowPattern>) -> RowPattern {
        RowPattern::Concat(ps)
    }
    fn alt(ps: Vec<RowPattern>) -> RowPattern {
        RowPattern::Alt(ps)
    }
    fn rep(p: RowPattern, min: u32, max: Option<u32>, greedy: bool) -> RowPattern {
        RowPattern::repeat(p, min, max, greedy)
    }
    fn parse(s: &str) -> RowPattern {
        match parse_row_pattern(s) {
            Ok(p) => p,
            Err(e) => panic!("{s:?}: {e}"),
        }
    }
    fn err(s: &str) -> PatternError {
        match parse_row_pattern(s) {
            Ok(p) => panic!("{s:?} parsed as {p:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn variables_and_concatenation() {
        assert_eq!(parse("A"), v("A"));
        assert_eq!(parse("  price_up  "), v("price_up"));
        assert_eq!(parse("A B C"), cat(vec![v("A"), v("B"), v("C")]));
        assert_eq!(parse("_x1 y"), cat(vec![v("_x1"), v("y")]));
        // Case is kept.
        assert_eq!(parse("a A"), cat(vec![v("a"), v("A")]));
        // Quoted identifiers, with "" for a quote; a quoted PERMUTE is a variable.
        assert_eq!(
            parse("\"my var\" \"a\"\"b\""),
            cat(vec![v("my var"), v("a\"b")])
        );
        assert_eq!(parse("\"PERMUTE\""), v("PERMUTE"));
        assert_eq!(parse("\"A\"\"B\""), v("A\"B"));
        // Tokens need no whitespace between them.
        assert_eq!(parse("(A)(B)"), cat(vec![v("A"), v("B")]));
        assert_eq!(parse("\"a\"B"), cat(vec![v("a"), v("B")]));
    }

    #[test]
    fn precedence_alternation_lowest() {
        assert_eq!(
            parse("A B | C D*"),
            alt(vec![
                cat(vec![v("A"), v("B")]),
                cat(vec![v("C"), rep(v("D"), 0, None, true)])
            ])
        );
        assert_eq!(parse("A | B | C"), alt(vec![v("A"), v("B"), v("C")]));
        // Groups override; the quantifier binds to the primary only.
        assert_eq!(
            parse("(A | B) C+"),
            cat(vec![alt(vec![v("A"), v("B")]), rep(v("C"), 1, None, true)])
        );
        assert_eq!(
            parse("A (B C)"),
            cat(vec![v("A"), cat(vec![v("B"), v("C")])])
        );
        assert_eq!(
            parse("A | (B | C)"),
            alt(vec![v("A"), alt(vec![v("B"), v("C")])])
        );
        assert_eq!(parse("((A))"), v("A"));
        assert_eq!(parse("()"), cat(vec![]));
        assert_eq!(parse("A ( ) B"), cat(vec![v("A"), cat(vec![]), v("B")]));
    }

    #[test]
    fn quantifiers_greedy_and_reluctant() {
        let cases: &[(&str, u32, Option<u32>, bool)] = &[
            ("A*", 0, None, true),
            ("A+", 1, None, true),
            ("A?", 0, Some(1), true),
            ("A{3}", 3, Some(3), true),
            ("A{2,}", 2, None, true),
            ("A{2,5}", 2, Some(5), true),
            ("A{,4}", 0, Some(4), true),
            ("A{,}", 0, None, true),
            ("A{ 1 , 2 }", 1, Some(2), true),
            ("A*?", 0, None, false),
            ("A+?", 1, None, false),
            ("A??", 0, Some(1), false),
            ("A{3}?", 3, Some(3), false),
            ("A{2,}?", 2, None, false),
            ("A{2,5}?", 2, Some(5), false),
            ("A{,4}?", 0, Some(4), false),
            ("A * ?", 0, None, false),
            ("A{0,1}", 0, Some(1), true),
            ("A{4294967295}", u32::MAX, Some(u32::MAX), true),
        ];
        for &(text, min, max, greedy) in cases {
            assert_eq!(parse(text), rep(v("A"), min, max, greedy), "{text}");
        }
        assert_eq!(
            parse("(A B)+? C"),
            cat(vec![rep(cat(vec![v("A"), v("B")]), 1, None, false), v("C")])
        );
        assert_eq!(
            parse("A B+? C"),
            cat(vec![v("A"), rep(v("B"), 1, None, false), v("C")])
        );
        assert_eq!(
            parse("(A*)+"),
            rep(rep(v("A"), 0, None, true), 1, None, true)
        );
    }

    #[test]
    fn permute() {
        assert_eq!(
            parse("PERMUTE(A, B, C)"),
            RowPattern::Permute(vec![v("A"), v("B"), v("C")])
        );
        assert_eq!(parse("permute ( A )"), RowPattern::Permute(vec![v("A")]));
        // Elements are full patterns; PERMUTE is a primary and takes a quantifier.
        assert_eq!(
            parse("Permute(A B, C | D+)? E"),
            cat(vec![
                rep(
                    RowPattern::Permute(vec![
                        cat(vec![v("A"), v("B")]),
                        alt(vec![v("C"), rep(v("D"), 1, None, true)])
                    ]),
                    0,
                    Some(1),
                    true
                ),
                v("E")
            ])
        );
        // A longer word starting with "permute" is a variable.
        assert_eq!(parse("permuted"), v("permuted"));
    }

    #[test]
    fn errors_with_offsets() {
        let e = err("A )");
        assert_eq!(e.offset, 2);
        assert_eq!(
            e.message,
            "Expected: '|', a pattern term or the end of the pattern, found: ')'"
        );
        let e = err("A | | B");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (
                4,
                "Expected: a pattern variable, '(' or PERMUTE, found: '|'"
            )
        );
        let e = err("");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (
                0,
                "Expected: a pattern variable, '(' or PERMUTE, found: end of pattern"
            )
        );
        let e = err("(A B");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (4, "Expected: ')', found: end of pattern")
        );
        let e = err("A (B C, D)");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (6, "Expected: ')', found: ','")
        );
        let e = err("A ** B");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (
                3,
                "Expected: a pattern variable, '(' or PERMUTE, found: '*'"
            )
        );
        let e = err("A+??");
        assert_eq!(e.offset, 3);
        let e = err("A #");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (
                2,
                "Expected: a pattern variable, '(' or PERMUTE, found: '#'"
            )
        );
        let e = err("PERMUTE A");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (8, "Expected: '(' after PERMUTE, found: 'A'")
        );
        let e = err("PERMUTE(A B; C)");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (
                11,
                "Expected: a pattern variable, '(' or PERMUTE, found: ';'"
            )
        );
        let e = err("PERMUTE(A,)");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (
                10,
                "Expected: a pattern variable, '(' or PERMUTE, found: ')'"
            )
        );
        let e = err("PERMUTE()");
        assert_eq!(e.offset, 8);
    }

    #[test]
    fn quantifier_errors() {
        let e = err("A{3,2}");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (1, "Quantifier lower bound 3 exceeds upper bound 2")
        );
        let e = err("A B{0}");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (3, "Quantifier upper bound must be at least 1, found: 0")
        );
        let e = err("A{,0}");
        assert_eq!(e.offset, 1);
        let e = err("A{}");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (2, "Expected: a number or ',', found: '}'")
        );
        let e = err("A{2");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (3, "Expected: ',' or '}', found: end of pattern")
        );
        let e = err("A{2,x}");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (4, "Expected: a number or '}', found: 'x'")
        );
        let e = err("A{1,2 x}");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (6, "Expected: '}', found: 'x'")
        );
        let e = err("A{4294967296}");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (
                2,
                "Quantifier bound 4294967296 is too large (at most 4294967295)"
            )
        );
    }

    #[test]
    fn unsupported_and_bad_identifiers() {
        let e = err("^A B");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (0, "Row pattern anchor '^' is not supported")
        );
        let e = err("A B$");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (3, "Row pattern anchor '$' is not supported")
        );
        let e = err("A {- B -} C");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (2, "Row pattern exclusion '{- ... -}' is not supported")
        );
        let e = err("{-A-}");
        assert_eq!(e.offset, 0);
        assert!(e.message.contains("not supported"));
        let e = err("A \"B");
        assert_eq!(e.offset, 2);
        assert!(e.message.contains("Unterminated"), "{}", e.message);
        let e = err("A \"\"");
        assert_eq!(e.offset, 2);
        let e = err("1A");
        assert_eq!(
            (e.offset, e.message.as_str()),
            (
                0,
                "Expected: a pattern variable, '(' or PERMUTE, found: '1'"
            )
        );
        // Offsets are byte offsets.
        let e = err("é )");
        assert_eq!(e.offset, 3);
    }

    /// Display prints text that parses back to the same tree, over hand-picked and
    /// generated patterns.
    #[test]
    fn display_round_trip() {
        let texts = [
            "A",
            "A B | C D*",
            "(A | B) C+? D{2,} E{,3}? F{2,5} G{4}?",
            "PERMUTE(A B, C | D)* \"x y\"",
            "((A B)+)?",
            "(A*)* | ()",
            "A (B C) | (D | E) F",
            "\"permute\" \"PerMute\" \"1x\" \"a\"\"b\"",
            "PERMUTE(A)",
            "A | (B | C)",
        ];
        for t in texts {
            let p = parse(t);
            let printed = p.to_string();
            assert_eq!(parse(&printed), p, "{t} printed as {printed}");
        }
        // Generated trees (xorshift PRNG, fixed seed).
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        fn gen(depth: u32, next: &mut dyn FnMut() -> u64) -> RowPattern {
            let names = ["A", "b", "C_1", "x y", "permute", "q\""];
            if depth == 0 || matches!(next() % 3, 0) {
                return RowPattern::Var(names[(next() % names.len() as u64) as usize].to_string());
            }
            let n = 2 + (next() % 2) as usize;
            match next() % 5 {
                0 => RowPattern::Concat((0..n).map(|_| gen(depth - 1, next)).collect()),
                1 => RowPattern::Alt((0..n).map(|_| gen(depth - 1, next)).collect()),
                2 => RowPattern::Permute((0..n).map(|_| gen(depth - 1, next)).collect()),
                3 => RowPattern::Concat(vec![]),
                _ => {
                    let min = (next() % 3) as u32;
                    let max = match next() % 3 {
                        0 => None,
                        _ => Some(min.max(1) + (next() % 3) as u32),
                    };
                    RowPattern::Repeat {
                        body: Box::new(gen(depth - 1, next)),
                        min,
                        max,
                        greedy: next() & 1 == 0,
                    }
                }
            }
        }
        for _ in 0..2000 {
            let p = gen(4, &mut next);
            let printed = p.to_string();
            let back = match parse_row_pattern(&printed) {
                Ok(b) => b,
                Err(e) => panic!("{p:?} printed as {printed:?}: {e}"),
            };
            assert_eq!(back, p, "printed as {printed}");
        }
    }
}
