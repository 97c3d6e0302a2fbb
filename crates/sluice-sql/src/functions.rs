//! Flink SQL functions that DataFusion does not have.

use std::sync::Arc;

use datafusion_common::arrow::array::{AsArray, TimestampMillisecondArray};
use datafusion_common::arrow::compute::cast;
use datafusion_common::arrow::datatypes::{DataType, Int64Type, TimeUnit};
use datafusion_common::{exec_err, Result, ScalarValue};
use datafusion_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

/// `TO_TIMESTAMP_LTZ(epoch [, precision])` (Flink): the instant `epoch` seconds
/// (precision 0) or milliseconds (precision 3, the default) after 1970-01-01 00:00:00 UTC,
/// as `TIMESTAMP_LTZ(3)`. NULL in, NULL out.
///
/// # Errors
/// A precision other than 0 or 3; a result outside the years 1 to 9999.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ToTimestampLtz {
    signature: Signature,
}

impl ToTimestampLtz {
    /// The function, ready to register.
    pub fn udf() -> Arc<ScalarUDF> {
        Arc::new(ScalarUDF::new_from_impl(ToTimestampLtz {
            signature: Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![DataType::Int64]),
                    TypeSignature::Exact(vec![DataType::Int64, DataType::Int64]),
                ],
                Volatility::Immutable,
            ),
        }))
    }
}

impl ScalarUDFImpl for ToTimestampLtz {
    fn name(&self) -> &str {
        "to_timestamp_ltz"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Timestamp(
            TimeUnit::Millisecond,
            Some("UTC".into()),
        ))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let precision = match args.args.get(1) {
            None => 3,
            Some(ColumnarValue::Scalar(ScalarValue::Int64(Some(p)))) => *p,
            Some(other) => {
                return exec_err!(
                    "TO_TIMESTAMP_LTZ: the precision must be the literal 0 or 3, found {other:?}"
                )
            }
        };
        let factor = match precision {
            0 => 1000,
            3 => 1,
            p => return exec_err!("TO_TIMESTAMP_LTZ: precision must be 0 or 3, found {p}"),
        };
        let epoch = args.args[0].to_array(args.number_rows)?;
        let epoch = cast(&epoch, &DataType::Int64)?;
        let epoch = epoch.as_primitive::<Int64Type>();
        // Years 1 to 9999, as SQL timestamps.
        const MIN_MS: i64 = -62_135_596_800_000;
        const MAX_MS: i64 = 253_402_300_799_999;
        let mut values = Vec::with_capacity(epoch.len());
        for v in epoch.iter() {
            match v {
                None => values.push(None),
                Some(v) => match v
                    .checked_mul(factor)
                    .filter(|ms| (MIN_MS..=MAX_MS).contains(ms))
                {
                    Some(ms) => values.push(Some(ms)),
                    None => {
                        return exec_err!(
                            "TO_TIMESTAMP_LTZ({v}, {precision}) is outside the years 1 to 9999"
                        )
                    }
                },
            }
        }
        let ms = TimestampMillisecondArray::from(values);
        let ms = ms.with_timezone("UTC");
        debug_assert_eq!(ms.len(), args.number_rows);
        Ok(ColumnarValue::Array(Arc::new(ms)))
    }
}
