//! EXPLAIN's expressions rendered from the `Expr` tree as the SQL they came from: literals
//! as SQL literals (`'x'`, `0.908`, `TIMESTAMP '2024-01-01 10:00:00'`, `INTERVAL '10'
//! SECOND`), Sluice's internal forms of Flink's rules back as written (`$decimal_multiply(a,
//! b)` reads `a * b`, `$cast(x)` reads `CAST(x AS DECIMAL(10, 2))`), ROW field access as
//! `r.f`, function names in capitals, `COUNT(*)`. Nodes it does not know keep
//! DataFusion's display, made SQL-like by [`super::text::tidy`].

use datafusion_common::ScalarValue;
use datafusion_expr::expr::{AggregateFunction, Alias, Case, Cast, Like, ScalarFunction};
use datafusion_expr::{Between, BinaryExpr, Expr, Operator};
use sluice_common::types::flink_type_name;

/// `e` as SQL text (module docs).
pub(super) fn sql(e: &Expr) -> String {
    match e {
        // A chain of aliases keeps its last name.
        Expr::Alias(Alias { expr, name, .. }) => {
            let mut inner = &**expr;
            while let Expr::Alias(a) = inner {
                inner = &a.expr;
            }
            let text = sql(inner);
            // DataFusion names an unnamed expression after its own display.
            if text == *name || text.eq_ignore_ascii_case(&super::text::tidy(name)) {
                text
            } else {
                format!("{text} AS {name}")
            }
        }
        Expr::Column(c) => c.flat_name(),
        Expr::Literal(v, _) => literal(v),
        Expr::BinaryExpr(b) => binary(b),
        Expr::Not(x) => format!("NOT {}", operand(x, 15)),
        Expr::Negative(x) => format!("-{}", operand(x, 50)),
        Expr::IsNull(x) => format!("{} IS NULL", operand(x, 15)),
        Expr::IsNotNull(x) => format!("{} IS NOT NULL", operand(x, 15)),
        Expr::IsTrue(x) => format!("{} IS TRUE", operand(x, 15)),
        Expr::IsFalse(x) => format!("{} IS FALSE", operand(x, 15)),
        Expr::Between(Between {
            expr,
            negated,
            low,
            high,
        }) => format!(
            "{} {}BETWEEN {} AND {}",
            operand(expr, 15),
            if *negated { "NOT " } else { "" },
            operand(low, 15),
            operand(high, 15)
        ),
        Expr::Like(Like {
            negated,
            expr,
            pattern,
            case_insensitive,
            ..
        }) => format!(
            "{} {}{} {}",
            operand(expr, 15),
            if *negated { "NOT " } else { "" },
            if *case_insensitive { "ILIKE" } else { "LIKE" },
            operand(pattern, 15)
        ),
        Expr::InList(l) => format!(
            "{} {}IN ({})",
            operand(&l.expr, 15),
            if l.negated { "NOT " } else { "" },
            list(&l.list)
        ),
        Expr::Case(c) => case(c),
        // A number the planner coerced to another numeric type reads as written.
        Expr::Cast(Cast { expr, field })
            if field.data_type().is_numeric()
                && matches!(&**expr, Expr::Literal(v, _) if v.data_type().is_numeric()) =>
        {
            sql(expr)
        }
        Expr::Cast(Cast { expr, field }) => {
            format!(
                "CAST({} AS {})",
                sql(expr),
                flink_type_name(field.data_type())
            )
        }
        Expr::ScalarFunction(f) => function(f),
        Expr::AggregateFunction(a) => aggregate(a),
        other => super::text::tidy(&other.to_string()),
    }
}

fn list(args: &[Expr]) -> String {
    args.iter().map(sql).collect::<Vec<_>>().join(", ")
}

/// `x` as an operand of an operator of precedence `outer`: in parentheses when it binds
/// less tightly.
fn operand(x: &Expr, outer: u8) -> String {
    let inner = match x {
        Expr::BinaryExpr(b) => b.op.precedence(),
        Expr::ScalarFunction(f) => decimal_operator(f).map_or(u8::MAX, |op| op.precedence()),
        Expr::Not(_) | Expr::IsNull(_) | Expr::IsNotNull(_) | Expr::Between(_) => 15,
        _ => u8::MAX,
    };
    if inner < outer {
        format!("({})", sql(x))
    } else {
        sql(x)
    }
}

fn binary(b: &BinaryExpr) -> String {
    let p = b.op.precedence();
    // Left-associative: a right operand of the same precedence needs parentheses.
    format!(
        "{} {} {}",
        operand(&b.left, p),
        b.op,
        operand(&b.right, p + 1)
    )
}

/// The operator a `$decimal_*` call (Flink's DECIMAL arithmetic) stands for.
fn decimal_operator(f: &ScalarFunction) -> Option<Operator> {
    Some(match f.func.name() {
        "$decimal_plus" => Operator::Plus,
        "$decimal_minus" => Operator::Minus,
        "$decimal_multiply" => Operator::Multiply,
        "$decimal_divide" => Operator::Divide,
        "$decimal_modulo" => Operator::Modulo,
        _ => return None,
    })
}

fn function(f: &ScalarFunction) -> String {
    let name = f.func.name();
    match (name, f.args.as_slice()) {
        ("get_field", [x, Expr::Literal(ScalarValue::Utf8(Some(field)), _)]) => {
            format!("{}.{field}", operand(x, u8::MAX))
        }
        ("$cast", [x @ Expr::Literal(v, _)]) if v.data_type().is_numeric() => {
            match f.func.return_type(&[]) {
                Ok(t) if t.is_numeric() => sql(x),
                Ok(t) => format!("CAST({} AS {})", sql(x), flink_type_name(&t)),
                Err(_) => format!("CAST({})", sql(x)),
            }
        }
        ("$cast" | "$try_cast", [x]) => {
            let cast = if name == "$cast" { "CAST" } else { "TRY_CAST" };
            match f.func.return_type(&[]) {
                Ok(t) => format!("{cast}({} AS {})", sql(x), flink_type_name(&t)),
                Err(_) => format!("{cast}({})", sql(x)),
            }
        }
        (_, [a, b]) if decimal_operator(f).is_some() => {
            let op = decimal_operator(f).expect("checked");
            let p = op.precedence();
            format!("{} {op} {}", operand(a, p), operand(b, p + 1))
        }
        _ => format!("{}({})", function_name(name), list(&f.args)),
    }
}

/// Built-in names in capitals, as Flink's docs write them; internal (`$...`) and
/// user-defined lower-case names as they are.
fn function_name(name: &str) -> String {
    if name.starts_with('$') || name.chars().any(|c| c.is_ascii_uppercase()) {
        name.to_string()
    } else {
        name.to_ascii_uppercase()
    }
}

fn aggregate(a: &AggregateFunction) -> String {
    let p = &a.params;
    let name = function_name(a.func.name());
    let args = match p.args.as_slice() {
        [Expr::Literal(v, _)] if name == "COUNT" && !v.is_null() => "*".to_string(),
        args => list(args),
    };
    let distinct = if p.distinct { "DISTINCT " } else { "" };
    let mut text = format!("{name}({distinct}{args})");
    if let Some(filter) = &p.filter {
        text.push_str(&format!(" FILTER (WHERE {})", sql(filter)));
    }
    text
}

fn case(c: &Case) -> String {
    let mut text = "CASE".to_string();
    if let Some(e) = &c.expr {
        text.push_str(&format!(" {}", sql(e)));
    }
    for (when, then) in &c.when_then_expr {
        text.push_str(&format!(" WHEN {} THEN {}", sql(when), sql(then)));
    }
    if let Some(e) = &c.else_expr {
        text.push_str(&format!(" ELSE {}", sql(e)));
    }
    text.push_str(" END");
    text
}

/// A literal as SQL writes it.
fn literal(v: &ScalarValue) -> String {
    use ScalarValue as S;
    if v.is_null() {
        return "NULL".to_string();
    }
    match v {
        S::Utf8(Some(s)) | S::LargeUtf8(Some(s)) | S::Utf8View(Some(s)) => {
            format!("'{}'", s.replace('\'', "''"))
        }
        S::Boolean(Some(b)) => if *b { "TRUE" } else { "FALSE" }.to_string(),
        S::TimestampSecond(Some(_), _)
        | S::TimestampMillisecond(Some(_), _)
        | S::TimestampMicrosecond(Some(_), _)
        | S::TimestampNanosecond(Some(_), _) => timestamp(v),
        S::IntervalMonthDayNano(Some(i)) => {
            interval(i64::from(i.months), i64::from(i.days), i.nanoseconds)
        }
        S::IntervalDayTime(Some(i)) => {
            interval(0, i64::from(i.days), i64::from(i.milliseconds) * 1_000_000)
        }
        S::IntervalYearMonth(Some(m)) => interval(i64::from(*m), 0, 0),
        // Numbers and decimals: their value (`0.908`, `2`, `1.5`).
        other => other.to_string(),
    }
}

fn timestamp(v: &ScalarValue) -> String {
    let Ok(ScalarValue::TimestampNanosecond(Some(ns), zone)) =
        v.cast_to(&datafusion_common::arrow::datatypes::DataType::Timestamp(
            datafusion_common::arrow::datatypes::TimeUnit::Nanosecond,
            match v {
                ScalarValue::TimestampSecond(_, z)
                | ScalarValue::TimestampMillisecond(_, z)
                | ScalarValue::TimestampMicrosecond(_, z)
                | ScalarValue::TimestampNanosecond(_, z) => z.clone(),
                _ => None,
            },
        ))
    else {
        return v.to_string();
    };
    let Some(t) = datafusion_common::arrow::temporal_conversions::timestamp_ns_to_datetime(ns)
    else {
        return v.to_string();
    };
    let mut text = t.format("%Y-%m-%d %H:%M:%S%.f").to_string();
    if let Some(stripped) = text.strip_suffix(".") {
        text = stripped.to_string();
    }
    match zone {
        Some(_) => format!("TO_TIMESTAMP_LTZ('{text}')"),
        None => format!("TIMESTAMP '{text}'"),
    }
}

/// `INTERVAL 'n' UNIT` in the largest unit that holds it whole (Flink SQL's interval
/// literals), else seconds with a fraction.
fn interval(months: i64, days: i64, nanos: i64) -> String {
    if days == 0 && nanos == 0 {
        return if months % 12 == 0 {
            format!("INTERVAL '{}' YEAR", months / 12)
        } else {
            format!("INTERVAL '{months}' MONTH")
        };
    }
    if months != 0 {
        return format!("INTERVAL '{months}' MONTH + {}", interval(0, days, nanos));
    }
    const SECOND: i64 = 1_000_000_000;
    let total = i128::from(days) * 86_400 * i128::from(SECOND) + i128::from(nanos);
    for (unit, size) in [
        ("DAY", 86_400 * SECOND),
        ("HOUR", 3_600 * SECOND),
        ("MINUTE", 60 * SECOND),
        ("SECOND", SECOND),
    ] {
        if total % i128::from(size) == 0 {
            return format!("INTERVAL '{}' {unit}", total / i128::from(size));
        }
    }
    let seconds = total as f64 / SECOND as f64;
    format!("INTERVAL '{seconds}' SECOND")
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::datatypes::DataType;
    use datafusion_common::DFSchema;
    use datafusion_expr::{col, lit, ExprSchemable};

    #[test]
    fn literals_read_as_sql() {
        assert_eq!(literal(&ScalarValue::Decimal128(Some(908), 4, 3)), "0.908");
        assert_eq!(literal(&ScalarValue::Utf8(Some("it's".into()))), "'it''s'");
        assert_eq!(literal(&ScalarValue::Int32(None)), "NULL");
        assert_eq!(
            literal(&ScalarValue::TimestampMillisecond(
                Some(1_704_103_200_500),
                None
            )),
            "TIMESTAMP '2024-01-01 10:00:00.500'"
        );
        assert_eq!(
            literal(&ScalarValue::TimestampMillisecond(
                Some(1_704_103_200_000),
                None
            )),
            "TIMESTAMP '2024-01-01 10:00:00'"
        );
        assert_eq!(interval(0, 0, 10_000_000_000), "INTERVAL '10' SECOND");
        assert_eq!(interval(0, 0, 7_200_000_000_000), "INTERVAL '2' HOUR");
        assert_eq!(interval(0, 1, 0), "INTERVAL '1' DAY");
        assert_eq!(interval(0, 0, 1_500_000_000), "INTERVAL '1.5' SECOND");
        assert_eq!(interval(24, 0, 0), "INTERVAL '2' YEAR");
    }

    #[test]
    fn operators_keep_their_grouping() {
        let e = (col("a") + col("b")) * lit(2i64);
        assert_eq!(sql(&e), "(a + b) * 2");
        let e = col("a") - (col("b") - col("c"));
        assert_eq!(sql(&e), "a - (b - c)");
        let e = col("a").eq(lit("x")).and(col("b").gt(lit(1.5f64)));
        assert_eq!(sql(&e), "a = 'x' AND b > 1.5");
        let e = col("a").between(lit(1i32), lit(3i32)).alias("in_range");
        assert_eq!(sql(&e), "a BETWEEN 1 AND 3 AS in_range");
        // Coerced numbers read as written; an alias that is the display is dropped.
        let e = col("c").eq(lit(10i32)
            .cast_to(&DataType::Int64, &DFSchema::empty())
            .unwrap());
        assert_eq!(sql(&e), "c = 10");
        let e = col("c").eq(lit(10i64)).alias("c = Int64(10)");
        assert_eq!(sql(&e), "c = 10");
    }
}
