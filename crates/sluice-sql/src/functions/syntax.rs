//! Rewrites of Flink's function syntax that DataFusion's SQL planner cannot plan, done on
//! the parsed statement before planning: `FLOOR(t TO unit)` / `CEIL(t TO unit)` become
//! `$floor_to(t, 'UNIT')` / `$ceil_to(t, 'UNIT')`, and the time-unit keyword that
//! `TIMESTAMPADD` / `TIMESTAMPDIFF` take first becomes a string literal, `IF(c, a, b)`
//! becomes `CASE WHEN c THEN a ELSE b END`, `IFNULL(a, b)` becomes `COALESCE(a, b)`, and
//! a number with an exponent (`1e1`) is cast to DOUBLE, `GREATEST` / `LEAST` become NULL
//! when an argument is NULL (Flink) around DataFusion's
//! `$greatest` / `$least` (which skip NULLs). Names starting with `$` cannot be written
//! in SQL, so these stay internal.

use std::ops::ControlFlow;

use datafusion_sql::sqlparser::ast::helpers::attached_token::AttachedToken;

use datafusion_sql::sqlparser::ast::{
    self, CeilFloorKind, DateTimeField, FunctionArg, FunctionArgExpr, FunctionArguments, Ident,
    ObjectName, Value, VisitMut, VisitorMut,
};

/// Functions planned by the rewrites here rather than looked up by name (`SHOW FUNCTIONS`
/// lists them too).
pub(crate) const REWRITTEN: &[&str] = &[
    "if",
    "ifnull",
    "nullif",
    "greatest",
    "least",
    "json_object",
    "json_array",
    "json_objectagg",
    "json_arrayagg",
    "grouping_id",
    "extract",
];

struct FlinkSyntax;

fn string(s: &str) -> ast::Expr {
    ast::Expr::Value(Value::SingleQuotedString(s.to_string()).into())
}

/// `JSON_OBJECT('k' VALUE v, ... [NULL|ABSENT ON NULL])` / `JSON_ARRAY(v, ... [...])` as
/// `$json_object('<mode>:<kinds>', k1, v1, ...)` / `$json_array('<mode>:<kinds>', v1, ...)`:
/// the mode is `NULL` or `ABSENT` (Flink's defaults: NULL ON NULL for objects, ABSENT ON
/// NULL for arrays), and a kind per value says whether it is JSON already (`j`: a nested
/// JSON_OBJECT / JSON_ARRAY) or a value to encode (`v`). `None` for other argument forms.
///
/// The aggregates `JSON_OBJECTAGG([KEY] k VALUE v [mode])` and `JSON_ARRAYAGG(v [mode])`
/// become `$json_objectagg('<mode>:<kind>', k, v)` / `$json_arrayagg('<mode>:<kind>', v)`
/// (same defaults), keeping their `FILTER`.
fn json_constructor(f: &ast::Function) -> Option<ast::Expr> {
    let name = f.name.to_string().to_ascii_lowercase();
    let object = name.starts_with("json_object");
    let internal = format!("${name}");
    let FunctionArguments::List(list) = &f.args else {
        if name.ends_with("agg") {
            return None;
        }
        return Some(internal_call(
            &internal,
            vec![string(if object { "NULL:" } else { "ABSENT:" })],
        ));
    };
    if list.duplicate_treatment.is_some() {
        return None;
    }
    let mut mode = if object { "NULL" } else { "ABSENT" };
    for clause in &list.clauses {
        match clause {
            ast::FunctionArgumentClause::JsonNullClause(ast::JsonNullClause::NullOnNull) => {
                mode = "NULL"
            }
            ast::FunctionArgumentClause::JsonNullClause(ast::JsonNullClause::AbsentOnNull) => {
                mode = "ABSENT"
            }
            _ => return None,
        }
    }
    let is_json = |e: &ast::Expr| {
        matches!(e, ast::Expr::Function(g) if matches!(
            g.name.0.first().and_then(|p| p.as_ident()).map(|i| i.value.as_str()),
            Some("$json_object" | "$json_array")
        ))
    };
    let mut kinds = String::new();
    let mut args = Vec::new();
    for a in &list.args {
        match (object, a) {
            (
                true,
                FunctionArg::ExprNamed {
                    name,
                    arg: FunctionArgExpr::Expr(v),
                    operator: ast::FunctionArgOperator::Value,
                },
            ) => {
                args.push(name.clone());
                kinds.push(if is_json(v) { 'j' } else { 'v' });
                args.push(v.clone());
            }
            (
                true,
                FunctionArg::Named {
                    name,
                    arg: FunctionArgExpr::Expr(v),
                    operator: ast::FunctionArgOperator::Value,
                },
            ) => {
                // The parser reads a key `'k'` as a quoted name, a column key `k` as a name.
                args.push(match name.quote_style {
                    Some('\'') => string(&name.value),
                    _ => ast::Expr::Identifier(name.clone()),
                });
                kinds.push(if is_json(v) { 'j' } else { 'v' });
                args.push(v.clone());
            }
            (false, FunctionArg::Unnamed(FunctionArgExpr::Expr(v))) => {
                kinds.push(if is_json(v) { 'j' } else { 'v' });
                args.push(v.clone());
            }
            _ => return None,
        }
    }
    args.insert(0, string(&format!("{mode}:{kinds}")));
    if name.ends_with("agg") && kinds.len() != 1 {
        return None;
    }
    let mut call = internal_call(&internal, args);
    if let ast::Expr::Function(g) = &mut call {
        g.filter = f.filter.clone();
    }
    Some(call)
}

/// The arguments of a plain call `f(a, b, ...)` (no DISTINCT, ORDER BY, FILTER or OVER).
fn plain_args(f: &ast::Function) -> Option<Vec<ast::Expr>> {
    if f.over.is_some() || f.filter.is_some() {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return None;
    }
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

pub(crate) fn internal_call(name: &str, args: Vec<ast::Expr>) -> ast::Expr {
    call(name, args, Some('"'))
}

fn call(name: &str, args: Vec<ast::Expr>, quote: Option<char>) -> ast::Expr {
    let ident = match quote {
        Some(q) => Ident::with_quote(q, name),
        None => Ident::new(name),
    };
    ast::Expr::Function(ast::Function {
        name: ObjectName::from(vec![ident]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(ast::FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

fn unit_name(field: &DateTimeField) -> String {
    field.to_string().to_ascii_uppercase()
}

/// `interval * n` for a day-time interval literal and an integer literal `n`, as an
/// interval of milliseconds; `None` otherwise.
fn scaled_interval(interval: &ast::Expr, n: &ast::Expr) -> Option<ast::Expr> {
    let ast::Expr::Value(v) = n else {
        return None;
    };
    let Value::Number(n, _) = &v.value else {
        return None;
    };
    let n: i64 = n.parse().ok()?;
    let ms = crate::parser::interval_ms(interval).ok()?.checked_mul(n)?;
    Some(ast::Expr::Interval(ast::Interval {
        value: Box::new(string(&format!("{ms} milliseconds"))),
        leading_field: None,
        leading_precision: None,
        last_field: None,
        fractional_seconds_precision: None,
    }))
}

/// A LIKE pattern written with `escape` as its escape character (`None`: none, Flink's
/// default), spelt with backslash as the escape character instead, as DataFusion reads it:
/// `escape` + next character becomes backslash + that character, and a backslash that is
/// not an escape is doubled. A trailing lone escape character is kept as it is.
fn with_backslash_escapes(pattern: &str, escape: Option<char>) -> String {
    let mut out = String::with_capacity(pattern.len() + 4);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            match chars.next() {
                Some(next) => {
                    out.push('\\');
                    out.push(next);
                }
                None => out.push(c),
            }
        } else if c == '\\' {
            out.push_str("\\\\");
        } else {
            out.push(c);
        }
    }
    out
}

impl VisitorMut for FlinkSyntax {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut ast::Expr) -> ControlFlow<()> {
        match expr {
            ast::Expr::Floor {
                expr: inner,
                field: CeilFloorKind::DateTimeField(f),
            }
            | ast::Expr::Ceil {
                expr: inner,
                field: CeilFloorKind::DateTimeField(f),
            } if *f != DateTimeField::NoDateTime => {
                let args = vec![(**inner).clone(), string(&unit_name(f))];
                let name = if matches!(expr, ast::Expr::Floor { .. }) {
                    "$floor_to"
                } else {
                    "$ceil_to"
                };
                *expr = internal_call(name, args);
            }
            // `INTERVAL '1:30' HOUR TO MINUTE` and the other `X TO Y` day-time forms, which
            // DataFusion's interval parser does not read: the same length in milliseconds.
            ast::Expr::Interval(iv) if iv.last_field.is_some() => {
                if let Ok(ms) = crate::parser::interval_ms(expr) {
                    *expr = ast::Expr::Interval(ast::Interval {
                        value: Box::new(string(&format!("{ms} milliseconds"))),
                        leading_field: None,
                        leading_precision: None,
                        last_field: None,
                        fractional_seconds_precision: None,
                    });
                }
            }
            // `INTERVAL '1' HOUR * 2` / `2 * INTERVAL '1' HOUR` with an integer literal: the
            // scaled day-time interval (DataFusion has no interval-by-number product).
            ast::Expr::BinaryOp {
                left,
                op: ast::BinaryOperator::Multiply,
                right,
            } => {
                let scaled = match (left.as_ref(), right.as_ref()) {
                    (iv @ ast::Expr::Interval(_), n) | (n, iv @ ast::Expr::Interval(_)) => {
                        scaled_interval(iv, n)
                    }
                    _ => None,
                };
                if let Some(iv) = scaled {
                    *expr = iv;
                }
            }
            // LIKE's escape character: Flink has none unless `ESCAPE 'c'` names one, while
            // DataFusion's LIKE always takes `\` as one. So the pattern is spelt for
            // DataFusion: with `c` turned into `\` and a literal `\` doubled
            // (`with_backslash_escapes`); a pattern that is not a literal gets its
            // backslashes doubled at run time when there is no ESCAPE.
            ast::Expr::Like {
                pattern,
                escape_char,
                ..
            } => {
                let escape = match escape_char.as_ref().map(|e| &e.value) {
                    None => Some(None),
                    Some(Value::SingleQuotedString(c)) if c.chars().count() == 1 => {
                        Some(c.chars().next())
                    }
                    _ => None,
                };
                match (escape, pattern.as_mut()) {
                    (Some(escape), ast::Expr::Value(v)) => {
                        if let Value::SingleQuotedString(text) = &mut v.value {
                            *text = with_backslash_escapes(text, escape);
                            *escape_char = None;
                        }
                    }
                    (Some(None), other) => {
                        let args = vec![other.clone(), string("\\"), string("\\\\")];
                        *other = call("replace", args, None);
                    }
                    _ => {}
                }
            }
            // `GROUPING(a, ...)` and `GROUPING_ID(a, ...)`: DataFusion's `grouping` (a bit
            // per argument, the first the highest), as Flink's BIGINT.
            ast::Expr::Function(f)
                if matches!(
                    f.name.to_string().to_ascii_lowercase().as_str(),
                    "grouping" | "grouping_id"
                ) && f.over.is_none() =>
            {
                let mut g = f.clone();
                g.name = ObjectName::from(vec![Ident::new("grouping")]);
                *expr = ast::Expr::Cast {
                    kind: ast::CastKind::Cast,
                    expr: Box::new(ast::Expr::Function(g)),
                    data_type: ast::DataType::BigInt(None),
                    array: false,
                    format: None,
                };
            }
            // Flink's binary types (`BYTES`, `VARBINARY(n)`, `BINARY(n)`) in a CAST are
            // DataFusion's `BYTEA`; `CAST(NULL AS BITMAP)` is a NULL BITMAP.
            ast::Expr::Cast { data_type, .. } if is_binary_type(data_type) => {
                *data_type = ast::DataType::Bytea;
            }
            ast::Expr::Cast {
                expr: inner,
                data_type,
                ..
            } if custom_type_is(data_type, "BITMAP")
                && matches!(inner.as_ref(), ast::Expr::Value(v) if matches!(v.value, Value::Null)) =>
            {
                let null_bytes = ast::Expr::Cast {
                    kind: ast::CastKind::Cast,
                    expr: inner.clone(),
                    data_type: ast::DataType::Bytea,
                    array: false,
                    format: None,
                };
                *expr = call("bitmap_from_bytes", vec![null_bytes], None);
            }
            // `ARRAY[a, ...]` as the `$array` call it is planned as anyway: DataFusion plans
            // an array literal's elements without the outer query, so `UNNEST(ARRAY[c])`
            // could not read the row's column `c`. (An empty one is refused by
            // `functions::planner`.)
            ast::Expr::Array(a) if !a.elem.is_empty() => {
                *expr = internal_call("$array", a.elem.clone());
            }
            // A number with an exponent is a DOUBLE (Calcite); other numbers with a point
            // are DECIMAL (the planner parses them so).
            ast::Expr::Value(v) if matches!(&v.value, Value::Number(n, _) if n.contains(['e', 'E'])) =>
            {
                *expr = ast::Expr::Cast {
                    kind: ast::CastKind::Cast,
                    expr: Box::new(expr.clone()),
                    data_type: ast::DataType::Double(ast::ExactNumberInfo::None),
                    array: false,
                    format: None,
                };
            }
            ast::Expr::Function(f)
                if f.over.is_none()
                    && matches!(
                        f.name.to_string().to_ascii_lowercase().as_str(),
                        "json_object" | "json_array" | "json_objectagg" | "json_arrayagg"
                    ) =>
            {
                if let Some(call) = json_constructor(f) {
                    *expr = call;
                }
            }
            ast::Expr::Function(f) if plain_args(f).is_some() => {
                let name = f.name.to_string().to_ascii_lowercase();
                let args = plain_args(f).unwrap_or_default();
                match (name.as_str(), args.len()) {
                    ("if", 3) => {
                        *expr = ast::Expr::Case {
                            case_token: AttachedToken::empty(),
                            end_token: AttachedToken::empty(),
                            operand: None,
                            conditions: vec![ast::CaseWhen {
                                condition: args[0].clone(),
                                result: args[1].clone(),
                            }],
                            else_result: Some(Box::new(args[2].clone())),
                        };
                        return ControlFlow::Continue(());
                    }
                    // NULLIF(a, b) has a's type (Flink); DataFusion's takes the common type.
                    ("nullif", 2) => {
                        *expr = ast::Expr::Case {
                            case_token: AttachedToken::empty(),
                            end_token: AttachedToken::empty(),
                            operand: None,
                            conditions: vec![ast::CaseWhen {
                                condition: ast::Expr::BinaryOp {
                                    left: Box::new(args[0].clone()),
                                    op: ast::BinaryOperator::Eq,
                                    right: Box::new(args[1].clone()),
                                },
                                result: ast::Expr::Value(Value::Null.into()),
                            }],
                            else_result: Some(Box::new(args[0].clone())),
                        };
                        return ControlFlow::Continue(());
                    }
                    ("ifnull", 2) => {
                        *expr = call("coalesce", args, None);
                        return ControlFlow::Continue(());
                    }
                    ("greatest" | "least", n) if n > 0 => {
                        let any_null = args
                            .iter()
                            .map(|a| ast::Expr::IsNull(Box::new(a.clone())))
                            .reduce(|a, b| ast::Expr::BinaryOp {
                                left: Box::new(a),
                                op: ast::BinaryOperator::Or,
                                right: Box::new(b),
                            })
                            .expect("n > 0");
                        *expr = ast::Expr::Case {
                            case_token: AttachedToken::empty(),
                            end_token: AttachedToken::empty(),
                            operand: None,
                            conditions: vec![ast::CaseWhen {
                                condition: any_null,
                                result: ast::Expr::Value(Value::Null.into()),
                            }],
                            else_result: Some(Box::new(call(&name, args, Some('"')))),
                        };
                        if let ast::Expr::Case {
                            else_result: Some(e),
                            ..
                        } = expr
                        {
                            if let ast::Expr::Function(g) = e.as_mut() {
                                g.name = ObjectName::from(vec![Ident::with_quote(
                                    '"',
                                    format!("${name}"),
                                )]);
                            }
                        }
                        return ControlFlow::Continue(());
                    }
                    _ => {}
                }
                if name == "timestampadd" || name == "timestampdiff" {
                    if let FunctionArguments::List(list) = &mut f.args {
                        if let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(
                            ast::Expr::Identifier(unit),
                        ))) = list.args.first_mut()
                        {
                            let unit = unit.value.to_ascii_uppercase();
                            list.args[0] =
                                FunctionArg::Unnamed(FunctionArgExpr::Expr(string(&unit)));
                        }
                    }
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// Flink's binary types: `BYTES`, `VARBINARY(n)`, `BINARY(n)`.
fn is_binary_type(t: &ast::DataType) -> bool {
    matches!(
        t,
        ast::DataType::Bytes(_) | ast::DataType::Varbinary(_) | ast::DataType::Binary(_)
    ) || custom_type_is(t, "BYTES")
}

/// Whether `t` is the type `name` that sqlparser does not know (`BITMAP`).
fn custom_type_is(t: &ast::DataType, name: &str) -> bool {
    matches!(t, ast::DataType::Custom(n, _) if n.to_string().eq_ignore_ascii_case(name))
}

/// Rewrites Flink's function syntax in a query.
pub(crate) fn rewrite_query(query: &mut ast::Query) {
    let _ = query.visit(&mut FlinkSyntax);
}

/// Rewrites Flink's function syntax in one expression.
pub(crate) fn rewrite_expr(expr: &mut ast::Expr) {
    let _ = expr.visit(&mut FlinkSyntax);
}
