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

use crate::parser::{
    err_at, expect_eof, expect_word, interval_ms, is_trivia, sql_err, word_is, DIALECT,
};

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
                // A section keyword opens a section only as its own keyword sequence, and
                // never after a `.` (`B.after` is a column).
                let mut next = body[i + 1..].iter().filter(|t| !is_trivia(&t.token));
                let (n1, n2) = (next.next().map(|t| &t.token), next.next().map(|t| &t.token));
                let prev = body[..i].iter().rev().find(|t| !is_trivia(&t.token));
                let after_dot = prev.is_some_and(|t| t.token == Token::Period);
                let is_word = |t: Option<&Token>| matches!(t, Some(Token::Word(_)));
                let followed = match upper.as_str() {
                    "PARTITION" | "ORDER" => n1.is_some_and(|t| word_is(t, "BY")),
                    "ONE" => n1.is_some_and(|t| word_is(t, "ROW")),
                    "ALL" => n1.is_some_and(|t| word_is(t, "ROWS")),
                    "AFTER" => n1.is_some_and(|t| word_is(t, "MATCH")),
                    "PATTERN" => n1 == Some(&Token::LParen),
                    "WITHIN" => n1.is_some_and(|t| word_is(t, "INTERVAL")),
                    "SUBSET" => is_word(n1) && n2 == Some(&Token::Eq),
                    "DEFINE" | "MEASURES" => n1.is_some(),
                    _ => false,
                };
                let opens = SECTIONS.contains(&upper.as_str()) && followed && !after_dot;
                if opens {
                    if let Some(prev) = sections.iter().find(|s| s.0 == upper) {
                        return Err(err_at(
                            t.span.start,
                            format!(
                                "MATCH_RECOGNIZE has a second {upper} clause (the first{})",
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
    let expect_end = |p: &mut Parser, what: &str| expect_eof(p, &format!("the end of {what}"));

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
        let meaningful: Vec<&TokenWithSpan> =
            tokens.iter().filter(|t| !is_trivia(&t.token)).collect();
        for w in meaningful.windows(2) {
            if (word_is(&w[0].token, "FINAL") || word_is(&w[0].token, "RUNNING"))
                && matches!(w[1].token, Token::Word(_))
            {
                return Err(SluiceError::NotSupported(format!(
                    "{} in MEASURES{}: ONE ROW PER MATCH measures are FINAL and ALL ROWS PER \
                     MATCH measures RUNNING; the keywords are not accepted",
                    w[0].token, w[0].span.start
                )));
            }
        }
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
    let Some(close) = crate::parser::matching_close(tokens, open) else {
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
        match &t.token {
            // Comments count as white space.
            Token::Whitespace(_) => text.push(' '),
            // Flink quotes identifiers with backticks; the pattern grammar with `"`.
            Token::Word(w) if w.quote_style == Some('`') => {
                text.push_str(&format!("\"{}\"", w.value.replace('"', "\"\"")));
            }
            other => text.push_str(&other.to_string()),
        }
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

// ---------------------------------------------------------------------------------------
// Planning: navigation functions become columns of a "nav schema", so DEFINE and MEASURES
// are ordinary DataFusion expressions over it (typed and coerced by DataFusion).

use std::collections::HashMap;
use std::ops::ControlFlow;

use datafusion_common::arrow::datatypes::{DataType, Field, Schema};
use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion_common::DFSchema;
use datafusion_expr::{Expr, ExprSchemable};
use datafusion_sql::sqlparser::ast::{VisitMut, VisitorMut};
use sluice_common::plan::{MatchNav, MatchRecognizeSpec, MatchSkip, NavAggregate, NavRow};

struct NavRewriter<'a> {
    input: &'a Schema,
    input_name: &'a str,
    variables: &'a [String],
    subsets: &'a HashMap<String, Vec<usize>>,
    navs: &'a mut Vec<MatchNav>,
    location: Location,
    error: Option<SluiceError>,
}

fn not_supported(msg: String) -> SluiceError {
    SluiceError::NotSupported(msg)
}

impl NavRewriter<'_> {
    fn column(&self, name: &str) -> Result<usize> {
        self.input.index_of(name).map_err(|_| {
            let names: Vec<&str> = self
                .input
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect();
            SluiceError::Plan(format!(
                "MATCH_RECOGNIZE{}: no column '{name}' in '{}' (columns: {})",
                self.location,
                self.input_name,
                names.join(", ")
            ))
        })
    }

    /// The variables a qualifier names (a variable or a SUBSET).
    fn vars_of(&self, qualifier: &str) -> Result<Vec<usize>> {
        if let Some(i) = self.variables.iter().position(|v| v == qualifier) {
            return Ok(vec![i]);
        }
        if let Some(vars) = self.subsets.get(qualifier) {
            return Ok(vars.clone());
        }
        Err(SluiceError::Plan(format!(
            "MATCH_RECOGNIZE{}: '{qualifier}' is not a pattern variable or SUBSET (variables: {})",
            self.location,
            self.variables.join(", ")
        )))
    }

    /// `A.x` or `x`: the variables (None: all rows) and the column.
    fn var_column(&self, e: &ast::Expr) -> Result<(Option<Vec<usize>>, usize)> {
        match e {
            ast::Expr::Identifier(id) => Ok((None, self.column(&id.value)?)),
            ast::Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
                let q = &parts[0].value;
                let vars = if q == self.input_name && self.vars_of(q).is_err() {
                    None
                } else {
                    Some(self.vars_of(q)?)
                };
                Ok((vars, self.column(&parts[1].value)?))
            }
            other => Err(not_supported(format!(
                "MATCH_RECOGNIZE{}: navigation over '{other}': FIRST, LAST, PREV and \
                 aggregates take a column, as A.price or price",
                self.location
            ))),
        }
    }

    /// A literal whole number (the offset argument of FIRST, LAST, PREV).
    fn offset(&self, e: Option<&ast::Expr>, default: u64) -> Result<u64> {
        let Some(e) = e else { return Ok(default) };
        if let ast::Expr::Value(v) = e {
            if let ast::Value::Number(n, _) = &v.value {
                if let Ok(n) = n.parse::<u64>() {
                    return Ok(n);
                }
            }
        }
        Err(SluiceError::Plan(format!(
            "MATCH_RECOGNIZE{}: a navigation offset must be a whole number, found '{e}'",
            self.location
        )))
    }

    /// The row a FIRST/LAST call or a column reference picks, and its column.
    fn nav_row(&self, e: &ast::Expr) -> Result<(NavRow, usize)> {
        if let ast::Expr::Function(f) = e {
            let name = f.name.to_string().to_ascii_uppercase();
            if name == "FIRST" || name == "LAST" {
                let args = plain_args(f, self.location)?;
                let (vars, column) =
                    self.var_column(args.first().copied().ok_or_else(|| {
                        SluiceError::Plan(format!("{name}() needs a column{}", self.location))
                    })?)?;
                let n = self.offset(args.get(1).copied(), 0)?;
                let row = if name == "FIRST" {
                    NavRow::First { vars, n }
                } else {
                    NavRow::Last { vars, n }
                };
                return Ok((row, column));
            }
        }
        let (vars, column) = self.var_column(e)?;
        Ok((NavRow::Last { vars, n: 0 }, column))
    }

    /// The navigation `e` is, if it is one.
    fn nav_of(&self, e: &ast::Expr) -> Result<Option<MatchNav>> {
        match e {
            ast::Expr::Identifier(id) if id.value.starts_with("__nav_") => Ok(None),
            ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_) => {
                let (row, column) = self.nav_row(e)?;
                Ok(Some(MatchNav::Value { row, column }))
            }
            ast::Expr::Function(f) => {
                let name = f.name.to_string().to_ascii_uppercase();
                match name.as_str() {
                    "FIRST" | "LAST" => {
                        let (row, column) = self.nav_row(e)?;
                        Ok(Some(MatchNav::Value { row, column }))
                    }
                    "PREV" => {
                        let args = plain_args(f, self.location)?;
                        let Some(base) = args.first() else {
                            return Err(SluiceError::Plan(format!(
                                "PREV() needs a column{}",
                                self.location
                            )));
                        };
                        let (base, column) = self.nav_row(base)?;
                        let n = self.offset(args.get(1).copied(), 1)?;
                        if n == 0 {
                            return Ok(Some(MatchNav::Value { row: base, column }));
                        }
                        Ok(Some(MatchNav::Value {
                            row: NavRow::Prev {
                                base: Box::new(base),
                                n,
                            },
                            column,
                        }))
                    }
                    "NEXT" => Err(not_supported(format!(
                        "NEXT in MATCH_RECOGNIZE{}: a streaming match cannot read rows after \
                         the current one (PREV, FIRST and LAST can)",
                        self.location
                    ))),
                    "MATCH_ROWTIME" => Ok(Some(MatchNav::MatchRowtime)),
                    "CLASSIFIER" => Ok(Some(MatchNav::Classifier)),
                    "MATCH_NUMBER" => Ok(Some(MatchNav::MatchNumber)),
                    "COUNT" | "SUM" | "AVG" | "MIN" | "MAX" => {
                        let func = match name.as_str() {
                            "COUNT" => NavAggregate::Count,
                            "SUM" => NavAggregate::Sum,
                            "AVG" => NavAggregate::Avg,
                            "MIN" => NavAggregate::Min,
                            _ => NavAggregate::Max,
                        };
                        let ast::FunctionArguments::List(list) = &f.args else {
                            return Err(SluiceError::Plan(format!(
                                "{name} needs an argument{}",
                                self.location
                            )));
                        };
                        if list.duplicate_treatment.is_some()
                            || f.filter.is_some()
                            || list.args.len() != 1
                        {
                            return Err(not_supported(format!(
                                "'{e}' in MATCH_RECOGNIZE{}: aggregates over pattern variables \
                                 take one column (no DISTINCT or FILTER)",
                                self.location
                            )));
                        }
                        let arg = match &list.args[0] {
                            ast::FunctionArg::Unnamed(a) => a,
                            _ => {
                                return Err(not_supported(format!(
                                    "named arguments in '{e}'{}",
                                    self.location
                                )))
                            }
                        };
                        match arg {
                            ast::FunctionArgExpr::Wildcard if func == NavAggregate::Count => {
                                Ok(Some(MatchNav::Aggregate {
                                    func,
                                    vars: None,
                                    column: None,
                                }))
                            }
                            ast::FunctionArgExpr::QualifiedWildcard(q)
                                if func == NavAggregate::Count =>
                            {
                                Ok(Some(MatchNav::Aggregate {
                                    func,
                                    vars: Some(self.vars_of(&q.to_string())?),
                                    column: None,
                                }))
                            }
                            ast::FunctionArgExpr::Expr(a) => {
                                let (vars, column) = self.var_column(a)?;
                                Ok(Some(MatchNav::Aggregate {
                                    func,
                                    vars,
                                    column: Some(column),
                                }))
                            }
                            _ => Err(not_supported(format!(
                                "'{e}' in MATCH_RECOGNIZE{}",
                                self.location
                            ))),
                        }
                    }
                    _ => Ok(None),
                }
            }
            _ => Ok(None),
        }
    }
}

/// The unnamed, plain arguments of a function call.
fn plain_args(f: &ast::Function, location: Location) -> Result<Vec<&ast::Expr>> {
    let ast::FunctionArguments::List(list) = &f.args else {
        return Ok(Vec::new());
    };
    list.args
        .iter()
        .map(|a| match a {
            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => Ok(e),
            other => Err(SluiceError::Plan(format!(
                "unexpected argument '{other}' of {}{location}",
                f.name
            ))),
        })
        .collect()
}

impl VisitorMut for NavRewriter<'_> {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut ast::Expr) -> ControlFlow<()> {
        match self.nav_of(expr) {
            Ok(Some(nav)) => {
                let i = match self.navs.iter().position(|n| *n == nav) {
                    Some(i) => i,
                    None => {
                        self.navs.push(nav);
                        self.navs.len() - 1
                    }
                };
                *expr = ast::Expr::Identifier(ast::Ident::new(format!("__nav_{i}")));
                ControlFlow::Continue(())
            }
            Ok(None) => ControlFlow::Continue(()),
            Err(e) => {
                self.error = Some(e);
                ControlFlow::Break(())
            }
        }
    }
}

/// The type of a navigation's value.
fn nav_type(nav: &MatchNav, input: &Schema, rowtime: usize) -> DataType {
    match nav {
        MatchNav::Value { column, .. } => input.field(*column).data_type().clone(),
        MatchNav::Aggregate { func, column, .. } => {
            let ty = column.map(|c| input.field(c).data_type().clone());
            match (func, ty) {
                (NavAggregate::Count, _) | (_, None) => DataType::Int64,
                (NavAggregate::Avg, _) => DataType::Float64,
                (NavAggregate::Sum, Some(t)) => match t {
                    DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
                        DataType::Int64
                    }
                    DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
                        DataType::UInt64
                    }
                    DataType::Decimal128(p, s) => DataType::Decimal128((p + 10).min(38), s),
                    _ => DataType::Float64,
                },
                (NavAggregate::Min | NavAggregate::Max, Some(t)) => t,
            }
        }
        MatchNav::MatchRowtime => input.field(rowtime).data_type().clone(),
        MatchNav::Classifier => DataType::Utf8,
        MatchNav::MatchNumber => DataType::Int64,
    }
}

/// Whether a DEFINE of variable `var` reading `nav` reads only the row being tested and
/// rows before it in the partition (not other variables' rows).
fn reads_current_row_only(nav: &MatchNav, var: usize) -> bool {
    fn current(row: &NavRow, var: usize) -> bool {
        match row {
            NavRow::Last { vars, n: 0 } => vars.as_ref().is_none_or(|v| v == &[var]),
            NavRow::Prev { base, .. } => current(base, var),
            _ => false,
        }
    }
    matches!(nav, MatchNav::Value { row, .. } if current(row, var))
}

/// A clause planned against its input: the operator's spec and the output columns.
#[derive(Debug, Clone)]
pub struct PlannedMatchRecognize {
    /// The clause as parsed.
    pub clause: MatchRecognizeClause,
    /// The operator spec (its `rowtime` is the `ORDER BY` column; the planner checks it
    /// is the input's event-time attribute).
    pub spec: MatchRecognizeSpec,
    /// Output columns (see `OperatorSpec::MatchRecognize`).
    pub schema: Schema,
}

/// Plans a clause over an input with columns `input` (named `input_name`):
/// navigations become nav columns, `plan_expr` types DEFINE and MEASURES over them.
///
/// # Errors
/// Unknown variables or columns, a pattern that can match no rows, PARTITION BY or ORDER
/// BY that are not plain columns, ORDER BY not ascending, a non-boolean DEFINE, a measure
/// named like a partition column, anything not supported yet (named).
pub(crate) fn plan_clause(
    clause: &MatchRecognizeClause,
    input: &Schema,
    plan_expr: &dyn Fn(&ast::Expr, &DFSchema) -> Result<Expr>,
) -> Result<PlannedMatchRecognize> {
    let at = clause.location;
    clause
        .pattern
        .validate()
        .map_err(|m| SluiceError::Plan(format!("PATTERN{at}: {m}")))?;
    if clause.pattern.can_match_empty() {
        return Err(not_supported(format!(
            "PATTERN ({}){at} can match no rows at all (an empty match); every match must \
             have at least one row",
            clause.pattern
        )));
    }
    let variables = clause.pattern.variables();
    let var_index = |name: &str, what: &str| -> Result<usize> {
        variables.iter().position(|v| v == name).ok_or_else(|| {
            SluiceError::Plan(format!(
                "{what} names '{name}', which is not a variable of PATTERN ({}){at}",
                clause.pattern
            ))
        })
    };
    let mut subsets = HashMap::new();
    for (name, members) in &clause.subsets {
        if variables.contains(name) {
            return Err(SluiceError::Plan(format!(
                "SUBSET {name}{at}: a pattern variable has that name"
            )));
        }
        let vars = members
            .iter()
            .map(|m| var_index(m, &format!("SUBSET {name}")))
            .collect::<Result<Vec<_>>>()?;
        subsets.insert(name.clone(), vars);
    }
    let column = |e: &ast::Expr, what: &str| -> Result<usize> {
        let name = match e {
            ast::Expr::Identifier(id) => &id.value,
            ast::Expr::CompoundIdentifier(p) if p.len() == 2 && p[0].value == clause.input => {
                &p[1].value
            }
            other => {
                return Err(not_supported(format!(
                    "{what} '{other}' in MATCH_RECOGNIZE{at}: name a column of '{}'",
                    clause.input
                )))
            }
        };
        input.index_of(name).map_err(|_| {
            SluiceError::Plan(format!(
                "{what} '{name}' in MATCH_RECOGNIZE{at}: no such column in '{}'",
                clause.input
            ))
        })
    };
    let partition_by = clause
        .partition_by
        .iter()
        .map(|e| column(e, "PARTITION BY"))
        .collect::<Result<Vec<_>>>()?;
    let Some(first) = clause.order_by.first() else {
        return Err(SluiceError::Plan(format!(
            "MATCH_RECOGNIZE{at} needs ORDER BY <event-time attribute>"
        )));
    };
    if clause.order_by.len() > 1 {
        return Err(not_supported(format!(
            "ORDER BY more than the event-time attribute in MATCH_RECOGNIZE{at} (rows with \
             equal times keep their arrival order)"
        )));
    }
    if first.options.asc == Some(false) {
        return Err(SluiceError::Plan(format!(
            "MATCH_RECOGNIZE{at} must ORDER BY its event-time attribute ascending"
        )));
    }
    let rowtime = column(&first.expr, "ORDER BY")?;

    let mut navs: Vec<MatchNav> = Vec::new();
    let rewrite = |expr: &ast::Expr, navs: &mut Vec<MatchNav>| -> Result<ast::Expr> {
        let mut expr = expr.clone();
        let mut rewriter = NavRewriter {
            input,
            input_name: &clause.input,
            variables: &variables,
            subsets: &subsets,
            navs,
            location: at,
            error: None,
        };
        let _ = expr.visit(&mut rewriter);
        match rewriter.error {
            Some(e) => Err(e),
            None => Ok(expr),
        }
    };
    let mut defines: Vec<Option<ast::Expr>> = vec![None; variables.len()];
    for (name, cond) in &clause.define {
        let v = var_index(name, "DEFINE")?;
        if defines[v].is_some() {
            return Err(SluiceError::Plan(format!(
                "DEFINE {name}{at}: defined twice"
            )));
        }
        let mut used = Vec::new();
        let _ = rewrite(cond, &mut used)?;
        if used.contains(&MatchNav::MatchNumber) {
            return Err(not_supported(format!(
                "MATCH_NUMBER() in DEFINE {name}{at}: a match's number is known only once \
                 it is final (use it in MEASURES)"
            )));
        }
        defines[v] = Some(rewrite(cond, &mut navs)?);
    }
    let measures_sql = clause
        .measures
        .iter()
        .map(|(e, _)| rewrite(e, &mut navs))
        .collect::<Result<Vec<_>>>()?;
    // History-free: every nav a DEFINE reads is its own current row (or PREV of it).
    let mut history_free = true;
    for (name, cond) in &clause.define {
        let v = var_index(name, "DEFINE")?;
        let mut used = Vec::new();
        let _ = rewrite(cond, &mut used)?;
        if !used.iter().all(|n| reads_current_row_only(n, v)) {
            history_free = false;
        }
    }

    let nav_fields: Vec<Field> = navs
        .iter()
        .enumerate()
        .map(|(i, n)| Field::new(format!("__nav_{i}"), nav_type(n, input, rowtime), true))
        .collect();
    let nav_schema = Arc::new(DFSchema::try_from(Schema::new(nav_fields))?);
    let define = defines
        .iter()
        .zip(&variables)
        .map(|(d, name)| {
            d.as_ref()
                .map(|sql| {
                    let e = plan_expr(sql, &nav_schema)?;
                    let ty = e.get_type(&nav_schema)?;
                    if ty != DataType::Boolean && ty != DataType::Null {
                        return Err(SluiceError::Plan(format!(
                            "DEFINE {name}{at} must be a condition (BOOLEAN), found {}",
                            crate::flink_type_name(&ty)
                        )));
                    }
                    Ok(e)
                })
                .transpose()
        })
        .collect::<Result<Vec<_>>>()?;
    let measures = measures_sql
        .iter()
        .map(|sql| plan_expr(sql, &nav_schema))
        .collect::<Result<Vec<_>>>()?;
    for e in define.iter().flatten().chain(&measures) {
        let mut found = None;
        let _ = e.apply(|x| {
            if let Expr::AggregateFunction(a) = x {
                found = Some(a.func.name().to_string());
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        });
        if let Some(name) = found {
            return Err(not_supported(format!(
                "the aggregate {name} in MATCH_RECOGNIZE{at}: over pattern variables Sluice \
                 has COUNT, SUM, AVG, MIN and MAX"
            )));
        }
    }

    let skip = match &clause.skip {
        SkipTo::PastLastRow => MatchSkip::PastLastRow,
        SkipTo::NextRow => MatchSkip::ToNextRow,
        SkipTo::First(v) | SkipTo::Last(v) => {
            if subsets.contains_key(v) {
                return Err(not_supported(format!(
                    "AFTER MATCH SKIP TO a SUBSET ({v}){at}: name a pattern variable"
                )));
            }
            let i = var_index(v, "AFTER MATCH SKIP TO")?;
            if matches!(clause.skip, SkipTo::First(_)) {
                MatchSkip::ToFirst(i)
            } else {
                MatchSkip::ToLast(i)
            }
        }
    };
    let max_prev = navs
        .iter()
        .map(|n| match n {
            MatchNav::Value { row, .. } => row.prev_depth(),
            _ => 0,
        })
        .max()
        .unwrap_or(0);

    // Output: partition columns, measures, and for ALL ROWS PER MATCH the other columns.
    let mut fields: Vec<Field> = partition_by
        .iter()
        .map(|&c| input.field(c).clone())
        .collect();
    for ((expr, (_, name)), _) in measures.iter().zip(&clause.measures).zip(&measures_sql) {
        if fields.iter().any(|f| f.name() == name) {
            return Err(SluiceError::Plan(format!(
                "MATCH_RECOGNIZE{at}: measure '{name}' has the name of another output column"
            )));
        }
        let ty = expr.get_type(&nav_schema)?;
        fields.push(Field::new(name, ty, true));
    }
    if clause.all_rows {
        for (i, f) in input.fields().iter().enumerate() {
            if partition_by.contains(&i) {
                continue;
            }
            if fields.iter().any(|g| g.name() == f.name()) {
                return Err(SluiceError::Plan(format!(
                    "MATCH_RECOGNIZE{at}: measure '{}' has the name of an input column, which \
                     ALL ROWS PER MATCH also outputs",
                    f.name()
                )));
            }
            fields.push(f.as_ref().clone());
        }
    }
    Ok(PlannedMatchRecognize {
        clause: clause.clone(),
        spec: MatchRecognizeSpec {
            partition_by,
            rowtime,
            pattern: clause.pattern.clone(),
            variables,
            navs,
            nav_schema,
            define,
            history_free,
            measures,
            all_rows: clause.all_rows,
            skip,
            within_ms: clause.within_ms,
            max_prev,
        },
        schema: Schema::new(fields),
    })
}

use std::sync::Arc;
