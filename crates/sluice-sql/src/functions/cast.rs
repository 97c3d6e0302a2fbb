//! `CAST` with Flink's rules where Arrow's cast differs (Flink docs, "Type Conversion
//! Functions" and "Data Types > Casting"):
//! - to STRING: a timestamp is `yyyy-MM-dd HH:mm:ss[.fraction]` with as many fraction
//!   digits as its precision (an LTZ instant in the session time zone), a DOUBLE or FLOAT
//!   is Java's `Double.toString` (`1.0E10`, `0.5`), a BOOLEAN is `TRUE` / `FALSE`;
//! - a floating-point number to an integer saturates (NaN is 0), as Java's `(int)`; an
//!   integer to a narrower integer wraps, as Java's;
//! - a number too large for a DECIMAL(p, s) is NULL;
//! - to TIME: whole seconds (Flink's TIME is TIME(0));
//! - a TIMESTAMP_LTZ to TIMESTAMP or DATE: its wall-clock time in the session time zone.
//! - a ROW to a ROW of other field names: field by field, by position (rows are
//!   structural in Flink: `r = ROW(1, 'one')` compares a `ROW<x, y>` with a
//!   `ROW<EXPR$0, EXPR$1>`);
//! - an ARRAY, MAP, ROW or BITMAP to STRING: `[1, 2]`, `{a=1}`, `(1, one)`, `{1,2}`
//!   ([`nested_texts`]).
//!
//! [`flink_casts`] replaces each such `Expr::Cast` in a planned query by [`FlinkCast`].

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use chrono::{Datelike, Timelike};
use datafusion_common::arrow::array::{Array, ArrayRef, AsArray, Int64Array, StringArray};
use datafusion_common::arrow::compute::{cast, cast_with_options, CastOptions};
use datafusion_common::arrow::datatypes::{
    DataType, Float32Type, Float64Type, Int64Type, TimeUnit,
};
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{DFSchema, Result};
use datafusion_expr::expr::ScalarFunction;
use datafusion_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use sluice_common::time::Tz;

use super::rows::string_rows;

/// Whether casting `from` to `to` follows a Flink rule Arrow's cast lacks.
fn is_flink_rule(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    match (from, to) {
        (
            Timestamp(_, _)
            | Float32
            | Float64
            | Boolean
            | List(_)
            | Map(_, _)
            | Struct(_)
            | LargeBinary,
            Utf8 | LargeUtf8 | Utf8View,
        ) => true,
        (Float32 | Float64, t) if t.is_integer() => true,
        (f, t) if f.is_integer() && t.is_integer() => int_width(t) < int_width(f),
        (f, Decimal128(_, _)) if f.is_numeric() => true,
        (_, Time32(_) | Time64(_)) => true,
        (Timestamp(_, Some(_)), Timestamp(_, None) | Date32) => true,
        // Flink's rows are structural: fields match by position, whatever their names
        // (also inside an ARRAY).
        (Struct(a), Struct(b)) => {
            a.len() == b.len() && a.iter().zip(b.iter()).any(|(x, y)| x.name() != y.name())
        }
        (List(a), List(b)) => is_flink_rule(a.data_type(), b.data_type()),
        _ => false,
    }
}

fn int_width(t: &DataType) -> u32 {
    match t {
        DataType::Int8 | DataType::UInt8 => 8,
        DataType::Int16 | DataType::UInt16 => 16,
        DataType::Int32 | DataType::UInt32 => 32,
        _ => 64,
    }
}

/// `CAST(x AS to)` with Flink's rules; `TRY_CAST` (`try_cast`): a value that does not
/// convert is NULL instead of an error.
pub(crate) struct FlinkCast {
    to: DataType,
    zone: Tz,
    try_cast: bool,
    signature: Signature,
}

impl std::fmt::Debug for FlinkCast {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.name(), self.to)
    }
}
impl PartialEq for FlinkCast {
    fn eq(&self, o: &Self) -> bool {
        self.to == o.to
            && self.try_cast == o.try_cast
            && self.zone.to_string() == o.zone.to_string()
    }
}
impl Eq for FlinkCast {}
impl Hash for FlinkCast {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.to.hash(state);
        self.try_cast.hash(state);
        self.zone.to_string().hash(state);
    }
}

impl ScalarUDFImpl for FlinkCast {
    fn name(&self) -> &str {
        if self.try_cast {
            "$try_cast"
        } else {
            "$cast"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(self.to.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        super::udf::on_arrays(&args, true, |a, _| {
            match flink_cast(&a[0], &self.to, &self.zone) {
                Err(_) if self.try_cast => {
                    // Row by row, to find the values that do not convert.
                    let rows = (0..a[0].len())
                        .map(|i| {
                            flink_cast(&a[0].slice(i, 1), &self.to, &self.zone).or_else(|_| {
                                Ok(datafusion_common::arrow::array::new_null_array(&self.to, 1))
                            })
                        })
                        .collect::<Result<Vec<ArrayRef>>>()?;
                    let refs: Vec<&dyn Array> = rows.iter().map(|r| r.as_ref()).collect();
                    Ok(datafusion_common::arrow::compute::concat(&refs)?)
                }
                other => other,
            }
        })
    }
}

/// Java's `Double.toString` / `Float.toString`: plain between 10^-3 and 10^7 (at least one
/// fraction digit), otherwise `d.dddE[-]n`; the shortest digits that read back.
fn java_float(v: f64, shortest: String) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let a = v.abs();
    if (1e-3..1e7).contains(&a) {
        return if shortest.contains('.') {
            shortest
        } else {
            format!("{shortest}.0")
        };
    }
    // Scientific: Rust's `{:e}` gives `1.234e-5` / `1e10`.
    let sci = shortest;
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let mantissa = if mantissa.contains('.') {
        mantissa.to_string()
    } else {
        format!("{mantissa}.0")
    };
    format!("{mantissa}E{exp}")
}

/// `x` as Java's `Double.toString` writes it.
pub(crate) fn java_double(x: f64) -> String {
    java_text(x, x)
}

/// `x` (an `f64` or an `f32`, whose own shortest digits Java's `Float.toString` uses) as
/// Java writes it; `v` is its value.
fn java_text<T: std::fmt::Display + std::fmt::LowerExp>(x: T, v: f64) -> String {
    let a = v.abs();
    let shortest = if a != 0.0 && !(1e-3..1e7).contains(&a) {
        format!("{x:e}")
    } else {
        format!("{x}")
    };
    java_float(v, shortest)
}

fn flink_cast(a: &ArrayRef, to: &DataType, zone: &Tz) -> Result<ArrayRef> {
    use DataType::*;
    let rows = a.len();
    Ok(match (a.data_type(), to) {
        (Timestamp(unit, tz), Utf8 | LargeUtf8 | Utf8View) => {
            let digits = match unit {
                TimeUnit::Second => 0,
                TimeUnit::Millisecond => 3,
                TimeUnit::Microsecond => 6,
                TimeUnit::Nanosecond => 9,
            };
            let nanos = cast(a, &Timestamp(TimeUnit::Nanosecond, None))?;
            let nanos = nanos
                .as_primitive::<datafusion_common::arrow::datatypes::TimestampNanosecondType>();
            let out = string_rows(rows, |i| {
                if nanos.is_null(i) {
                    return None;
                }
                let mut ns = nanos.value(i);
                if tz.is_some() {
                    let ms = ns.div_euclid(1_000_000);
                    ns += (sluice_common::time::utc_to_local_ms(zone, ms) - ms) * 1_000_000;
                }
                let t = chrono::DateTime::from_timestamp_nanos(ns).naive_utc();
                let mut s = format!(
                    "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
                    t.year(),
                    t.month(),
                    t.day(),
                    t.hour(),
                    t.minute(),
                    t.second()
                );
                if digits > 0 {
                    let frac = format!("{:09}", t.nanosecond());
                    s.push('.');
                    s.push_str(&frac[..digits]);
                }
                Some(s)
            });
            cast(&out, to)?
        }
        (Float64, Utf8 | LargeUtf8 | Utf8View) => {
            let v = a.as_primitive::<Float64Type>();
            let out = string_rows(rows, |i| (!v.is_null(i)).then(|| java_double(v.value(i))));
            cast(&out, to)?
        }
        (Float32, Utf8 | LargeUtf8 | Utf8View) => {
            let v = a.as_primitive::<Float32Type>();
            let out = string_rows(rows, |i| {
                (!v.is_null(i)).then(|| java_text(v.value(i), v.value(i) as f64))
            });
            cast(&out, to)?
        }
        (List(_), List(item)) => {
            let list = a.as_list::<i32>();
            let values = member_cast(list.values(), item.data_type(), zone)?;
            Arc::new(datafusion_common::arrow::array::ListArray::try_new(
                Arc::clone(item),
                list.offsets().clone(),
                values,
                list.nulls().cloned(),
            )?)
        }
        (Struct(_), Struct(fields)) => {
            let s = a.as_struct();
            let columns = s
                .columns()
                .iter()
                .zip(fields.iter())
                .map(|(c, f)| member_cast(c, f.data_type(), zone))
                .collect::<Result<Vec<_>>>()?;
            Arc::new(datafusion_common::arrow::array::StructArray::try_new(
                fields.clone(),
                columns,
                s.nulls().cloned(),
            )?)
        }
        (List(_) | Map(_, _) | Struct(_) | LargeBinary, Utf8 | LargeUtf8 | Utf8View) => {
            let texts = nested_texts(a, zone)?;
            cast(
                &(Arc::new(texts.into_iter().collect::<StringArray>()) as ArrayRef),
                to,
            )?
        }
        (Boolean, Utf8 | LargeUtf8 | Utf8View) => {
            let v = a.as_boolean();
            let out = string_rows(rows, |i| {
                (!v.is_null(i)).then(|| if v.value(i) { "TRUE" } else { "FALSE" }.to_string())
            });
            cast(&out, to)?
        }
        (f, t) if (f.is_integer() || f.is_floating()) && t.is_integer() => java_integer(a, t)?,
        (_, Decimal128(_, _)) => cast_with_options(
            a,
            to,
            &CastOptions {
                safe: true,
                ..Default::default()
            },
        )?,
        (Timestamp(_, Some(_)), Timestamp(_, None) | Date32) => {
            // The instant's wall-clock time in the session time zone.
            let local = (0..rows)
                .map(|i| super::temporal::local_micros(a, i, zone))
                .collect();
            super::temporal::instant_rows(to, local)?
        }
        (_, Time32(_) | Time64(_)) => {
            let t = cast(a, to)?;
            let secs = cast(&cast(&t, &Time32(TimeUnit::Second))?, to)?;
            secs
        }
        _ => cast(a, to)?,
    })
}

/// A member of a ROW or ARRAY cast: by Flink's rule where one applies, else by Arrow's
/// cast, failing on a value that does not convert (as a top-level `CAST` does).
fn member_cast(a: &ArrayRef, to: &DataType, zone: &Tz) -> Result<ArrayRef> {
    if a.data_type() == to {
        return Ok(Arc::clone(a));
    }
    if is_flink_rule(a.data_type(), to) {
        return flink_cast(a, to, zone);
    }
    let strict = CastOptions {
        safe: false,
        ..Default::default()
    };
    Ok(cast_with_options(a, to, &strict)?)
}

/// Each value of an `ARRAY`, `MAP`, `ROW` or `BITMAP` column as Flink's `CAST(... AS
/// STRING)` writes it: `[1, 2]`, `{a=1, b=2}`, `(1, one)`, `{1,2}`; members as they cast to
/// STRING, a NULL member as `NULL`; `None` for a NULL value.
pub fn nested_texts(a: &ArrayRef, zone: &Tz) -> Result<Vec<Option<String>>> {
    use DataType::*;
    let member_texts = |m: &ArrayRef| -> Result<Vec<String>> {
        let t = flink_cast(m, &Utf8, zone)?;
        let t = t.as_string::<i32>();
        Ok((0..t.len())
            .map(|i| {
                if t.is_null(i) {
                    "NULL".to_string()
                } else {
                    t.value(i).to_string()
                }
            })
            .collect())
    };
    let rows = a.len();
    let mut out = Vec::with_capacity(rows);
    match a.data_type() {
        List(_) => {
            let l = a.as_list::<i32>();
            let o = l.value_offsets();
            // Only this slice's members (a sliced list keeps its whole child array).
            let first = o[0] as usize;
            let members = member_texts(&l.values().slice(first, o[rows] as usize - first))?;
            for i in 0..rows {
                out.push((!l.is_null(i)).then(|| {
                    let (from, to) = (o[i] as usize - first, o[i + 1] as usize - first);
                    format!("[{}]", members[from..to].join(", "))
                }));
            }
        }
        Map(_, _) => {
            let m = a.as_map();
            let o = m.value_offsets();
            let first = o[0] as usize;
            let n = o[rows] as usize - first;
            let keys = member_texts(&m.keys().slice(first, n))?;
            let values = member_texts(&m.values().slice(first, n))?;
            for i in 0..rows {
                out.push((!m.is_null(i)).then(|| {
                    let entries: Vec<String> = (o[i] as usize - first..o[i + 1] as usize - first)
                        .map(|e| format!("{}={}", keys[e], values[e]))
                        .collect();
                    format!("{{{}}}", entries.join(", "))
                }));
            }
        }
        Struct(_) => {
            let s = a.as_struct();
            let columns = s
                .columns()
                .iter()
                .map(member_texts)
                .collect::<Result<Vec<_>>>()?;
            for i in 0..rows {
                out.push((!s.is_null(i)).then(|| {
                    let fields: Vec<&str> = columns.iter().map(|c| c[i].as_str()).collect();
                    format!("({})", fields.join(", "))
                }));
            }
        }
        LargeBinary => {
            for v in a.as_binary::<i64>().iter() {
                out.push(v.map(super::bitmap::bitmap_text).transpose()?);
            }
        }
        other => {
            return datafusion_common::exec_err!("{other} is not an ARRAY, MAP, ROW or BITMAP")
        }
    }
    Ok(out)
}

/// Row `i` of `a` as Flink's `CAST(... AS STRING)` text (a map key in JSON).
pub(crate) fn flink_cast_to_string(a: &ArrayRef, i: usize) -> Result<String> {
    let utc: Tz = "UTC".parse()?;
    let t = flink_cast(&a.slice(i, 1), &DataType::Utf8, &utc)?;
    let t = t.as_string::<i32>();
    Ok(if t.is_null(0) {
        "null".to_string()
    } else {
        t.value(0).to_string()
    })
}

pub(crate) use sluice_common::numeric::wrap_to;

/// Integers or floating-point numbers to the integer type `t` as Java converts them: a
/// floating-point number saturates (`(long)` for BIGINT, `(int)` then narrowing for the
/// others; NaN is 0), an integer keeps its low bits.
pub(crate) fn java_integer(a: &ArrayRef, t: &DataType) -> Result<ArrayRef> {
    let wide: Int64Array = if a.data_type().is_floating() {
        let v = cast(a, &DataType::Float64)?;
        v.as_primitive::<Float64Type>()
            .iter()
            .map(|x| {
                x.map(|x| {
                    if *t == DataType::Int64 {
                        x as i64
                    } else {
                        x as i32 as i64
                    }
                })
            })
            .collect()
    } else {
        cast(a, &DataType::Int64)?
            .as_primitive::<Int64Type>()
            .clone()
    };
    let wrapped: Int64Array = wide.iter().map(|x| x.map(|x| wrap_to(x, t))).collect();
    Ok(cast(&wrapped, t)?)
}

/// One expression over `schema` with its Flink-rule casts replaced.
fn casts_in(e: Expr, schema: &DFSchema, zone: Tz) -> Result<Transformed<Expr>> {
    let call = |x: Box<Expr>, to: &DataType, try_cast: bool| {
        let udf = ScalarUDF::new_from_impl(FlinkCast {
            to: to.clone(),
            zone,
            try_cast,
            signature: Signature::any(1, Volatility::Immutable),
        });
        Ok(Transformed::yes(Expr::ScalarFunction(
            ScalarFunction::new_udf(Arc::new(udf), vec![*x]),
        )))
    };
    e.transform_up(|e| match e {
        // TRY_CAST of a ROW (or an ARRAY of them) by position.
        Expr::TryCast(c)
            if matches!(c.field.data_type(), DataType::Struct(_) | DataType::List(_))
                && is_flink_rule(&c.expr.get_type(schema)?, c.field.data_type()) =>
        {
            call(c.expr, c.field.data_type(), true)
        }
        Expr::Cast(c) if is_flink_rule(&c.expr.get_type(schema)?, c.field.data_type()) => {
            call(c.expr, c.field.data_type(), false)
        }
        other => Ok(Transformed::no(other)),
    })
}

/// [`flink_casts`] for one expression (a computed column) over `schema`.
pub(crate) fn flink_casts_in_expr(e: Expr, schema: &DFSchema, zone: Tz) -> Result<Expr> {
    casts_in(e, schema, zone).map(|t| t.data)
}

/// Replaces the casts of a planned query that follow a Flink rule by [`FlinkCast`] (output
/// names kept: [`super::rewrite`]).
pub(crate) fn flink_casts(plan: LogicalPlan, zone: Tz) -> Result<LogicalPlan> {
    super::rewrite::rewrite_plan(plan, &|e, schema| casts_in(e, schema, zone))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_as_java_does() {
        let j = java_double;
        assert_eq!(j(1e10), "1.0E10");
        assert_eq!(j(0.5), "0.5");
        assert_eq!(j(3.0), "3.0");
        assert_eq!(j(1.234e-5), "1.234E-5");
        assert_eq!(j(-2.5e7), "-2.5E7");
        assert_eq!(j(1234567.0), "1234567.0");
    }
}
