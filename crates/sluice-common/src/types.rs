//! SQL type names.

use datafusion_common::arrow::datatypes::{DataType, TimeUnit};

/// The Flink spelling of an Arrow type, for messages and DESCRIBE.
pub fn flink_type_name(dt: &DataType) -> String {
    match dt {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "STRING".into(),
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INT".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::Float32 => "FLOAT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Decimal128(p, s) => format!("DECIMAL({p}, {s})"),
        DataType::Date32 => "DATE".into(),
        DataType::Timestamp(unit, tz) => {
            let p = match unit {
                TimeUnit::Second => 0,
                TimeUnit::Millisecond => 3,
                TimeUnit::Microsecond => 6,
                TimeUnit::Nanosecond => 9,
            };
            if tz.is_some() {
                format!("TIMESTAMP_LTZ({p})")
            } else {
                format!("TIMESTAMP({p})")
            }
        }
        DataType::Binary | DataType::LargeBinary => "BYTES".into(),
        DataType::Null => "NULL".into(),
        other => other.to_string(),
    }
}

/// Field metadata key marking a processing-time attribute (Flink SQL "Time Attributes >
/// Processing Time": a `TIMESTAMP_LTZ(3)` column declared `pt AS PROCTIME()`). The source
/// fills such a column with the job's processing time when it reads a batch; the mark
/// travels with the column through projections (DataFusion keeps field metadata of column
/// references), so ordered operators can tell an ORDER BY on it.
pub const PROCTIME_KEY: &str = "sluice.proctime";

/// Whether a field is a processing-time attribute (see [`PROCTIME_KEY`]).
pub fn is_proctime(field: &datafusion_common::arrow::datatypes::Field) -> bool {
    field.metadata().contains_key(PROCTIME_KEY)
}
