//! The SQL dialect Sluice parses with: sqlparser's `GenericDialect`, with Flink's
//! (Calcite's) operator precedence where the two differ.
//!
//! sqlparser parses the right operand of `IS [NOT] DISTINCT FROM` as a whole expression, so
//! `flagged IS DISTINCT FROM TRUE AND amount > 100` was read as `flagged IS DISTINCT FROM
//! (TRUE AND amount > 100)`. In Calcite it is a comparison: it binds like `=` (tighter than
//! `AND`, `OR`, `NOT`, `BETWEEN`, `LIKE`, `IN`, `IS NULL`; looser than arithmetic and `||`),
//! left-associative. [`FlinkDialect::parse_infix`] parses it so. Every other rule is
//! `GenericDialect`'s: its settings are forwarded one by one, and the parser's own
//! dialect checks see a `GenericDialect` ([`Dialect::dialect`]).

use std::any::TypeId;

use datafusion_sql::sqlparser::ast::Expr;
use datafusion_sql::sqlparser::dialect::{Dialect, GenericDialect, Precedence};
use datafusion_sql::sqlparser::keywords::Keyword;
use datafusion_sql::sqlparser::parser::{Parser, ParserError};

const GENERIC: GenericDialect = GenericDialect {};

/// See the module docs.
#[derive(Debug, Default, Clone, Copy)]
pub struct FlinkDialect;

impl Dialect for FlinkDialect {
    fn dialect(&self) -> TypeId {
        TypeId::of::<GenericDialect>()
    }

    /// `IS [NOT] DISTINCT FROM`: the right operand stops at any operator that binds no
    /// tighter than a comparison.
    fn parse_infix(
        &self,
        parser: &mut Parser,
        expr: &Expr,
        _precedence: u8,
    ) -> Option<Result<Expr, ParserError>> {
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
    fn supports_struct_literal(&self) -> bool {
        GENERIC.supports_struct_literal()
    }
    fn supports_empty_projections(&self) -> bool {
        GENERIC.supports_empty_projections()
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
                expr, low, high, ..
            } => {
                format!("({} BETWEEN {} AND {})", show(expr), show(low), show(high))
            }
            Expr::Nested(x) => format!("[{}]", show(x)),
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
}
