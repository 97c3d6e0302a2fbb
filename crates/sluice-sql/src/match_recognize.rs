//! The `MATCH_RECOGNIZE` clause (SQL:2016 row pattern recognition, as Flink SQL writes it):
//! its parsed form and its parser.
//!
//! sqlparser cannot represent reluctant quantifiers, `WITHIN` or `SUBSET`
//! (`../shared/LIBRARY-NOTES.md`), so the clause is cut at its top-level keywords here;
//! expressions (`PARTITION BY`, `ORDER BY`, `MEASURES`, `DEFINE`) are parsed with
//! sqlparser's expression parser, `PATTERN` with our `row_pattern_parser`.
//!
//! ```text
//! input MATCH_RECOGNIZE (
//!   [PARTITION BY expr, ...]
//!   ORDER BY rowtime [ASC]
//!   [MEASURES expr AS name, ...]
//!   [ONE ROW PER MATCH | ALL ROWS PER MATCH]
//!   [AFTER MATCH SKIP PAST LAST ROW | TO NEXT ROW | TO FIRST v | TO LAST v | TO v]
//!   PATTERN ( row pattern ) [WITHIN INTERVAL '...' unit]
//!   [SUBSET u = (v, ...), ...]
//!   DEFINE v AS condition, ...
//! ) [[AS] alias]
//! ```

use datafusion_sql::sqlparser::ast;
use datafusion_sql::sqlparser::parser::Parser;
use datafusion_sql::sqlparser::tokenizer::{Location, Token, TokenWithSpan};
use sluice_common::row_pattern::RowPattern;
use sluice_common::{Result, SluiceError};

use crate::parser::{interval_ms, DIALECT};

/// Where the next search for a match starts after a match (`AFTER MATCH SKIP ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipTo {
    /// `PAST LAST ROW` (the default): after the last row of the match.
    PastLastRow,
    /// `TO NEXT ROW`: at the row after the first row of the match.
    NextRow,
    /// `TO FIRST v`: at the first row mapped to `v`.
    First(String),
    /// `TO LAST v` (also `TO v`): at the last row mapped to `v`.
    Last(String),
}

/// One `MATCH_RECOGNIZE` clause, lifted out of a query and replaced there by a placeholder
/// table whose columns are the clause's output.
#[derive(Debug, Clone)]
pub struct MatchRecognizeClause {
    /// The placeholder table name that stands for `input MATCH_RECOGNIZE (...)`.
    pub placeholder: String,
    /// The input table or view.
    pub input: String,
    /// `PARTITION BY` expressions over the input's columns (empty: one partition).
    pub partition_by: Vec<ast::Expr>,
    /// `ORDER BY`: the first must be the input's event-time attribute, ascending.
    pub order_by: Vec<ast::OrderByExpr>,
    /// `MEASURES expr AS name`.
    pub measures: Vec<(ast::Expr, String)>,
    /// `ALL ROWS PER MATCH` (else `ONE ROW PER MATCH`).
    pub all_rows: bool,
    /// `AFTER MATCH SKIP ...`.
    pub skip: SkipTo,
    /// The `PATTERN`.
    pub pattern: RowPattern,
    /// `WITHIN INTERVAL ...` in milliseconds.
    pub within_ms: Option<i64>,
    /// `SUBSET name = (v, ...)`.
    pub subsets: Vec<(String, Vec<String>)>,
    /// `DEFINE v AS condition`.
    pub define: Vec<(String, ast::Expr)>,
    /// Where the clause starts (its `MATCH_RECOGNIZE` keyword), for messages.
    pub location: Location,
}

fn err_at(location: Location, msg: impl std::fmt::Display) -> SluiceError {
    SluiceError::Sql(format!("{msg}{location}"))
}

fn is_trivia(t: &Token) -> bool {
    matches!(t, Token::Whitespace(_))
}

fn word_is(t: &Token, upper: &str) -> bool {
    matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(upper))
}

/// The keywords that open a section of the clause (at parenthesis depth 0).
const SECTIONS: &[&str] = &[
    "PARTITION",
    "ORDER",
    "MEASURES",
    "ONE",
    "ALL",
    "AFTER",
    "PATTERN",
    "WITHIN",
    "SUBSET",
    "DEFINE",
];

/// Parses the tokens between the parentheses of `MATCH_RECOGNIZE ( ... )`.
///
/// # Errors
/// [`SluiceError::Sql`] naming the line and column of what does not fit: an unknown or
/// repeated section, a malformed expression or pattern (the pattern's own error, at its
/// position), a missing `ORDER BY`, `PATTERN` or `DEFINE`, `WITHIN` without an interval.
pub(crate) fn parse_clause(
    body: &[TokenWithSpan],
    placeholder: String,
    input: String,
    location: Location,
) -> Result<MatchRecognizeClause> {
    // Cut the body at its top-level section keywords.
    let mut sections: Vec<(String, usize, Vec<TokenWithSpan>)> = Vec::new();
    let mut depth = 0i32;
    for (i, t) in body.iter().enumerate() {
        match &t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Word(w) if depth == 0 && w.quote_style.is_none() => {
                let upper = w.value.to_ascii_uppercase();
                // `ONE`/`ALL` open a section only as `... ROW(S) PER MATCH`.
                let opens = SECTIONS.contains(&upper.as_str())
                    && (upper != "ALL" && upper != "ONE" || {
                        let next = body[i + 1..].iter().find(|t| !is_trivia(&t.token));
                        next.is_some_and(|n| word_is(&n.token, "ROW") || word_is(&n.token, "ROWS"))
                    });
                if opens {
                    if let Some(prev) = sections.iter().find(|s| s.0 == upper) {
                        return Err(err_at(
                            t.span.start,
                            format!(
                                "MATCH_RECOGNIZE has a second {upper} clause (the first is at {})",
                                body[prev.1].span.start
                            ),
                        ));
                    }
                    sections.push((upper, i, Vec::new()));
                    continue;
                }
            }
            _ => {}
        }
        match sections.last_mut() {
            Some(s) => s.2.push(t.clone()),
            None if is_trivia(&t.token) => {}
            None => {
                return Err(err_at(
                    t.span.start,
                    format!(
                        "Expected: PARTITION BY, ORDER BY, MEASURES, ONE ROW PER MATCH, ALL ROWS \
                         PER MATCH, AFTER MATCH SKIP, PATTERN, SUBSET or DEFINE in \
                         MATCH_RECOGNIZE, found: {}",
                        t.token
                    ),
                ))
            }
        }
    }
    let section = |name: &str| sections.iter().find(|s| s.0 == name);
    let end_of_body = body.last().map(|t| t.span.end).unwrap_or(location);
    let parser = |tokens: &[TokenWithSpan]| {
        Parser::new(&DIALECT).with_tokens_with_locations(tokens.to_vec())
    };
    let sql_err = |e: datafusion_sql::sqlparser::parser::ParserError| {
        let msg = e.to_string();
        SluiceError::Sql(
            msg.strip_prefix("sql parser error: ")
                .unwrap_or(&msg)
                .to_string(),
        )
    };
    let expect_word = |p: &mut Parser, w: &str| -> Result<()> {
        let t = p.next_token();
        if word_is(&t.token, w) {
            Ok(())
        } else {
            Err(err_at(t.span.start, format!("Expected: {w}, found: {t}")))
        }
    };
    let expect_end = |p: &mut Parser, what: &str| -> Result<()> {
        let t = p.peek_token();
        if t.token == Token::EOF {
            Ok(())
        } else {
            Err(err_at(
                t.span.start,
                format!("Expected: the end of {what}, found: {t}"),
            ))
        }
    };

    let mut partition_by = Vec::new();
    if let Some((_, _, tokens)) = section("PARTITION") {
        let mut p = parser(tokens);
        expect_word(&mut p, "BY")?;
        partition_by = p
            .parse_comma_separated(Parser::parse_expr)
            .map_err(sql_err)?;
        expect_end(&mut p, "PARTITION BY")?;
    }
    let Some((_, _, tokens)) = section("ORDER") else {
        return Err(err_at(
            location,
            "MATCH_RECOGNIZE needs ORDER BY <event-time attribute>",
        ));
    };
    let mut p = parser(tokens);
    expect_word(&mut p, "BY")?;
    let order_by = p
        .parse_comma_separated(Parser::parse_order_by_expr)
        .map_err(sql_err)?;
    expect_end(&mut p, "ORDER BY")?;

    let mut measures = Vec::new();
    if let Some((_, _, tokens)) = section("MEASURES") {
        let mut p = parser(tokens);
        let items = p
            .parse_comma_separated(|p| {
                let expr = p.parse_expr()?;
                let alias = p.parse_optional_alias(&[])?;
                Ok((expr, alias))
            })
            .map_err(sql_err)?;
        expect_end(&mut p, "MEASURES")?;
        for (expr, alias) in items {
            let Some(alias) = alias else {
                return Err(SluiceError::Sql(format!(
                    "MATCH_RECOGNIZE measure '{expr}' needs a name: {expr} AS name{}",
                    span_of(tokens).unwrap_or(location)
                )));
            };
            measures.push((expr, alias.value));
        }
    }

    let mut all_rows = false;
    for (name, all) in [("ONE", false), ("ALL", true)] {
        if let Some((_, at, tokens)) = section(name) {
            if section(if all { "ONE" } else { "ALL" }).is_some() {
                return Err(err_at(
                    body[*at].span.start,
                    "MATCH_RECOGNIZE has both ONE ROW PER MATCH and ALL ROWS PER MATCH",
                ));
            }
            let mut p = parser(tokens);
            expect_word(&mut p, if all { "ROWS" } else { "ROW" })?;
            expect_word(&mut p, "PER")?;
            expect_word(&mut p, "MATCH")?;
            let t = p.peek_token();
            if t.token != Token::EOF {
                return Err(err_at(
                    t.span.start,
                    format!(
                        "Not yet supported: {t} after {} PER MATCH (SHOW EMPTY MATCHES, OMIT \
                         EMPTY MATCHES and WITH UNMATCHED ROWS are not supported)",
                        if all { "ALL ROWS" } else { "ONE ROW" }
                    ),
                ));
            }
            all_rows = all;
        }
    }

    let mut skip = SkipTo::PastLastRow;
    if let Some((_, _, tokens)) = section("AFTER") {
        let mut p = parser(tokens);
        expect_word(&mut p, "MATCH")?;
        expect_word(&mut p, "SKIP")?;
        let t = p.next_token();
        skip = if word_is(&t.token, "PAST") {
            expect_word(&mut p, "LAST")?;
            expect_word(&mut p, "ROW")?;
            SkipTo::PastLastRow
        } else if word_is(&t.token, "TO") {
            let t = p.next_token();
            if word_is(&t.token, "NEXT") {
                expect_word(&mut p, "ROW")?;
                SkipTo::NextRow
            } else if word_is(&t.token, "FIRST") {
                SkipTo::First(p.parse_identifier().map_err(sql_err)?.value)
            } else if word_is(&t.token, "LAST") {
                SkipTo::Last(p.parse_identifier().map_err(sql_err)?.value)
            } else if let Token::Word(w) = &t.token {
                SkipTo::Last(w.value.clone())
            } else {
                return Err(err_at(
                    t.span.start,
                    format!("Expected: NEXT ROW, FIRST v, LAST v or v after SKIP TO, found: {t}"),
                ));
            }
        } else {
            return Err(err_at(
                t.span.start,
                format!("Expected: PAST LAST ROW or TO ... after AFTER MATCH SKIP, found: {t}"),
            ));
        };
        expect_end(&mut p, "AFTER MATCH SKIP")?;
    }

    let Some((_, at, tokens)) = section("PATTERN") else {
        return Err(err_at(location, "MATCH_RECOGNIZE needs a PATTERN (...)"));
    };
    let pattern = parse_pattern(tokens, body[*at].span.end)?;

    let mut within_ms = None;
    if let Some((_, at, tokens)) = section("WITHIN") {
        let mut p = parser(tokens);
        let expr = p.parse_expr().map_err(sql_err)?;
        expect_end(&mut p, "WITHIN")?;
        let ms = interval_ms(&expr).map_err(|m| err_at(body[*at].span.start, m))?;
        if ms <= 0 {
            return Err(err_at(
                body[*at].span.start,
                format!("WITHIN must be a positive interval, found: {expr}"),
            ));
        }
        within_ms = Some(ms);
    }

    let mut subsets = Vec::new();
    if let Some((_, _, tokens)) = section("SUBSET") {
        let mut p = parser(tokens);
        subsets = p
            .parse_comma_separated(|p| {
                let name = p.parse_identifier()?.value;
                p.expect_token(&Token::Eq)?;
                p.expect_token(&Token::LParen)?;
                let vars = p.parse_comma_separated(|p| Ok(p.parse_identifier()?.value))?;
                p.expect_token(&Token::RParen)?;
                Ok((name, vars))
            })
            .map_err(sql_err)?;
        expect_end(&mut p, "SUBSET")?;
    }

    let Some((_, _, tokens)) = section("DEFINE") else {
        return Err(err_at(
            end_of_body,
            "MATCH_RECOGNIZE needs DEFINE (a condition for at least one pattern variable)",
        ));
    };
    let mut p = parser(tokens);
    let define = p
        .parse_comma_separated(|p| {
            let var = p.parse_identifier()?.value;
            p.expect_keyword(datafusion_sql::sqlparser::keywords::Keyword::AS)?;
            Ok((var, p.parse_expr()?))
        })
        .map_err(sql_err)?;
    expect_end(&mut p, "DEFINE")?;

    Ok(MatchRecognizeClause {
        placeholder,
        input,
        partition_by,
        order_by,
        measures,
        all_rows,
        skip,
        pattern,
        within_ms,
        subsets,
        define,
        location,
    })
}

fn span_of(tokens: &[TokenWithSpan]) -> Option<Location> {
    tokens
        .iter()
        .find(|t| !is_trivia(&t.token))
        .map(|t| t.span.start)
}

/// `( row pattern )`: the text between the parentheses goes to `parse_row_pattern`; its
/// error offset is mapped back to the token's line and column.
fn parse_pattern(tokens: &[TokenWithSpan], after_keyword: Location) -> Result<RowPattern> {
    let mut it = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !is_trivia(&t.token));
    let open = match it.next() {
        Some((i, t)) if t.token == Token::LParen => i,
        Some((_, t)) => {
            return Err(err_at(
                t.span.start,
                format!("Expected: '(' after PATTERN, found: {}", t.token),
            ))
        }
        None => return Err(err_at(after_keyword, "Expected: '(' after PATTERN")),
    };
    let mut depth = 0;
    let mut close = None;
    for (i, t) in tokens.iter().enumerate().skip(open) {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    close = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let Some(close) = close else {
        return Err(err_at(
            tokens[open].span.start,
            "Expected: ')' to close PATTERN (",
        ));
    };
    if let Some(extra) = tokens[close + 1..].iter().find(|t| !is_trivia(&t.token)) {
        return Err(err_at(
            extra.span.start,
            format!(
                "Expected: WITHIN, SUBSET or DEFINE after PATTERN (...), found: {}",
                extra.token
            ),
        ));
    }
    // The text, and where each token starts in it.
    let mut text = String::new();
    let mut starts: Vec<(usize, Location)> = Vec::new();
    for t in &tokens[open + 1..close] {
        starts.push((text.len(), t.span.start));
        text.push_str(&t.token.to_string());
    }
    crate::row_pattern_parser::parse_row_pattern(&text).map_err(|e| {
        let at = starts
            .iter()
            .rev()
            .find(|(offset, _)| *offset <= e.offset)
            .map(|(_, l)| *l)
            .unwrap_or(tokens[close].span.start);
        err_at(at, format!("PATTERN: {}", e.message))
    })
}
