//! Flink's arithmetic functions (Flink docs: System (Built-in) Functions > Arithmetic
//! Functions) whose result types or values differ from DataFusion's same-named ones:
//! `LOG(x)` is the natural logarithm (DataFusion: base 10), `ROUND`, `TRUNCATE`, `CEIL`,
//! `FLOOR`, `SIGN` and `MOD` keep an integer argument's type (DataFusion: DOUBLE).

use std::sync::Arc;

use datafusion_common::arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray};
use datafusion_common::arrow::compute::cast;
use datafusion_common::arrow::datatypes::{
    ArrowPrimitiveType, DataType, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, Int8Type,
};
use datafusion_common::{exec_err, plan_err, Result};

use super::rows::{float_rows, floats, int_at, ints, string_rows, strs};
use super::udf::{Arg, Call, Def};
use crate::returns;

use Arg::{Float, Int, Number, Str};

/// The functions of this module.
pub(crate) const FUNCTIONS: &[Def] = &[
    Def::new(
        "log",
        &[&[Float], &[Float, Float]],
        returns!(DataType::Float64),
        log,
    ),
    Def::new("e", &[&[]], returns!(DataType::Float64), e),
    Def::new("sqrt", &[&[Float]], returns!(DataType::Float64), sqrt),
    Def::new("round", &[&[Number], &[Number, Int]], round_type, round),
    Def::new(
        "truncate",
        &[&[Number], &[Number, Int]],
        round_type,
        truncate,
    ),
    Def::new("ceil", &[&[Number]], integral_type, ceil),
    Def::new("ceiling", &[&[Number]], integral_type, ceil),
    Def::new("floor", &[&[Number]], integral_type, floor),
    Def::new("sign", &[&[Number]], sign_type, sign),
    Def::new("abs", &[&[Number]], sign_type, abs),
    Def::new("mod", &[&[Number, Number]], mod_type, modulo),
    Def::new("bin", &[&[Int]], returns!(DataType::Utf8), bin),
    Def::new("hex", &[&[Int], &[Str]], returns!(DataType::Utf8), hex),
];

/// `LOG(x)`: natural logarithm; `LOG(b, x)`: logarithm of `x` to base `b`.
fn log(c: &Call) -> Result<ArrayRef> {
    let a = floats(&c.args[0]);
    let b = c.args.get(1).map(floats);
    Ok(float_rows(c.rows, |i| {
        if a.is_null(i) {
            return None;
        }
        match b {
            None => Some(a.value(i).ln()),
            Some(x) if x.is_null(i) => None,
            Some(x) => Some(x.value(i).ln() / a.value(i).ln()),
        }
    }))
}

/// `SQRT(x)`: NaN for a negative `x` (Java's `Math.sqrt`).
fn sqrt(c: &Call) -> Result<ArrayRef> {
    let a = floats(&c.args[0]);
    Ok(float_rows(c.rows, |i| {
        (!a.is_null(i)).then(|| a.value(i).sqrt())
    }))
}

fn e(c: &Call) -> Result<ArrayRef> {
    Ok(float_rows(c.rows, |_| Some(std::f64::consts::E)))
}

/// `ROUND(x [, d])` / `TRUNCATE(x [, d])`: the type of `x`; a DECIMAL(p, s) becomes
/// DECIMAL(p - s + d + 1, d) for a constant `d < s` (Flink).
fn round_type(t: &[DataType], s: &[Option<&datafusion_common::ScalarValue>]) -> Result<DataType> {
    match &t[0] {
        DataType::Decimal128(p, scale) => {
            let d = match s.get(1) {
                Some(Some(v)) => (*v)
                    .clone()
                    .cast_to(&DataType::Int64)?
                    .try_into()
                    .unwrap_or(0i64),
                Some(None) => {
                    return plan_err!("ROUND of a DECIMAL takes a constant number of digits")
                }
                None => 0,
            };
            if d >= *scale as i64 {
                return Ok(t[0].clone());
            }
            let d = d.max(0);
            let precision = (*p as i64 - *scale as i64 + d + 1).clamp(1, 38);
            Ok(DataType::Decimal128(precision as u8, d as i8))
        }
        other => Ok(other.clone()),
    }
}

fn digits(c: &Call, i: usize) -> Option<i64> {
    match c.args.get(1) {
        Some(d) => int_at(ints(d), i),
        None => Some(0),
    }
}

/// `x` rounded half away from zero (Java's `RoundingMode.HALF_UP`) to `d` decimal places.
fn round(c: &Call) -> Result<ArrayRef> {
    round_with(
        c,
        |v, f| (v * f).round() / f,
        |v, unit| {
            let r = v % unit;
            let down = v - r;
            if r.abs() * 2 >= unit {
                down + unit * v.signum()
            } else {
                down
            }
        },
    )
}

/// `x` truncated toward zero to `d` decimal places.
fn truncate(c: &Call) -> Result<ArrayRef> {
    round_with(c, |v, f| (v * f).trunc() / f, |v, unit| v - v % unit)
}

fn round_with(
    c: &Call,
    float: fn(f64, f64) -> f64,
    integer: fn(i128, i128) -> i128,
) -> Result<ArrayRef> {
    let x = &c.args[0];
    match x.data_type() {
        DataType::Float64 | DataType::Float32 => {
            let v = cast(x, &DataType::Float64)?;
            let v = v.as_primitive::<Float64Type>();
            let out = float_rows(c.rows, |i| {
                let d = digits(c, i)?;
                if v.is_null(i) {
                    return None;
                }
                let f = 10f64.powi(d as i32);
                let r = float(v.value(i), f);
                // `+ 0.0` turns -0.0 into 0.0, as Java's BigDecimal rounding gives.
                Some(if r.is_finite() { r + 0.0 } else { v.value(i) })
            });
            Ok(cast(&out, x.data_type())?)
        }
        DataType::Decimal128(_, scale) => {
            let v = x.as_primitive::<Decimal128Type>();
            let DataType::Decimal128(p, out_scale) = c.return_type.clone() else {
                return exec_err!("ROUND: a DECIMAL result was expected");
            };
            let out: PrimitiveArray<Decimal128Type> = (0..c.rows)
                .map(|i| {
                    let d = digits(c, i)?;
                    if v.is_null(i) {
                        return None;
                    }
                    let drop = (*scale as i64 - d).clamp(0, 38) as u32;
                    let unit = 10i128.pow(drop);
                    let r = integer(v.value(i), unit);
                    let keep = (*scale - out_scale) as u32;
                    Some(r / 10i128.pow(keep))
                })
                .collect();
            Ok(Arc::new(out.with_precision_and_scale(p, out_scale)?))
        }
        t if t.is_integer() => {
            let v = cast(x, &DataType::Int64)?;
            let v = v.as_primitive::<Int64Type>();
            let out: PrimitiveArray<Int64Type> = (0..c.rows)
                .map(|i| {
                    let d = digits(c, i)?;
                    if v.is_null(i) {
                        return None;
                    }
                    if d >= 0 {
                        return Some(v.value(i));
                    }
                    let unit = 10i128.checked_pow((-d) as u32).unwrap_or(i128::MAX);
                    Some(integer(v.value(i) as i128, unit) as i64)
                })
                .collect();
            Ok(cast(&(Arc::new(out) as ArrayRef), x.data_type())?)
        }
        other => exec_err!("ROUND: unexpected argument type {other}"),
    }
}

/// `CEIL`/`FLOOR`: the type of an integer or floating-point argument; DECIMAL(p, s)
/// becomes DECIMAL(p, 0) (Flink).
fn integral_type(
    t: &[DataType],
    _: &[Option<&datafusion_common::ScalarValue>],
) -> Result<DataType> {
    Ok(match &t[0] {
        DataType::Decimal128(p, _) => DataType::Decimal128(*p, 0),
        other => other.clone(),
    })
}

fn ceil_floor(c: &Call, up: bool) -> Result<ArrayRef> {
    let x = &c.args[0];
    match x.data_type() {
        DataType::Float64 => Ok(float_rows(c.rows, |i| {
            let v = floats(x);
            (!v.is_null(i)).then(|| {
                if up {
                    v.value(i).ceil()
                } else {
                    v.value(i).floor()
                }
            })
        })),
        DataType::Float32 => {
            let v = x.as_primitive::<Float32Type>();
            let out: PrimitiveArray<Float32Type> =
                v.unary(|f| if up { f.ceil() } else { f.floor() });
            Ok(Arc::new(out))
        }
        DataType::Decimal128(_, s) => {
            let v = x.as_primitive::<Decimal128Type>();
            let unit = 10i128.pow(*s as u32);
            let DataType::Decimal128(p, 0) = c.return_type.clone() else {
                return exec_err!("CEIL: a DECIMAL result was expected");
            };
            let out: PrimitiveArray<Decimal128Type> = v.unary(|v| {
                let q = v.div_euclid(unit);
                if up && v.rem_euclid(unit) != 0 {
                    q + 1
                } else {
                    q
                }
            });
            Ok(Arc::new(out.with_precision_and_scale(p, 0)?))
        }
        _ => Ok(Arc::clone(x)),
    }
}

fn ceil(c: &Call) -> Result<ArrayRef> {
    ceil_floor(c, true)
}

fn floor(c: &Call) -> Result<ArrayRef> {
    ceil_floor(c, false)
}

/// `SIGN(x)`: -1, 0 or 1 in the type of `x` (DECIMAL(p, s) → DECIMAL(1, 0)... as Flink).
fn sign_type(t: &[DataType], _: &[Option<&datafusion_common::ScalarValue>]) -> Result<DataType> {
    Ok(t[0].clone())
}

fn signum<T: ArrowPrimitiveType>(x: &ArrayRef, f: fn(T::Native) -> T::Native) -> ArrayRef {
    Arc::new(x.as_primitive::<T>().unary::<_, T>(f))
}

fn sign(c: &Call) -> Result<ArrayRef> {
    let x = &c.args[0];
    Ok(match x.data_type() {
        DataType::Int8 => signum::<Int8Type>(x, |v| v.signum()),
        DataType::Int16 => signum::<Int16Type>(x, |v| v.signum()),
        DataType::Int32 => signum::<Int32Type>(x, |v| v.signum()),
        DataType::Int64 => signum::<Int64Type>(x, |v| v.signum()),
        DataType::Float32 => signum::<Float32Type>(x, |v| if v == 0.0 { 0.0 } else { v.signum() }),
        DataType::Float64 => signum::<Float64Type>(x, |v| if v == 0.0 { 0.0 } else { v.signum() }),
        DataType::Decimal128(p, s) => {
            let unit = 10i128.pow(*s as u32);
            let out = x
                .as_primitive::<Decimal128Type>()
                .unary::<_, Decimal128Type>(|v| v.signum() * unit);
            Arc::new(out.with_precision_and_scale(*p, *s)?)
        }
        other => return exec_err!("SIGN: unexpected argument type {other}"),
    })
}

/// `ABS(x)`: in the type of `x`; the smallest integer stays itself (Java's `Math.abs`
/// wraps; DataFusion's errors).
fn abs(c: &Call) -> Result<ArrayRef> {
    let x = &c.args[0];
    Ok(match x.data_type() {
        DataType::Int8 => signum::<Int8Type>(x, |v| v.wrapping_abs()),
        DataType::Int16 => signum::<Int16Type>(x, |v| v.wrapping_abs()),
        DataType::Int32 => signum::<Int32Type>(x, |v| v.wrapping_abs()),
        DataType::Int64 => signum::<Int64Type>(x, |v| v.wrapping_abs()),
        DataType::Float32 => signum::<Float32Type>(x, |v| v.abs()),
        DataType::Float64 => signum::<Float64Type>(x, |v| v.abs()),
        DataType::Decimal128(p, s) => {
            let out = x
                .as_primitive::<Decimal128Type>()
                .unary::<_, Decimal128Type>(|v| v.wrapping_abs());
            Arc::new(out.with_precision_and_scale(*p, *s)?)
        }
        other => return exec_err!("ABS: unexpected argument type {other}"),
    })
}

/// `MOD(a, b)`: the remainder of `a / b` with the sign of `a` (Java's `%`), in the type of
/// `b` for integers (Calcite's `NULLABLE_MOD`), Flink's DECIMAL type when one is a DECIMAL
/// (computed exactly, not in DOUBLE).
fn mod_type(t: &[DataType], _: &[Option<&datafusion_common::ScalarValue>]) -> Result<DataType> {
    let decimal = |x: &DataType| matches!(x, DataType::Decimal128(_, _));
    let float = |x: &DataType| matches!(x, DataType::Float32 | DataType::Float64);
    if (decimal(&t[0]) || decimal(&t[1])) && !t.iter().any(float) {
        if let Some(d) = super::decimal::modulo_type(&t[0], &t[1]) {
            return Ok(d);
        }
    }
    match (&t[0], &t[1]) {
        (a, b) if a.is_integer() && b.is_integer() => Ok(b.clone()),
        (a, b) => Ok(if a == b { a.clone() } else { DataType::Float64 }),
    }
}

fn modulo(c: &Call) -> Result<ArrayRef> {
    let t = c.return_type;
    if t.is_integer() {
        // In BIGINT: the remainder fits the divisor's type, the dividend need not.
        let (a, b) = (
            cast(&c.args[0], &DataType::Int64)?,
            cast(&c.args[1], &DataType::Int64)?,
        );
        let (a, b) = (ints(&a), ints(&b));
        let mut out = Vec::with_capacity(c.rows);
        for i in 0..c.rows {
            match (int_at(a, i), int_at(b, i)) {
                (Some(_), Some(0)) => return exec_err!("MOD: division by zero"),
                (Some(x), Some(y)) => out.push(Some(x.wrapping_rem(y))),
                _ => out.push(None),
            }
        }
        let out: ArrayRef = Arc::new(PrimitiveArray::<Int64Type>::from(out));
        return Ok(cast(&out, t)?);
    }
    if matches!(t, DataType::Decimal128(_, _)) {
        return super::decimal::modulo(&c.args[0], &c.args[1], t);
    }
    let a = cast(&c.args[0], t)?;
    let b = cast(&c.args[1], t)?;
    Ok(datafusion_common::arrow::compute::kernels::numeric::rem(
        &a, &b,
    )?)
}

/// `BIN(n)`: `n` in binary (two's complement for a negative `n`, as Java's
/// `Long.toBinaryString`).
fn bin(c: &Call) -> Result<ArrayRef> {
    let n = ints(&c.args[0]);
    Ok(string_rows(c.rows, |i| {
        Some(format!("{:b}", int_at(n, i)?))
    }))
}

/// `HEX(n)`: `n` in upper-case hexadecimal (two's complement); `HEX(s)`: the UTF-8 bytes of
/// `s` in upper-case hexadecimal.
fn hex(c: &Call) -> Result<ArrayRef> {
    let a = &c.args[0];
    if matches!(a.data_type(), DataType::Int64) {
        let n = ints(a);
        return Ok(string_rows(c.rows, |i| {
            Some(format!("{:X}", int_at(n, i)?))
        }));
    }
    let s = strs(a);
    Ok(string_rows(c.rows, |i| {
        if s.is_null(i) {
            return None;
        }
        Some(s.value(i).bytes().map(|b| format!("{b:02X}")).collect())
    }))
}
