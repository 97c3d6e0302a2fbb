//! Flink SQL data types (Flink docs: "Data Types") parsed into Arrow types, with their
//! Flink spelling for `DESCRIBE` and `SHOW CREATE TABLE`.
//!
//! Scalar types: see [`parse_flink_type`]. Nested types (issue 18): `ARRAY<t>` and `t ARRAY`
//! (an Arrow `List`), `MAP<k, v>` (an Arrow `Map`), `ROW<name t, ...>` and
//! `ROW(name t, ...)` (an Arrow `Struct`); an element, value or field type may say
//! `NOT NULL`, and a row field may carry a `'description'`. The Arrow shapes are
//! `sluice_common::types::{array_type, map_type, row_type}`.

use datafusion_common::arrow::datatypes::{DataType, Field, TimeUnit};
use datafusion_sql::sqlparser::keywords::Keyword;
use datafusion_sql::sqlparser::parser::Parser;
use datafusion_sql::sqlparser::tokenizer::{Token, Word};
use sluice_common::types::{array_type, map_type, row_type};
use sluice_common::Result;

use crate::parser::{err_at, parse_word, sql_err, unexpected};

/// The name of the `Custom` sqlparser type that carries a Flink type sqlparser cannot
/// read (its one argument is the Flink spelling); see `dialect.rs`.
pub(crate) const FLINK_TYPE: &str = "$flink_type";

/// Plans [`FLINK_TYPE`] types (DataFusion's hook for types of its own): the Flink spelling
/// parsed again.
#[derive(Debug)]
pub(crate) struct FlinkTypePlanner;

impl datafusion_expr::planner::TypePlanner for FlinkTypePlanner {
    fn plan_type_field(
        &self,
        sql_type: &datafusion_sql::sqlparser::ast::DataType,
    ) -> datafusion_common::Result<Option<datafusion_common::arrow::datatypes::FieldRef>> {
        let datafusion_sql::sqlparser::ast::DataType::Custom(name, args) = sql_type else {
            return Ok(None);
        };
        if name.to_string() != FLINK_TYPE || args.len() != 1 {
            return Ok(None);
        }
        let mut p = Parser::new(&crate::dialect::FlinkDialect)
            .try_with_sql(&args[0])
            .map_err(|e| datafusion_common::DataFusionError::Plan(e.to_string()))?;
        let (dt, _) = parse_flink_type(&mut p)
            .map_err(|e| datafusion_common::DataFusionError::Plan(e.to_string()))?;
        Ok(Some(std::sync::Arc::new(Field::new("", dt, true))))
    }
}

/// Parses a Flink SQL data type into its Arrow type and its Flink spelling.
///
/// `TIMESTAMP(p)` is milliseconds for p <= 3, microseconds for p <= 6 (the default
/// precision of a bare `TIMESTAMP` is 6, as in Flink), nanoseconds above.
/// `TIMESTAMP_LTZ(p)` and `TIMESTAMP(p) WITH LOCAL TIME ZONE` are timestamps with a UTC
/// time zone (the session time zone applies when they are shown). Nested types: see the
/// module docs.
///
/// # Errors
/// A SQL error at the token that is not a type or does not fit one.
pub fn parse_flink_type(p: &mut Parser) -> Result<(DataType, String)> {
    let mut closes = 0;
    let parsed = nested_type(p, &mut closes)?;
    if closes > 0 {
        return Err(unexpected(p, "a type before '>'"));
    }
    Ok(parsed)
}

/// A type that may be followed by `ARRAY` or `MULTISET` (Flink's postfix syntax). `closes` counts
/// `>` already consumed as part of a `>>` token.
fn nested_type(p: &mut Parser, closes: &mut u32) -> Result<(DataType, String)> {
    let (mut dt, mut text) = one_type(p, closes)?;
    loop {
        if *closes == 0 && parse_word(p, "ARRAY") {
            dt = array_type(dt, true);
            text = format!("ARRAY<{text}>");
        } else if *closes == 0 && parse_word(p, "MULTISET") {
            dt = sluice_common::types::multiset_type(dt);
            text = format!("MULTISET<{text}>");
        } else {
            break;
        }
    }
    Ok((dt, text))
}

/// An element, key, value or field type: a type and an optional `NOT NULL`.
fn member_type(p: &mut Parser, closes: &mut u32) -> Result<(DataType, String, bool)> {
    let (dt, mut text) = nested_type(p, closes)?;
    let mut nullable = true;
    if *closes == 0 && p.parse_keywords(&[Keyword::NOT, Keyword::NULL]) {
        nullable = false;
        text.push_str(" NOT NULL");
    } else if *closes == 0 {
        let _ = p.parse_keyword(Keyword::NULL);
    }
    Ok((dt, text, nullable))
}

/// Consumes one `>`: a pending half of `>>`, a `>`, or a `>>` (leaving its second half).
fn close_angle(p: &mut Parser, closes: &mut u32) -> Result<()> {
    if *closes > 0 {
        *closes -= 1;
        return Ok(());
    }
    match p.peek_token().token {
        Token::Gt => {
            p.next_token();
            Ok(())
        }
        Token::ShiftRight => {
            p.next_token();
            *closes += 1;
            Ok(())
        }
        _ => Err(unexpected(p, "'>'")),
    }
}

fn one_type(p: &mut Parser, closes: &mut u32) -> Result<(DataType, String)> {
    let tok = p.next_token();
    let Token::Word(Word { value, .. }) = &tok.token else {
        return Err(err_at(
            tok.span.start,
            format!("Expected: a data type, found: {tok}"),
        ));
    };
    let upper = value.to_ascii_uppercase();
    match upper.as_str() {
        "ARRAY" => {
            p.expect_token(&Token::Lt).map_err(sql_err)?;
            let (element, text, nullable) = member_type(p, closes)?;
            close_angle(p, closes)?;
            Ok((array_type(element, nullable), format!("ARRAY<{text}>")))
        }
        "MAP" => {
            p.expect_token(&Token::Lt).map_err(sql_err)?;
            let (key, key_text, _) = member_type(p, closes)?;
            if *closes > 0 {
                return Err(unexpected(p, "',' and the value type"));
            }
            p.expect_token(&Token::Comma).map_err(sql_err)?;
            let (value, value_text, nullable) = member_type(p, closes)?;
            close_angle(p, closes)?;
            Ok((
                map_type(key, value, nullable),
                format!("MAP<{key_text}, {value_text}>"),
            ))
        }
        "ROW" => {
            let angle = match p.next_token().token {
                Token::Lt => true,
                Token::LParen => false,
                _ => {
                    p.prev_token();
                    return Err(unexpected(p, "'<' or '(' after ROW"));
                }
            };
            let mut fields = Vec::new();
            let mut texts = Vec::new();
            loop {
                let name = p.parse_identifier().map_err(sql_err)?;
                let (dt, text, nullable) = member_type(p, closes)?;
                if *closes == 0 {
                    if let Token::SingleQuotedString(_) = p.peek_token().token {
                        p.next_token();
                    }
                }
                if fields.iter().any(|f: &Field| f.name() == &name.value) {
                    return Err(err_at(
                        name.span.start,
                        format!("ROW field `{}` is declared twice", name.value),
                    ));
                }
                texts.push(format!("`{}` {text}", name.value.replace('`', "``")));
                fields.push(Field::new(name.value, dt, nullable));
                if *closes == 0 && p.consume_token(&Token::Comma) {
                    continue;
                }
                break;
            }
            if angle {
                close_angle(p, closes)?;
            } else {
                p.expect_token(&Token::RParen).map_err(sql_err)?;
            }
            Ok((row_type(fields), format!("ROW<{}>", texts.join(", "))))
        }
        "MULTISET" => {
            p.expect_token(&Token::Lt).map_err(sql_err)?;
            let (element, text, _) = member_type(p, closes)?;
            close_angle(p, closes)?;
            Ok((
                sluice_common::types::multiset_type(element),
                format!("MULTISET<{text}>"),
            ))
        }
        _ => scalar_type(p, &tok, upper),
    }
}

fn scalar_type(
    p: &mut Parser,
    tok: &datafusion_sql::sqlparser::tokenizer::TokenWithSpan,
    upper: String,
) -> Result<(DataType, String)> {
    let params = |p: &mut Parser| -> Result<Vec<u64>> {
        if !p.consume_token(&Token::LParen) {
            return Ok(vec![]);
        }
        let mut v = Vec::new();
        loop {
            let t = p.next_token();
            match &t.token {
                Token::Number(n, _) => v
                    .push(n.parse::<u64>().map_err(|_| {
                        err_at(t.span.start, format!("invalid type parameter {n}"))
                    })?),
                _ => {
                    return Err(err_at(
                        t.span.start,
                        format!("Expected: a number, found: {t}"),
                    ))
                }
            }
            if p.consume_token(&Token::Comma) {
                continue;
            }
            p.expect_token(&Token::RParen).map_err(sql_err)?;
            return Ok(v);
        }
    };
    let ts_unit = |precision: u64| match precision {
        0..=3 => TimeUnit::Millisecond,
        4..=6 => TimeUnit::Microsecond,
        _ => TimeUnit::Nanosecond,
    };
    let (dt, text) = match upper.as_str() {
        "STRING" => (DataType::Utf8, "STRING".to_string()),
        "VARCHAR" | "CHAR" => {
            let ps = params(p)?;
            let text = match ps.first() {
                Some(n) => format!("{upper}({n})"),
                None => upper.clone(),
            };
            (DataType::Utf8, text)
        }
        "BOOLEAN" | "BOOL" => (DataType::Boolean, "BOOLEAN".into()),
        "TINYINT" => (DataType::Int8, "TINYINT".into()),
        "SMALLINT" => (DataType::Int16, "SMALLINT".into()),
        "INT" | "INTEGER" => (DataType::Int32, "INT".into()),
        "BIGINT" => (DataType::Int64, "BIGINT".into()),
        "FLOAT" => (DataType::Float32, "FLOAT".into()),
        "DOUBLE" => {
            let _ = parse_word(p, "PRECISION");
            (DataType::Float64, "DOUBLE".into())
        }
        "DECIMAL" | "DEC" | "NUMERIC" => {
            let ps = params(p)?;
            let precision = ps.first().copied().unwrap_or(10);
            let scale = ps.get(1).copied().unwrap_or(0);
            if !(1..=38).contains(&precision) || scale > precision {
                return Err(err_at(
                    tok.span.start,
                    format!("DECIMAL({precision}, {scale}) is out of range (precision 1..38, scale <= precision)"),
                ));
            }
            (
                DataType::Decimal128(precision as u8, scale as i8),
                format!("DECIMAL({precision}, {scale})"),
            )
        }
        "DATE" => (DataType::Date32, "DATE".into()),
        "TIME" => {
            let ps = params(p)?;
            let _ = ps;
            // As a TIME literal and CAST(... AS TIME) are planned (comparable with them).
            (DataType::Time64(TimeUnit::Nanosecond), "TIME(0)".into())
        }
        "TIMESTAMP" => {
            let precision = params(p)?.first().copied().unwrap_or(6);
            if precision > 9 {
                return Err(err_at(
                    tok.span.start,
                    format!("TIMESTAMP precision must be 0 to 9, found {precision}"),
                ));
            }
            if parse_word(p, "WITH") {
                if !(parse_word(p, "LOCAL") && parse_word(p, "TIME") && parse_word(p, "ZONE")) {
                    return Err(unexpected(p, "LOCAL TIME ZONE after TIMESTAMP(p) WITH"));
                }
                (
                    DataType::Timestamp(ts_unit(precision), Some("UTC".into())),
                    format!("TIMESTAMP_LTZ({precision})"),
                )
            } else {
                if parse_word(p, "WITHOUT") && !(parse_word(p, "TIME") && parse_word(p, "ZONE")) {
                    return Err(unexpected(p, "TIME ZONE after WITHOUT"));
                }
                (
                    DataType::Timestamp(ts_unit(precision), None),
                    format!("TIMESTAMP({precision})"),
                )
            }
        }
        "TIMESTAMP_LTZ" => {
            let precision = params(p)?.first().copied().unwrap_or(6);
            (
                DataType::Timestamp(ts_unit(precision), Some("UTC".into())),
                format!("TIMESTAMP_LTZ({precision})"),
            )
        }
        "BYTES" | "VARBINARY" | "BINARY" => {
            params(p)?;
            (DataType::Binary, "BYTES".into())
        }
        "BITMAP" => (DataType::LargeBinary, "BITMAP".into()),
        _ => {
            return Err(err_at(
                tok.span.start,
                format!(
                    "Expected: a data type (STRING, VARCHAR, BOOLEAN, TINYINT, SMALLINT, INT, \
                     BIGINT, FLOAT, DOUBLE, DECIMAL, DATE, TIME, TIMESTAMP, TIMESTAMP_LTZ, \
                     BYTES, BITMAP, ARRAY, MAP, ROW), found: {upper}"
                ),
            ))
        }
    };
    Ok((dt, text))
}
