//! SQL type names.

use std::sync::Arc;

use datafusion_common::arrow::datatypes::{DataType, Field, Fields, TimeUnit};

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
        // Flink's TIME is TIME(0): values are whole seconds (CAST truncates).
        DataType::Time32(_) | DataType::Time64(_) => "TIME(0)".into(),
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
        DataType::Binary => "BYTES".into(),
        // Flink 2.3's BITMAP: a serialized RoaringBitmap (sluice_sql::functions::bitmap).
        DataType::LargeBinary => "BITMAP".into(),
        DataType::Null => "NULL".into(),
        DataType::List(f) | DataType::LargeList(f) => {
            format!("ARRAY<{}>", field_type_name(f))
        }
        DataType::Map(entries, _) if entries.name() == MULTISET_ENTRIES => {
            match entries.data_type() {
                DataType::Struct(kv) if !kv.is_empty() => {
                    // Elements are never NULL inside: no `NOT NULL` to show.
                    format!("MULTISET<{}>", flink_type_name(kv[0].data_type()))
                }
                other => other.to_string(),
            }
        }
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => format!(
                "MAP<{}, {}>",
                field_type_name(&kv[0]),
                field_type_name(&kv[1])
            ),
            other => other.to_string(),
        },
        DataType::Struct(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|f| format!("`{}` {}", f.name().replace('`', "``"), field_type_name(f)))
                .collect();
            format!("ROW<{}>", fields.join(", "))
        }
        other => other.to_string(),
    }
}

/// A nested field's type as Flink spells it: `NOT NULL` when the field is.
fn field_type_name(f: &Field) -> String {
    if f.is_nullable() {
        flink_type_name(f.data_type())
    } else {
        format!("{} NOT NULL", flink_type_name(f.data_type()))
    }
}

/// Flink's `ARRAY<element>` as Arrow: a `List` whose element field is Arrow's default
/// (`item`), so every array of one element type is one Arrow type whatever made it.
pub fn array_type(element: DataType, element_nullable: bool) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(element, element_nullable)))
}

/// Flink's `MAP<key, value>` as Arrow: a `Map` of `entries: Struct<key, value>` (keys
/// never NULL in Arrow; Flink allows one NULL key, which Sluice refuses when it builds a
/// map), unsorted.
pub fn map_type(key: DataType, value: DataType, value_nullable: bool) -> DataType {
    DataType::Map(
        Arc::new(Field::new(
            "entries",
            DataType::Struct(Fields::from(vec![
                Field::new("key", key, false),
                Field::new("value", value, value_nullable),
            ])),
            false,
        )),
        false,
    )
}

/// The entries field name that marks a `Map` as a `MULTISET` (see [`multiset_type`]).
pub const MULTISET_ENTRIES: &str = "multiset";

/// Flink's `MULTISET<element>` as Arrow: a `Map` of `multiset: Struct<element, count
/// INT>` (each distinct element and how many times it occurs, as Flink's own
/// `MapData` of element to count); the entries' name tells it from a `MAP<element, INT>`.
/// NULL elements are not held (Flink's `COLLECT` skips them).
pub fn multiset_type(element: DataType) -> DataType {
    DataType::Map(
        Arc::new(Field::new(
            MULTISET_ENTRIES,
            DataType::Struct(Fields::from(vec![
                Field::new("element", element, false),
                Field::new("count", DataType::Int32, false),
            ])),
            false,
        )),
        false,
    )
}

/// Whether `dt` is a `MULTISET` ([`multiset_type`]).
pub fn is_multiset(dt: &DataType) -> bool {
    matches!(dt, DataType::Map(entries, _) if entries.name() == MULTISET_ENTRIES)
}

/// Flink's `ROW<name type, ...>` as Arrow: a `Struct` of the named fields.
pub fn row_type(fields: Vec<Field>) -> DataType {
    DataType::Struct(Fields::from(fields))
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
