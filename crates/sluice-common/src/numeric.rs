//! Java's integer and `BigDecimal` arithmetic where Flink's results depend on it: shared by
//! the SQL crate's functions and the runtime's column-wise aggregates, so both give the
//! same values.

use datafusion_common::arrow::datatypes::DataType;

/// `v` narrowed to the integer type `t` as Java narrows (`(int) v`): the low bits, so an
/// overflow wraps. Other types: `v` unchanged.
pub fn wrap_to(v: i64, t: &DataType) -> i64 {
    match t {
        DataType::Int8 => v as i8 as i64,
        DataType::Int16 => v as i16 as i64,
        DataType::Int32 => v as i32 as i64,
        _ => v,
    }
}

/// Flink's `AVG` of integers: the sum (kept in the argument's type, wrapping) divided by
/// the count, truncated toward zero (Flink docs, "Aggregate Functions": AVG of an INT is
/// an INT). `count` must not be 0.
pub fn avg_integer(sum: i64, count: i64, t: &DataType) -> i64 {
    wrap_to(sum, t).wrapping_div(count)
}

/// Flink's `AVG` of a DECIMAL: the unscaled `sum` at scale `from_scale` divided by
/// `count`, as an unscaled value at `to_scale` (>= `from_scale`), rounded half up as
/// Java's `BigDecimal` divides. `count` must not be 0.
pub fn avg_decimal(sum: i128, count: i64, from_scale: i8, to_scale: i8) -> i128 {
    let shift = 10i128.pow((to_scale - from_scale) as u32);
    let num = sum * shift;
    let count = count as i128;
    let (q, r) = (num / count, num % count);
    if 2 * r.abs() >= count.abs() {
        q + num.signum() * count.signum()
    } else {
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_narrowing_and_averages() {
        assert_eq!(wrap_to(2_147_483_648, &DataType::Int32), -2_147_483_648);
        assert_eq!(wrap_to(300, &DataType::Int8), 44);
        assert_eq!(wrap_to(i64::MAX, &DataType::Int64), i64::MAX);
        // AVG(42, 0, 2147483647) over INT: the sum wraps to -2147483607, / 3.
        assert_eq!(
            avg_integer(42 + 2_147_483_647, 3, &DataType::Int32),
            -715_827_869
        );
        assert_eq!(avg_integer(-7, 2, &DataType::Int32), -3, "toward zero");
        // 1.00 + 2.00 + 2.00 = 5.00 / 3 at scale 6: 1.666667 (half up).
        assert_eq!(avg_decimal(500, 3, 2, 6), 1_666_667);
        assert_eq!(avg_decimal(-500, 3, 2, 6), -1_666_667);
        assert_eq!(avg_decimal(5, 2, 0, 0), 3, "2.5 rounds half up");
    }
}
