//! The user-defined functions of Flink's Nexmark suite, which its queries bind with
//! `CREATE FUNCTION ... AS '<Java class>'`. The `sluice` binary (`sluice run` and the
//! shell) registers them on its engine; an application can with [`register_udfs`].

use std::sync::Arc;

use datafusion_common::arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use datafusion_common::arrow::compute::cast;
use datafusion_common::arrow::datatypes::DataType;
use datafusion_common::{exec_err, ScalarValue};
use datafusion_expr::{create_udf, ColumnarValue, Volatility};

use crate::Engine;

/// The identifier Nexmark q14 binds `count_char` to.
pub const COUNT_CHAR: &str = "com.github.nexmark.flink.udf.CountChar";

/// Registers Nexmark's functions on `engine` under their Java class names:
/// [`COUNT_CHAR`], `count_char(s STRING, c STRING) -> BIGINT NOT NULL`, how many bytes of
/// `s` (UTF-8) equal the first byte of `c`; 0 when `s` is NULL; an error when `c` is NULL
/// or empty (as the Java function, `CountChar.eval` in nexmark-flink, which throws).
pub fn register_udfs(engine: &mut Engine) {
    let count_char = create_udf(
        "count_char",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Int64,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            // All constants: one row, a constant result.
            let array_rows = args.iter().find_map(|a| match a {
                ColumnarValue::Array(a) => Some(a.len()),
                ColumnarValue::Scalar(_) => None,
            });
            let rows = array_rows.unwrap_or(1);
            let s = cast(&args[0].to_array(rows)?, &DataType::Utf8)?;
            let c = cast(&args[1].to_array(rows)?, &DataType::Utf8)?;
            let (s, c) = (s.as_string::<i32>(), c.as_string::<i32>());
            let mut out = Vec::with_capacity(rows);
            for i in 0..rows {
                let Some(&wanted) = (!c.is_null(i))
                    .then(|| c.value(i).as_bytes().first())
                    .flatten()
                else {
                    return exec_err!("count_char: the character to count is NULL or empty");
                };
                let n = if s.is_null(i) {
                    0
                } else {
                    s.value(i).bytes().filter(|b| *b == wanted).count() as i64
                };
                out.push(n);
            }
            let out: ArrayRef = Arc::new(Int64Array::from(out));
            Ok(match array_rows {
                Some(_) => ColumnarValue::Array(out),
                None => ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?),
            })
        }),
    );
    engine.register_udf(COUNT_CHAR, count_char);
}
