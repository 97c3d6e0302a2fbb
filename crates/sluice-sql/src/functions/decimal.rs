//! DECIMAL arithmetic with Flink's result types and rounding (Flink's
//! `LogicalTypeMerging.find{Addition,Multiplication,Division,Modulo}DecimalType`; values are
//! Java `BigDecimal` results rounded half up to the result scale, NULL when they do not fit
//! the result precision). DataFusion's rules give other scales (DECIMAL(10, 3) / INT is
//! DECIMAL(21, 14) in Flink and has fewer digits in DataFusion). An integer operand is the
//! DECIMAL Flink makes of it: TINYINT (3, 0), SMALLINT (5, 0), INT (10, 0), BIGINT (19, 0).
//!
//! [`flink_decimals`] replaces each `+ - * / %` of two DECIMAL operands (after DataFusion's
//! type coercion) by [`DecimalOp`].

use std::sync::Arc;

use datafusion_common::arrow::array::{Array, ArrayRef, AsArray, Decimal128Array};
use datafusion_common::arrow::datatypes::{i256, DataType, Decimal128Type};
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{exec_err, DFSchema, Result};
use datafusion_expr::expr::{BinaryExpr, ScalarFunction};
use datafusion_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};

const MAX_PRECISION: i32 = 38;
/// Flink's `MINIMUM_ADJUSTED_SCALE`.
const MIN_ADJUSTED_SCALE: i32 = 6;

/// Flink's `adjustPrecisionScale`: a precision above 38 keeps the integer digits and
/// gives up scale, down to 6 digits.
fn adjust(precision: i32, scale: i32) -> (u8, i8) {
    if precision <= MAX_PRECISION {
        return (precision.max(1) as u8, scale as i8);
    }
    let digits = precision - scale;
    let scale = (MAX_PRECISION - digits).max(scale.min(MIN_ADJUSTED_SCALE));
    (MAX_PRECISION as u8, scale as i8)
}

/// The result type of `(p1, s1) op (p2, s2)`.
fn result_type(op: Operator, (p1, s1): (i32, i32), (p2, s2): (i32, i32)) -> (u8, i8) {
    match op {
        Operator::Plus | Operator::Minus => {
            let scale = s1.max(s2);
            adjust((p1 - s1).max(p2 - s2) + scale + 1, scale)
        }
        Operator::Multiply => adjust(p1 + p2 + 1, s1 + s2),
        Operator::Divide => {
            let scale = MIN_ADJUSTED_SCALE.max(s1 + p2 + 1);
            adjust(p1 - s1 + s2 + scale, scale)
        }
        _ => {
            let scale = s1.max(s2);
            adjust((p1 - s1).min(p2 - s2) + scale, scale)
        }
    }
}

/// The DECIMAL type DataFusion's type coercion gives an integer (an implicit cast to it
/// stands for Flink's own DECIMAL of that integer).
fn coerced_integer(t: &DataType) -> Option<DataType> {
    Some(match t {
        DataType::Int8 => DataType::Decimal128(3, 0),
        DataType::Int16 => DataType::Decimal128(5, 0),
        DataType::Int32 => DataType::Decimal128(10, 0),
        DataType::Int64 => DataType::Decimal128(20, 0),
        _ => return None,
    })
}

/// The DECIMAL type Flink gives an operand.
fn flink_decimal(e: &Expr, schema: &DFSchema) -> Result<Option<(i32, i32)>> {
    let inner = match e {
        // Only DataFusion's coercion of an integer; a user's CAST keeps its type.
        Expr::Cast(c) => {
            let inner = c.expr.get_type(schema)?;
            if coerced_integer(&inner).as_ref() == Some(c.field.data_type()) {
                inner
            } else {
                c.field.data_type().clone()
            }
        }
        other => other.get_type(schema)?,
    };
    Ok(match inner {
        DataType::Int8 => Some((3, 0)),
        DataType::Int16 => Some((5, 0)),
        DataType::Int32 => Some((10, 0)),
        DataType::Int64 => Some((19, 0)),
        DataType::Decimal128(p, s) => Some((p as i32, s as i32)),
        _ => match e.get_type(schema)? {
            DataType::Decimal128(p, s) => Some((p as i32, s as i32)),
            _ => None,
        },
    })
}

/// `a op b` on DECIMALs, Flink's way.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct DecimalOp {
    op: Operator,
    result: (u8, i8),
    signature: Signature,
}

impl ScalarUDFImpl for DecimalOp {
    fn name(&self) -> &str {
        match self.op {
            Operator::Plus => "$decimal_plus",
            Operator::Minus => "$decimal_minus",
            Operator::Multiply => "$decimal_multiply",
            Operator::Divide => "$decimal_divide",
            _ => "$decimal_modulo",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Decimal128(self.result.0, self.result.1))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        // Planned before type coercion, an operand may be an integer: its DECIMAL.
        let as_decimal = |x: &ArrayRef| -> Result<ArrayRef> {
            Ok(match x.data_type() {
                DataType::Decimal128(_, _) => Arc::clone(x),
                _ => datafusion_common::arrow::compute::cast(x, &DataType::Decimal128(38, 0))?,
            })
        };
        super::udf::on_arrays(&args, true, |a, _| {
            self.apply(&as_decimal(&a[0])?, &as_decimal(&a[1])?)
        })
    }
}

fn pow10(k: u32) -> Option<i256> {
    i256::from_i128(10).checked_pow(k)
}

/// `v / 10^k` rounded half away from zero.
fn round_down_digits(v: i256, k: u32) -> Option<i256> {
    if k == 0 {
        return Some(v);
    }
    let d = pow10(k)?;
    let q = v.checked_div(d)?;
    let r = v.checked_rem(d)?;
    let twice = r.wrapping_abs().checked_mul(i256::from_i128(2))?;
    Some(if twice >= d {
        q.checked_add(v.signum())?
    } else {
        q
    })
}

/// `v` (at scale `from`) at scale `to`, rounded half up when digits are dropped.
fn rescale(v: i256, from: i32, to: i32) -> Option<i256> {
    if to >= from {
        v.checked_mul(pow10((to - from) as u32)?)
    } else {
        round_down_digits(v, (from - to) as u32)
    }
}

impl DecimalOp {
    fn apply(&self, a: &ArrayRef, b: &ArrayRef) -> Result<ArrayRef> {
        let (p, s) = self.result;
        let (DataType::Decimal128(_, sa), DataType::Decimal128(_, sb)) =
            (a.data_type(), b.data_type())
        else {
            return exec_err!(
                "DECIMAL arithmetic over {} and {}",
                a.data_type(),
                b.data_type()
            );
        };
        let (sa, sb, s) = (*sa as i32, *sb as i32, s as i32);
        let (av, bv) = (
            a.as_primitive::<Decimal128Type>(),
            b.as_primitive::<Decimal128Type>(),
        );
        let limit = pow10(p as u32).expect("10^38 fits i256");
        let mut out = Vec::with_capacity(a.len());
        for i in 0..a.len() {
            if av.is_null(i) || bv.is_null(i) {
                out.push(None);
                continue;
            }
            let (x, y) = (i256::from_i128(av.value(i)), i256::from_i128(bv.value(i)));
            let r = match self.op {
                Operator::Plus | Operator::Minus | Operator::Modulo => {
                    let common = sa.max(sb);
                    let (x, y) = (rescale(x, sa, common), rescale(y, sb, common));
                    let (Some(x), Some(y)) = (x, y) else {
                        out.push(None);
                        continue;
                    };
                    let r = match self.op {
                        Operator::Plus => x.checked_add(y),
                        Operator::Minus => x.checked_sub(y),
                        _ if y == i256::ZERO => return exec_err!("DECIMAL modulo by zero"),
                        _ => x.checked_rem(y),
                    };
                    r.and_then(|r| rescale(r, common, s))
                }
                Operator::Multiply => x.checked_mul(y).and_then(|r| rescale(r, sa + sb, s)),
                _ => {
                    if y == i256::ZERO {
                        return exec_err!("DECIMAL division by zero");
                    }
                    // x / y at scale s: (x * 10^(s + sb - sa + 1)) / y, then round the
                    // extra digit half up.
                    let k = s + sb - sa + 1;
                    let num = if k >= 0 {
                        pow10(k as u32).and_then(|f| x.checked_mul(f))
                    } else {
                        round_down_digits(x, (-k) as u32)
                    };
                    num.and_then(|n| n.checked_div(y))
                        .and_then(|q| round_down_digits(q, 1))
                }
            };
            out.push(
                r.filter(|r| r.wrapping_abs() < limit)
                    .and_then(|r| r.to_i128()),
            );
        }
        let out = Decimal128Array::from(out).with_precision_and_scale(p, s as i8)?;
        Ok(Arc::new(out))
    }
}

/// `e` cast from a floating-point type to a DECIMAL: the floating-point expression.
fn float_cast_to_decimal(e: &Expr, schema: &DFSchema) -> Result<Option<Expr>> {
    if let Expr::Cast(c) = e {
        if matches!(c.field.data_type(), DataType::Decimal128(_, _))
            && matches!(
                c.expr.get_type(schema)?,
                DataType::Float32 | DataType::Float64
            )
        {
            return Ok(Some((*c.expr).clone()));
        }
    }
    Ok(None)
}

/// `MOD(a, b)` with a DECIMAL argument: the result type (`a`, `b` as Flink types them:
/// an integer as its DECIMAL).
pub(crate) fn modulo_type(a: &DataType, b: &DataType) -> Option<DataType> {
    let flink = |t: &DataType| match t {
        DataType::Decimal128(p, s) => Some((*p as i32, *s as i32)),
        DataType::Int8 => Some((3, 0)),
        DataType::Int16 => Some((5, 0)),
        DataType::Int32 => Some((10, 0)),
        DataType::Int64 => Some((19, 0)),
        _ => None,
    };
    let (p, s) = result_type(Operator::Modulo, flink(a)?, flink(b)?);
    Some(DataType::Decimal128(p, s))
}

/// `MOD(a, b)` of DECIMALs (integers cast to DECIMAL) into `result`.
pub(crate) fn modulo(a: &ArrayRef, b: &ArrayRef, result: &DataType) -> Result<ArrayRef> {
    let DataType::Decimal128(p, s) = result else {
        return exec_err!("MOD: a DECIMAL result was expected, found {result}");
    };
    let as_decimal = |x: &ArrayRef| -> Result<ArrayRef> {
        Ok(match x.data_type() {
            DataType::Decimal128(_, _) => Arc::clone(x),
            _ => datafusion_common::arrow::compute::cast(x, &DataType::Decimal128(38, 0))?,
        })
    };
    let op = DecimalOp {
        op: Operator::Modulo,
        result: (*p, *s),
        signature: Signature::any(2, Volatility::Immutable),
    };
    op.apply(&as_decimal(a)?, &as_decimal(b)?)
}

/// One expression with its DECIMAL arithmetic replaced, and DECIMAL compared with DOUBLE
/// as DOUBLE (Flink; DataFusion casts the DOUBLE to DECIMAL, which a large DOUBLE does not
/// fit).
fn decimals_in(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    e.transform_up(|e| match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(
                op,
                Operator::Eq
                    | Operator::NotEq
                    | Operator::Lt
                    | Operator::LtEq
                    | Operator::Gt
                    | Operator::GtEq
                    | Operator::IsDistinctFrom
                    | Operator::IsNotDistinctFrom
            ) =>
        {
            let (l, r) = (
                float_cast_to_decimal(&left, schema)?,
                float_cast_to_decimal(&right, schema)?,
            );
            let double = |e: Expr| e.cast_to(&DataType::Float64, schema);
            Ok(match (l, r) {
                (Some(l), None) => Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(l),
                    op,
                    Box::new(double(*right)?),
                ))),
                (None, Some(r)) => Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(double(*left)?),
                    op,
                    Box::new(r),
                ))),
                _ => Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op, right })),
            })
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(
                op,
                Operator::Plus
                    | Operator::Minus
                    | Operator::Multiply
                    | Operator::Divide
                    | Operator::Modulo
            ) =>
        {
            // Both DECIMAL after type coercion; before it (the first pass, so that what
            // consumes the result is coerced for Flink's type), a DECIMAL and an integer.
            let (lt, rt) = (left.get_type(schema)?, right.get_type(schema)?);
            let decimal = |t: &DataType| matches!(t, DataType::Decimal128(_, _));
            let both_decimal = (decimal(&lt) || lt.is_integer())
                && (decimal(&rt) || rt.is_integer())
                && (decimal(&lt) || decimal(&rt));
            let types = (
                flink_decimal(&left, schema)?,
                flink_decimal(&right, schema)?,
            );
            match (both_decimal, types) {
                (true, (Some(l), Some(r))) => {
                    let udf = ScalarUDF::new_from_impl(DecimalOp {
                        op,
                        result: result_type(op, l, r),
                        signature: Signature::any(2, Volatility::Immutable),
                    });
                    Ok(Transformed::yes(Expr::ScalarFunction(
                        ScalarFunction::new_udf(Arc::new(udf), vec![*left, *right]),
                    )))
                }
                _ => Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr {
                    left,
                    op,
                    right,
                }))),
            }
        }
        other => Ok(Transformed::no(other)),
    })
}

/// [`decimals_in`], then DataFusion's type coercion again where something changed: an
/// operation now has Flink's result type, which what consumes its value was not coerced
/// for (`0.908 * price > 1000000` compares a DECIMAL(22, 3) with the DECIMAL that
/// DataFusion's product type was coerced against; Arrow compares only equal decimal
/// types).
fn decimals_coerced(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let t = decimals_in(e, schema)?;
    if !t.transformed {
        return Ok(t);
    }
    let mut coercion =
        datafusion_optimizer::analyzer::type_coercion::TypeCoercionRewriter::new(schema);
    Ok(Transformed::yes(t.data.rewrite(&mut coercion)?.data))
}

/// [`flink_decimals`] for one expression over `schema`.
pub(crate) fn flink_decimals_in_expr(e: Expr, schema: &DFSchema) -> Result<Expr> {
    decimals_coerced(e, schema).map(|t| t.data)
}

/// A planned query, before type coercion, with Flink's DECIMAL arithmetic, so that what
/// consumes each result (`COALESCE`, a comparison, `CASE`) is coerced for Flink's result
/// type. [`flink_decimals`] after coercion does the rest.
pub(crate) fn flink_decimal_arithmetic(plan: LogicalPlan) -> Result<LogicalPlan> {
    super::rewrite::rewrite_plan(plan, &decimals_in)
}

/// A planned query with Flink's DECIMAL arithmetic (output names kept:
/// [`super::rewrite`]).
pub(crate) fn flink_decimals(plan: LogicalPlan) -> Result<LogicalPlan> {
    super::rewrite::rewrite_plan(plan, &decimals_coerced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::compute::cast;

    #[test]
    fn result_types_are_flinks() {
        assert_eq!(result_type(Operator::Divide, (10, 3), (10, 0)), (21, 14));
        assert_eq!(result_type(Operator::Multiply, (10, 3), (10, 0)), (21, 3));
        assert_eq!(result_type(Operator::Plus, (10, 3), (10, 0)), (14, 3));
        assert_eq!(result_type(Operator::Divide, (38, 10), (38, 10)), (38, 6));
    }

    #[test]
    fn division_rounds_half_up() {
        let op = DecimalOp {
            op: Operator::Divide,
            result: result_type(Operator::Divide, (10, 2), (10, 0)),
            signature: Signature::any(2, Volatility::Immutable),
        };
        let a: ArrayRef = Arc::new(
            Decimal128Array::from(vec![-50, 200])
                .with_precision_and_scale(10, 2)
                .unwrap(),
        );
        let b: ArrayRef = Arc::new(
            Decimal128Array::from(vec![3, 3])
                .with_precision_and_scale(10, 0)
                .unwrap(),
        );
        let out = op.apply(&a, &b).unwrap();
        let out = cast(&out, &DataType::Utf8).unwrap();
        let out = out.as_string::<i32>();
        assert_eq!(out.value(0), "-0.1666666666667");
        assert_eq!(out.value(1), "0.6666666666667");
    }
}
