//! The SQL dialect Sluice parses with: sqlparser's `GenericDialect`, with Flink's
//! (Calcite's) operator precedence where the two differ.
//!
//! Calcite's table (`SqlStdOperatorTable`), loosest first: `OR` 22, `AND` 24, `NOT` 26,
//! the postfix `IS ...` 28, comparisons and `IS [NOT] DISTINCT FROM` 30, `BETWEEN` /
//! `LIKE` / `SIMILAR TO` / `IN` 32, binary `+ -` 40, `* / % ||` 60, unary `- +` 80; binary
//! operators are left-associative. sqlparser differs in three places, mended here:
//! - It parses the right operand of `IS [NOT] DISTINCT FROM` as a whole expression, so
//!   `flagged IS DISTINCT FROM TRUE AND amount > 100` was read as `flagged IS DISTINCT FROM
//!   (TRUE AND amount > 100)`. [`FlinkDialect::parse_infix`] parses it as a comparison.
//! - It puts `LIKE` / `SIMILAR TO` below the comparisons and `BETWEEN` / `IN` level with
//!   them, so `tr = s LIKE 'x'` was read as `(tr = s) LIKE 'x'`. [`FlinkDialect::prec_value`]
//!   puts them above the comparisons and below `+ -`, as Calcite does.
//! - It has no `BETWEEN SYMMETRIC` / `ASYMMETRIC`; [`FlinkDialect::parse_infix`] reads them
//!   (`x BETWEEN SYMMETRIC a AND b` is `x BETWEEN a AND b OR x BETWEEN b AND a`, the
//!   SQL standard's definition, which Calcite's convertlet expands to).
//!
//! - It has no `IS [NOT] JSON [VALUE|SCALAR|ARRAY|OBJECT]` (SQL:2016's JSON predicate);
//!   [`FlinkDialect::parse_infix`] reads it as the internal call `$is_json(x, 'KIND')`,
//!   under `NOT` for `IS NOT JSON`.
//!
//! - Its type grammar has no Flink `ROW<...>`, `MAP<k, v>` or `MULTISET<t>`;
//!   [`FlinkDialect::parse_prefix`] reads `CAST` / `TRY_CAST` to a nested type with Flink's
//!   type parser ([`crate::flink_types`]) and carries the type as its Flink spelling
//!   ([`crate::flink_types::FLINK_TYPE`]), which [`crate::flink_types::FlinkTypePlanner`]
//!   turns into the Arrow type.
//!
//! An empty select list (`SELECT FROM t`) is refused, as in Calcite. Every other rule is
//! `GenericDialect`'s: its settings are forwarded one by one, and the
//! parser's own dialect checks see a `GenericDialect` ([`Dialect::dialect`]).

use std::any::TypeId;

use datafusion_sql::sqlparser::ast::{BinaryOperator, Expr, UnaryOperator};
use datafusion_sql::sqlparser::dialect::{Dialect, GenericDialect, Precedence};
use datafusion_sql::sqlparser::keywords::Keyword;
use datafusion_sql::sqlparser::parser::{Parser, ParserError};
use datafusion_sql::sqlparser::tokenizer::Token;

const GENERIC: GenericDialect = GenericDialect {};

/// See the module docs.
#[derive(Debug, Default, Clone, Copy)]
pub struct FlinkDialect;

/// `x IS [NOT] JSON [VALUE|SCALAR|ARRAY|OBJECT]` after `x`, as `[NOT] $is_json(x, 'KIND')`
/// (`VALUE` when no kind is named); `None`, consuming nothing, for anything else.
fn is_json(parser: &mut Parser, expr: &Expr) -> Option<Expr> {
    let negated = if parser.parse_keywords(&[Keyword::IS, Keyword::JSON]) {
        false
    } else if parser.parse_keywords(&[Keyword::IS, Keyword::NOT, Keyword::JSON]) {
        true
    } else {
        return None;
    };
    let kind = match &parser.peek_token().token {
        Token::Word(w)
            if w.quote_style.is_none()
                && ["VALUE", "SCALAR", "ARRAY", "OBJECT"]
                    .contains(&w.value.to_ascii_uppercase().as_str()) =>
        {
            let kind = w.value.to_ascii_uppercase();
            parser.next_token();
            kind
        }
        _ => "VALUE".to_string(),
    };
    let kind = Expr::Value(datafusion_sql::sqlparser::ast::Value::SingleQuotedString(kind).into());
    let call = crate::functions::syntax::internal_call("$is_json", vec![expr.clone(), kind]);
    Some(if negated {
        Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr: Box::new(call),
        }
    } else {
        call
    })
}

impl Dialect for FlinkDialect {
    fn dialect(&self) -> TypeId {
        TypeId::of::<GenericDialect>()
    }

    /// `IS [NOT] DISTINCT FROM`: the right operand stops at any operator that binds no
    /// tighter than a comparison. `[NOT] BETWEEN SYMMETRIC|ASYMMETRIC low AND high`.
    fn parse_infix(
        &self,
        parser: &mut Parser,
        expr: &Expr,
        _precedence: u8,
    ) -> Option<Result<Expr, ParserError>> {
        if let Some(symmetric) = between_kind(parser) {
            return Some(self.parse_between(parser, expr, symmetric));
        }
        if let Some(is_json) = is_json(parser, expr) {
            return Some(Ok(is_json));
        }
        let not = if parser.parse_keywords(&[Keyword::IS, Keyword::DISTINCT, Keyword::FROM]) {
            false
        } else if parser.parse_keywords(&[
            Keyword::IS,
            Keyword::NOT,
            Keyword::DISTINCT,
            Keyword::FROM,
        ]) {
            true
        } else {
            return None;
        };
        let right = match parser.parse_subexpr(self.prec_value(Precedence::Eq)) {
            Ok(r) => Box::new(r),
            Err(e) => return Some(Err(e)),
        };
        let left = Box::new(expr.clone());
        Some(Ok(if not {
            Expr::IsNotDistinctFrom(left, right)
        } else {
            Expr::IsDistinctFrom(left, right)
        }))
    }

    /// `CAST(x AS ROW<...>)` (and `MAP`, `MULTISET`, `ARRAY`, `TRY_CAST`): see the module
    /// docs. Every other cast is sqlparser's.
    fn parse_prefix(&self, parser: &mut Parser) -> Option<Result<Expr, ParserError>> {
        use datafusion_sql::sqlparser::ast::{CastKind, DataType, Ident, ObjectName};
        let kind = match &parser.peek_token().token {
            Token::Word(w) if w.keyword == Keyword::CAST => CastKind::Cast,
            Token::Word(w) if w.keyword == Keyword::TRY_CAST => CastKind::TryCast,
            _ => return None,
        };
        let parsed = parser.maybe_parse(|p| {
            p.next_token();
            p.expect_token(&Token::LParen)?;
            let expr = p.parse_expr()?;
            p.expect_keyword_is(Keyword::AS)?;
            let nested = matches!(&p.peek_token().token, Token::Word(w)
                if ["ROW", "MAP", "MULTISET", "ARRAY"].iter().any(|n| w.value.eq_ignore_ascii_case(n)));
            if !nested {
                // Not ours: rewound, sqlparser reads it.
                return Err(ParserError::ParserError(String::new()));
            }
            let (_, text) = crate::flink_types::parse_flink_type(p)
                .map_err(|e| ParserError::ParserError(e.to_string()))?;
            p.expect_token(&Token::RParen)?;
            Ok(Expr::Cast {
                kind: kind.clone(),
                expr: Box::new(expr),
                data_type: DataType::Custom(
                    ObjectName::from(vec![Ident::new(crate::flink_types::FLINK_TYPE)]),
                    vec![text],
                ),
                array: false,
                format: None,
            })
        });
        match parsed {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// Calcite's order: `BETWEEN`, `LIKE`, `SIMILAR TO` and `IN` (sqlparser's `Between`
    /// and `Like` levels) bind tighter than the comparisons (`Eq`, 20) and looser than
    /// `+ -` (30). Flink has no bitwise operators, the levels between 20 and 30.
    fn prec_value(&self, prec: Precedence) -> u8 {
        match prec {
            Precedence::Between | Precedence::Like => 25,
            other => GENERIC.prec_value(other),
        }
    }

    fn supports_unicode_string_literal(&self) -> bool {
        GENERIC.supports_unicode_string_literal()
    }
    fn supports_partition_by_after_order_by(&self) -> bool {
        GENERIC.supports_partition_by_after_order_by()
    }
    fn supports_array_join_syntax(&self) -> bool {
        GENERIC.supports_array_join_syntax()
    }
    fn supports_group_by_expr(&self) -> bool {
        GENERIC.supports_group_by_expr()
    }
    fn supports_group_by_with_modifier(&self) -> bool {
        GENERIC.supports_group_by_with_modifier()
    }
    fn supports_left_associative_joins_without_parens(&self) -> bool {
        GENERIC.supports_left_associative_joins_without_parens()
    }
    fn supports_connect_by(&self) -> bool {
        GENERIC.supports_connect_by()
    }
    fn supports_match_recognize(&self) -> bool {
        GENERIC.supports_match_recognize()
    }
    fn supports_pipe_operator(&self) -> bool {
        GENERIC.supports_pipe_operator()
    }
    fn supports_start_transaction_modifier(&self) -> bool {
        GENERIC.supports_start_transaction_modifier()
    }
    fn supports_window_function_null_treatment_arg(&self) -> bool {
        GENERIC.supports_window_function_null_treatment_arg()
    }
    fn supports_dictionary_syntax(&self) -> bool {
        GENERIC.supports_dictionary_syntax()
    }
    fn supports_window_clause_named_window_reference(&self) -> bool {
        GENERIC.supports_window_clause_named_window_reference()
    }
    fn supports_parenthesized_set_variables(&self) -> bool {
        GENERIC.supports_parenthesized_set_variables()
    }
    fn supports_select_wildcard_except(&self) -> bool {
        GENERIC.supports_select_wildcard_except()
    }
    fn support_map_literal_syntax(&self) -> bool {
        GENERIC.support_map_literal_syntax()
    }
    fn allow_extract_custom(&self) -> bool {
        GENERIC.allow_extract_custom()
    }
    fn allow_extract_single_quotes(&self) -> bool {
        GENERIC.allow_extract_single_quotes()
    }
    fn supports_extract_comma_syntax(&self) -> bool {
        GENERIC.supports_extract_comma_syntax()
    }
    fn supports_create_view_comment_syntax(&self) -> bool {
        GENERIC.supports_create_view_comment_syntax()
    }
    fn supports_parens_around_table_factor(&self) -> bool {
        GENERIC.supports_parens_around_table_factor()
    }
    fn supports_values_as_table_factor(&self) -> bool {
        GENERIC.supports_values_as_table_factor()
    }
    fn supports_create_index_with_clause(&self) -> bool {
        GENERIC.supports_create_index_with_clause()
    }
    fn supports_explain_with_utility_options(&self) -> bool {
        GENERIC.supports_explain_with_utility_options()
    }
    fn supports_limit_comma(&self) -> bool {
        GENERIC.supports_limit_comma()
    }
    fn supports_update_order_by(&self) -> bool {
        GENERIC.supports_update_order_by()
    }
    fn supports_from_first_select(&self) -> bool {
        GENERIC.supports_from_first_select()
    }
    fn supports_projection_trailing_commas(&self) -> bool {
        GENERIC.supports_projection_trailing_commas()
    }
    fn supports_asc_desc_in_column_definition(&self) -> bool {
        GENERIC.supports_asc_desc_in_column_definition()
    }
    fn supports_try_convert(&self) -> bool {
        GENERIC.supports_try_convert()
    }
    fn supports_bitwise_shift_operators(&self) -> bool {
        GENERIC.supports_bitwise_shift_operators()
    }
    fn supports_comment_on(&self) -> bool {
        GENERIC.supports_comment_on()
    }
    fn supports_load_extension(&self) -> bool {
        GENERIC.supports_load_extension()
    }
    fn supports_named_fn_args_with_assignment_operator(&self) -> bool {
        GENERIC.supports_named_fn_args_with_assignment_operator()
    }
    /// `JSON_OBJECT(KEY <expression> VALUE v)`: a key can be any expression (Flink).
    fn supports_named_fn_args_with_expr_name(&self) -> bool {
        true
    }
    fn supports_struct_literal(&self) -> bool {
        GENERIC.supports_struct_literal()
    }
    /// `SELECT FROM t` is not SQL in Flink (Calcite), and DataFusion's planner fails on it.
    fn supports_empty_projections(&self) -> bool {
        false
    }
    fn supports_nested_comments(&self) -> bool {
        GENERIC.supports_nested_comments()
    }
    fn supports_multiline_comment_hints(&self) -> bool {
        GENERIC.supports_multiline_comment_hints()
    }
    fn supports_user_host_grantee(&self) -> bool {
        GENERIC.supports_user_host_grantee()
    }
    fn supports_string_escape_constant(&self) -> bool {
        GENERIC.supports_string_escape_constant()
    }
    fn supports_array_typedef_with_brackets(&self) -> bool {
        GENERIC.supports_array_typedef_with_brackets()
    }
    fn supports_match_against(&self) -> bool {
        GENERIC.supports_match_against()
    }
    fn supports_set_names(&self) -> bool {
        GENERIC.supports_set_names()
    }
    fn supports_comma_separated_set_assignments(&self) -> bool {
        GENERIC.supports_comma_separated_set_assignments()
    }
    fn supports_filter_during_aggregation(&self) -> bool {
        GENERIC.supports_filter_during_aggregation()
    }
    fn supports_select_wildcard_exclude(&self) -> bool {
        GENERIC.supports_select_wildcard_exclude()
    }
    fn supports_data_type_signed_suffix(&self) -> bool {
        GENERIC.supports_data_type_signed_suffix()
    }
    fn supports_interval_options(&self) -> bool {
        GENERIC.supports_interval_options()
    }
    fn supports_quote_delimited_string(&self) -> bool {
        GENERIC.supports_quote_delimited_string()
    }
    fn supports_select_wildcard_replace(&self) -> bool {
        GENERIC.supports_select_wildcard_replace()
    }
    fn supports_select_wildcard_ilike(&self) -> bool {
        GENERIC.supports_select_wildcard_ilike()
    }
    fn supports_select_wildcard_rename(&self) -> bool {
        GENERIC.supports_select_wildcard_rename()
    }
    fn supports_optimize_table(&self) -> bool {
        GENERIC.supports_optimize_table()
    }
    fn supports_install(&self) -> bool {
        GENERIC.supports_install()
    }
    fn supports_detach(&self) -> bool {
        GENERIC.supports_detach()
    }
    fn supports_prewhere(&self) -> bool {
        GENERIC.supports_prewhere()
    }
    fn supports_with_fill(&self) -> bool {
        GENERIC.supports_with_fill()
    }
    fn supports_limit_by(&self) -> bool {
        GENERIC.supports_limit_by()
    }
    fn supports_interpolate(&self) -> bool {
        GENERIC.supports_interpolate()
    }
    fn supports_settings(&self) -> bool {
        GENERIC.supports_settings()
    }
    fn supports_select_format(&self) -> bool {
        GENERIC.supports_select_format()
    }
    fn supports_comment_optimizer_hint(&self) -> bool {
        GENERIC.supports_comment_optimizer_hint()
    }
    fn supports_constraint_keyword_without_name(&self) -> bool {
        GENERIC.supports_constraint_keyword_without_name()
    }
    fn supports_key_column_option(&self) -> bool {
        GENERIC.supports_key_column_option()
    }
    fn supports_comma_separated_trim(&self) -> bool {
        GENERIC.supports_comma_separated_trim()
    }
    fn supports_cte_without_as(&self) -> bool {
        GENERIC.supports_cte_without_as()
    }
    fn supports_select_item_multi_column_alias(&self) -> bool {
        GENERIC.supports_select_item_multi_column_alias()
    }
    fn supports_xml_expressions(&self) -> bool {
        GENERIC.supports_xml_expressions()
    }
    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        GENERIC.is_delimited_identifier_start(ch)
    }
    fn is_identifier_start(&self, ch: char) -> bool {
        GENERIC.is_identifier_start(ch)
    }
    fn is_identifier_part(&self, ch: char) -> bool {
        GENERIC.is_identifier_part(ch)
    }
}

/// After an expression: `[NOT] BETWEEN SYMMETRIC` (`Some(true)`) or `[NOT] BETWEEN
/// ASYMMETRIC` (`Some(false)`), consuming nothing; `None` for anything else (a plain
/// `BETWEEN` is sqlparser's).
fn between_kind(parser: &Parser) -> Option<bool> {
    let word = |n: usize| match &parser.peek_nth_token_ref(n).token {
        Token::Word(w) => Some(w.keyword),
        _ => None,
    };
    let at = if word(0) == Some(Keyword::NOT) { 1 } else { 0 };
    if word(at) != Some(Keyword::BETWEEN) {
        return None;
    }
    match word(at + 1) {
        Some(Keyword::SYMMETRIC) => Some(true),
        Some(Keyword::ASYMMETRIC) => Some(false),
        _ => None,
    }
}

impl FlinkDialect {
    /// `expr [NOT] BETWEEN SYMMETRIC|ASYMMETRIC low AND high`, the tokens not yet consumed.
    /// Symmetric is `(expr BETWEEN low AND high) OR (expr BETWEEN high AND low)`.
    fn parse_between(
        &self,
        parser: &mut Parser,
        expr: &Expr,
        symmetric: bool,
    ) -> Result<Expr, ParserError> {
        let negated = parser.parse_keyword(Keyword::NOT);
        parser.expect_keyword_is(Keyword::BETWEEN)?;
        parser.next_token(); // SYMMETRIC | ASYMMETRIC
        let low = parser.parse_subexpr(self.prec_value(Precedence::Between))?;
        parser.expect_keyword_is(Keyword::AND)?;
        let high = parser.parse_subexpr(self.prec_value(Precedence::Between))?;
        let between = |low: &Expr, high: &Expr| Expr::Between {
            expr: Box::new(expr.clone()),
            negated: false,
            low: Box::new(low.clone()),
            high: Box::new(high.clone()),
        };
        let test = if symmetric {
            Expr::Nested(Box::new(Expr::BinaryOp {
                left: Box::new(between(&low, &high)),
                op: BinaryOperator::Or,
                right: Box::new(between(&high, &low)),
            }))
        } else {
            between(&low, &high)
        };
        Ok(match (negated, test) {
            (false, test) => test,
            (
                true,
                Expr::Between {
                    expr, low, high, ..
                },
            ) => Expr::Between {
                expr,
                negated: true,
                low,
                high,
            },
            (true, test) => Expr::UnaryOp {
                op: UnaryOperator::Not,
                expr: Box::new(test),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The binding as fully parenthesized text.
    fn show(e: &Expr) -> String {
        match e {
            Expr::BinaryOp { left, op, right } => format!("({} {op} {})", show(left), show(right)),
            Expr::IsDistinctFrom(l, r) => format!("({} IDF {})", show(l), show(r)),
            Expr::IsNotDistinctFrom(l, r) => format!("({} INDF {})", show(l), show(r)),
            Expr::IsNull(x) => format!("({} IS NULL)", show(x)),
            Expr::UnaryOp { op, expr } => format!("({op} {})", show(expr)),
            Expr::Between {
                expr,
                low,
                high,
                negated,
            } => {
                let not = if *negated { "NOT " } else { "" };
                let (e, l, h) = (show(expr), show(low), show(high));
                format!("({e} {not}BETWEEN {l} AND {h})")
            }
            Expr::IsTrue(x) => format!("({} IS TRUE)", show(x)),
            Expr::Nested(x) => format!("[{}]", show(x)),
            Expr::Like {
                negated,
                expr,
                pattern,
                ..
            } => {
                let not = if *negated { "NOT " } else { "" };
                format!("({} {not}LIKE {})", show(expr), show(pattern))
            }
            Expr::InList {
                expr,
                list,
                negated,
            } => {
                let not = if *negated { "NOT " } else { "" };
                let list: Vec<_> = list.iter().map(show).collect();
                format!("({} {not}IN {})", show(expr), list.join(","))
            }
            other => other.to_string(),
        }
    }

    fn binding(sql: &str) -> String {
        let e = Parser::new(&FlinkDialect)
            .try_with_sql(sql)
            .unwrap()
            .parse_expr()
            .unwrap();
        show(&e)
    }

    /// `IS [NOT] DISTINCT FROM` binds like `=` (Calcite): tighter than AND/OR/NOT/BETWEEN/IS
    /// NULL, looser than arithmetic and `||`, left-associative.
    #[test]
    fn distinct_from_binds_like_a_comparison() {
        assert_eq!(
            binding("flagged IS DISTINCT FROM TRUE AND amount > 100"),
            "((flagged IDF true) AND (amount > 100))"
        );
        assert_eq!(
            binding("a IS NOT DISTINCT FROM b OR c"),
            "((a INDF b) OR c)"
        );
        assert_eq!(
            binding("p AND a IS DISTINCT FROM b OR c"),
            "((p AND (a IDF b)) OR c)"
        );
        assert_eq!(
            binding("a IS DISTINCT FROM b IS DISTINCT FROM c"),
            "((a IDF b) IDF c)"
        );
        assert_eq!(binding("a IS DISTINCT FROM b = c"), "((a IDF b) = c)");
        assert_eq!(binding("a = b IS DISTINCT FROM c"), "((a = b) IDF c)");
        assert_eq!(
            binding("a IS DISTINCT FROM b IS NULL"),
            "((a IDF b) IS NULL)"
        );
        assert_eq!(binding("a IS DISTINCT FROM x + 1"), "(a IDF (x + 1))");
        assert_eq!(binding("a IS DISTINCT FROM s || t"), "(a IDF (s || t))");
        assert_eq!(
            binding("NOT a IS DISTINCT FROM b AND c"),
            "((NOT (a IDF b)) AND c)"
        );
        assert_eq!(
            binding("a IS DISTINCT FROM (b AND c)"),
            "(a IDF [(b AND c)])"
        );
        // The rest is GenericDialect's: IS NULL, IS TRUE still parse.
        assert_eq!(binding("a IS NULL AND b"), "((a IS NULL) AND b)");
    }

    /// `BETWEEN`, `LIKE`, `IN` bind tighter than the comparisons (Calcite 32 vs 30) and
    /// looser than `+`; sqlparser put LIKE below `=` and the others level with it.
    #[test]
    fn between_like_in_bind_tighter_than_comparisons() {
        assert_eq!(binding("tr = s LIKE 'x'"), "(tr = (s LIKE 'x'))");
        assert_eq!(binding("s LIKE 'x' = tr"), "((s LIKE 'x') = tr)");
        assert_eq!(binding("tr = s NOT LIKE 'x'"), "(tr = (s NOT LIKE 'x'))");
        assert_eq!(
            binding("tr = a BETWEEN 0 AND 2"),
            "(tr = (a BETWEEN 0 AND 2))"
        );
        assert_eq!(
            binding("a BETWEEN 0 AND 2 = tr"),
            "((a BETWEEN 0 AND 2) = tr)"
        );
        assert_eq!(binding("tr = a IN (1, 2)"), "(tr = (a IN 1,2))");
        assert_eq!(binding("fa = a NOT IN (2)"), "(fa = (a NOT IN 2))");
        assert_eq!(
            binding("a + b BETWEEN c - 1 AND c + 1"),
            "((a + b) BETWEEN (c - 1) AND (c + 1))"
        );
        assert_eq!(
            binding("s || 't' LIKE 'x' || '%'"),
            "((s || 't') LIKE ('x' || '%'))"
        );
        assert_eq!(binding("NOT a IN (1) = fa"), "(NOT ((a IN 1) = fa))");
        assert_eq!(binding("a IN (1) IS TRUE"), "((a IN 1) IS TRUE)");
        assert_eq!(binding("a < b = tr"), "((a < b) = tr)");
    }

    /// `BETWEEN SYMMETRIC` is the standard's OR of both orders; `ASYMMETRIC` is plain.
    #[test]
    fn between_symmetric_and_asymmetric() {
        assert_eq!(
            binding("a BETWEEN SYMMETRIC c AND b AND fa"),
            "([((a BETWEEN c AND b) OR (a BETWEEN b AND c))] AND fa)"
        );
        assert_eq!(
            binding("a NOT BETWEEN SYMMETRIC 3 AND x + 1"),
            "(NOT [((a BETWEEN 3 AND (x + 1)) OR (a BETWEEN (x + 1) AND 3))])"
        );
        assert_eq!(
            binding("a BETWEEN ASYMMETRIC c AND b OR fa"),
            "((a BETWEEN c AND b) OR fa)"
        );
        assert_eq!(
            binding("a NOT BETWEEN ASYMMETRIC c AND b"),
            "(a NOT BETWEEN c AND b)"
        );
        assert_eq!(
            binding("tr = a BETWEEN SYMMETRIC 1 AND 0"),
            "(tr = [((a BETWEEN 1 AND 0) OR (a BETWEEN 0 AND 1))])"
        );
    }

    /// Field access `.` and subscripts `[]` bind tightest (Calcite 100, above unary minus
    /// 80 and `*` 60), as in sqlparser. Parser-level only: the ROW and ARRAY values they
    /// apply to are issue 18's.
    #[test]
    fn field_access_and_subscripts_bind_tightest() {
        assert_eq!(binding("-a[1]"), "(- a[1])");
        assert_eq!(binding("a[1] * 2"), "(a[1] * 2)");
        assert_eq!(binding("a[1][2] + b[3]"), "(a[1][2] + b[3])");
        assert_eq!(binding("r.f + 1"), "(r.f + 1)");
        assert_eq!(binding("-r.f * 2"), "((- r.f) * 2)");
        assert_eq!(binding("NOT r.flag AND b"), "((NOT r.flag) AND b)");
        assert_eq!(binding("r.f BETWEEN 1 AND 2"), "(r.f BETWEEN 1 AND 2)");
    }
}
