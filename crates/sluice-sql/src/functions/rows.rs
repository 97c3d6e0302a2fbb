//! Row-at-a-time helpers for function bodies: typed views of coerced argument arrays and
//! builders of result arrays from one closure per row.

use std::sync::Arc;

use datafusion_common::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int32Array, Int64Array, StringArray,
    StringBuilder,
};
use datafusion_common::arrow::datatypes::{Float64Type, Int64Type};

/// Argument `a` as strings (coerced to `Utf8` by [`super::udf::Arg::Str`]).
pub(crate) fn strs(a: &ArrayRef) -> &StringArray {
    a.as_string::<i32>()
}

/// Argument `a` as 64-bit integers ([`super::udf::Arg::Int`]).
pub(crate) fn ints(a: &ArrayRef) -> &Int64Array {
    a.as_primitive::<Int64Type>()
}

/// Argument `a` as doubles ([`super::udf::Arg::Float`]).
pub(crate) fn floats(a: &ArrayRef) -> &Float64Array {
    a.as_primitive::<Float64Type>()
}

/// The string at row `i`, `None` when NULL.
pub(crate) fn str_at(a: &StringArray, i: usize) -> Option<&str> {
    (!a.is_null(i)).then(|| a.value(i))
}

/// The integer at row `i`, `None` when NULL.
pub(crate) fn int_at(a: &Int64Array, i: usize) -> Option<i64> {
    (!a.is_null(i)).then(|| a.value(i))
}

/// A `STRING` column of `rows` rows from `f(row)`.
pub(crate) fn string_rows(rows: usize, f: impl FnMut(usize) -> Option<String>) -> ArrayRef {
    Arc::new((0..rows).map(f).collect::<StringArray>())
}

/// A `STRING` column of `rows` rows, each written by `f(row, out)` into one reused buffer
/// (`out` is empty when `f` is called; `false`: NULL), so no String is allocated per row.
pub(crate) fn string_rows_into(
    rows: usize,
    mut f: impl FnMut(usize, &mut String) -> bool,
) -> ArrayRef {
    let mut builder = StringBuilder::with_capacity(rows, rows * 8);
    let mut buf = String::new();
    for i in 0..rows {
        buf.clear();
        if f(i, &mut buf) {
            builder.append_value(&buf);
        } else {
            builder.append_null();
        }
    }
    Arc::new(builder.finish())
}

/// An `INT` column of `rows` rows from `f(row)`.
pub(crate) fn int32_rows(rows: usize, f: impl FnMut(usize) -> Option<i32>) -> ArrayRef {
    Arc::new((0..rows).map(f).collect::<Int32Array>())
}

/// A `BIGINT` column of `rows` rows from `f(row)`.
pub(crate) fn int64_rows(rows: usize, f: impl FnMut(usize) -> Option<i64>) -> ArrayRef {
    Arc::new((0..rows).map(f).collect::<Int64Array>())
}

/// A `DOUBLE` column of `rows` rows from `f(row)`.
pub(crate) fn float_rows(rows: usize, f: impl FnMut(usize) -> Option<f64>) -> ArrayRef {
    Arc::new((0..rows).map(f).collect::<Float64Array>())
}

/// A `BOOLEAN` column of `rows` rows from `f(row)`.
pub(crate) fn bool_rows(rows: usize, f: impl FnMut(usize) -> Option<bool>) -> ArrayRef {
    Arc::new((0..rows).map(f).collect::<BooleanArray>())
}
