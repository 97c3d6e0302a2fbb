//! Columns that text formats (CSV, JSON) read as text and Sluice converts itself:
//! - `TIMESTAMP(0..3)`: [`parse_timestamp_ms`] (the common `YYYY-MM-DD HH:MM:SS[.fff]`
//!   spelling, a few integer operations), else arrow's general parser;
//! - `TIMESTAMP_LTZ(0..3)`: the same text as a wall-clock time in the session time zone,
//!   unless it carries its own offset (`Z`, `+02:00`), which makes it an instant;
//! - `DECIMAL(p, s)`: rounded half-up to the scale, as Flink (arrow-csv truncates);
//! - in CSV, `ARRAY` and `ROW` of those or of other scalar types, as Flink's CSV format
//!   (its `CsvToRowDataConverters`) reads them: elements and fields separated by
//!   `'csv.array-element-delimiter'`; an empty field is an empty ARRAY or a NULL ROW;
//!   a ROW with more parts than fields keeps the first ones, one with fewer is an error;
//!   a string element keeps its spaces, numbers and booleans are trimmed (as Flink parses them), and an empty
//!   non-string element is an error, as Flink's.

use std::sync::Arc;

use datafusion_common::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, ListArray, NullBufferBuilder, PrimitiveArray,
    RecordBatch, StringArray, StringBuilder, StructArray,
};
use datafusion_common::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion_common::arrow::compute::{cast_with_options, CastOptions};
use datafusion_common::arrow::datatypes::{
    DataType, Field, Fields, Int32Type, Int64Type, Schema, SchemaRef, TimeUnit,
    TimestampMillisecondType,
};
use datafusion_common::arrow::record_batch::RecordBatchOptions;
use sluice_common::time::{local_to_utc_ms, parse_timestamp_ms, Tz};

#[derive(Clone, Copy, PartialEq, Eq)]
enum TextKind {
    Timestamp,
    LocalZoned,
    Decimal,
    /// A CSV `ARRAY` or `ROW`.
    Nested,
    /// A `MULTISET` (JSON): read as a map, then made canonical ([`canonical_multisets`]).
    Multiset,
    /// A JSON `ROW` with timestamp or decimal fields (at any depth): parsed as a ROW whose
    /// such fields are text, converted field by field as top-level columns are.
    JsonRow,
    /// A nullable CSV column no query reads: parsed as text (any text is), given as NULL.
    Unread,
}

/// How CSV spells `ARRAY` and `ROW` values in one field.
#[derive(Clone)]
pub(crate) struct NestedText {
    /// `'csv.array-element-delimiter'` (Flink's default `;`).
    pub(crate) delimiter: String,
    /// Whether a NULL field is an empty ARRAY (no `'csv.null-literal'`: the field was
    /// empty, which Flink reads as `[]`) rather than a NULL one.
    pub(crate) null_array_is_empty: bool,
}

/// A value that does not convert: row, column index, and its text.
pub(crate) struct BadText {
    pub(crate) row: usize,
    pub(crate) column: usize,
    pub(crate) value: String,
}

impl BadText {
    /// An error about column `column` as a whole (its message as the value).
    fn of_column(column: usize, error: impl std::fmt::Display) -> Self {
        BadText {
            row: 0,
            column,
            value: error.to_string(),
        }
    }
}

/// The fields of a JSON ROW as its parser reads them when some (at any depth) are
/// `TIMESTAMP(0..3)`, `TIMESTAMP_LTZ(0..3)` or `DECIMAL`: those as text, converted by
/// [`TextColumns`] (arrow-json's own timestamp parsing is its general, slower parser, and
/// it truncates decimals where Flink rounds half-up). `None` when there are none.
fn json_text_fields(fields: &Fields) -> Option<Fields> {
    let mut any = false;
    let text: Vec<Field> = fields
        .iter()
        .map(|f| {
            let t = match f.data_type() {
                DataType::Timestamp(TimeUnit::Millisecond, _) | DataType::Decimal128(_, _) => {
                    Some(DataType::Utf8)
                }
                DataType::Struct(inner) => json_text_fields(inner).map(DataType::Struct),
                _ => None,
            };
            any |= t.is_some();
            f.as_ref()
                .clone()
                .with_data_type(t.unwrap_or_else(|| f.data_type().clone()))
        })
        .collect();
    any.then(|| Fields::from(text))
}

/// A null buffer from validity flags, `None` when every value is valid.
fn nulls_of(valid: Vec<bool>) -> Option<NullBuffer> {
    let nulls = NullBuffer::from(valid);
    (nulls.null_count() > 0).then_some(nulls)
}

/// The parts of one field of a CSV `ROW`, one per row, when the field is read.
struct Part<'a> {
    wanted: bool,
    values: Vec<Option<&'a str>>,
}

impl<'a> Part<'a> {
    fn push(&mut self, value: Option<&'a str>) {
        if self.wanted {
            self.values.push(value);
        }
    }
}

/// Pushes the parts `split` gives into `parts`, one per field (the rest ignored, as Flink
/// keeps a ROW's first parts); false when there are fewer parts than fields.
fn split_into<'a>(mut split: impl Iterator<Item = &'a str>, parts: &mut [Part<'a>]) -> bool {
    for p in parts.iter_mut() {
        match split.next() {
            Some(s) => p.push(Some(s)),
            None => return false,
        }
    }
    true
}

/// `v` split at every match of `delimiter` (non-empty), left to right, as `str::split`
/// splits it; the searcher is built once per column, not per value (a match of valid
/// UTF-8 in valid UTF-8 ends on character boundaries, so every part is whole UTF-8).
fn split_parts<'a>(
    v: &'a str,
    delimiter: &'a memchr::memmem::Finder<'_>,
) -> impl Iterator<Item = &'a str> {
    let width = delimiter.needle().len();
    let ends = delimiter
        .find_iter(v.as_bytes())
        .chain(std::iter::once(v.len()));
    let mut start = 0;
    ends.map(move |end| {
        let part = &v[start..end];
        start = end + width;
        part
    })
}

/// `text` (of column `c`, one per row) as numbers of `target`, trimmed first when `trim`
/// (arrow's parser trims ASCII spaces itself; a ROW field is trimmed as Flink trims it):
/// parsed as arrow's cast parses them ([`parse_number`]); the first that does not parse
/// fails. `None` when `target` is not a number type read here.
fn numbers(
    text: &[Option<&str>],
    target: &DataType,
    c: usize,
    trim: bool,
) -> Option<Result<ArrayRef, BadText>> {
    use datafusion_common::arrow::datatypes::{Float32Type, Float64Type, Int16Type, Int8Type};
    Some(match target {
        DataType::Int8 => parse_primitive::<Int8Type>(text, c, trim),
        DataType::Int16 => parse_primitive::<Int16Type>(text, c, trim),
        DataType::Int32 => parse_primitive::<Int32Type>(text, c, trim),
        DataType::Int64 => parse_primitive::<Int64Type>(text, c, trim),
        DataType::Float32 => parse_primitive::<Float32Type>(text, c, trim),
        DataType::Float64 => parse_primitive::<Float64Type>(text, c, trim),
        _ => return None,
    })
}

/// Numbers of type `T` (of column `c`), see [`numbers`].
fn parse_primitive<T>(parts: &[Option<&str>], c: usize, trim: bool) -> Result<ArrayRef, BadText>
where
    T: datafusion_common::arrow::datatypes::ArrowPrimitiveType
        + datafusion_common::arrow::compute::kernels::cast_utils::Parser,
{
    let (values, nulls) = convert_each(parts.iter().copied(), |s| parse_number::<T>(s, trim))
        .map_err(|(row, s)| BadText {
            row,
            column: c,
            value: s.trim().to_string(),
        })?;
    Ok(Arc::new(PrimitiveArray::<T>::new(values.into(), nulls)))
}

/// Each text of `texts` (one per row) converted by `convert`, a NULL left NULL: the
/// values (a NULL's is `N::default()`) and their null bitmap, or the row and text of the
/// first that does not convert.
fn convert_each<'a, N: Default>(
    texts: impl ExactSizeIterator<Item = Option<&'a str>>,
    convert: impl Fn(&str) -> Option<N>,
) -> Result<(Vec<N>, Option<NullBuffer>), (usize, &'a str)> {
    let mut values = Vec::with_capacity(texts.len());
    let mut nulls = NullBufferBuilder::new(texts.len());
    for (row, text) in texts.enumerate() {
        let Some(s) = text else {
            values.push(N::default());
            nulls.append_null();
            continue;
        };
        values.push(convert(s).ok_or((row, s))?);
        nulls.append_non_null();
    }
    Ok((values, nulls.finish()))
}

/// `s` (trimmed when `trim`) parsed by arrow's parser for `T`; plain digits that fit `T`
/// (most values) read directly, as that parser reads them.
fn parse_number<T>(s: &str, trim: bool) -> Option<T::Native>
where
    T: datafusion_common::arrow::datatypes::ArrowPrimitiveType
        + datafusion_common::arrow::compute::kernels::cast_utils::Parser,
{
    use datafusion_common::arrow::datatypes::ArrowNativeType;
    plain_digits(s)
        .and_then(T::Native::from_usize)
        .or_else(|| T::parse(if trim { s.trim() } else { s }))
}

/// `s` as a number when it is 1 to 18 ASCII digits and nothing else (below 10^18, so it
/// cannot overflow), else `None`.
fn plain_digits(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    if bytes.is_empty() || bytes.len() > 18 {
        return None;
    }
    let mut value = 0usize;
    for &b in bytes {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value * 10 + digit as usize;
    }
    Some(value)
}

/// Strings as they stand, one per row, in one allocation.
fn strings(parts: &[Option<&str>]) -> ArrayRef {
    let bytes = parts.iter().map(|p| p.map_or(0, str::len)).sum();
    let mut builder = StringBuilder::with_capacity(parts.len(), bytes);
    for p in parts {
        builder.append_option(*p);
    }
    Arc::new(builder.finish())
}

/// The conversions of one table's text columns.
pub(crate) struct TextColumns {
    schema: SchemaRef,
    parse_schema: SchemaRef,
    columns: Vec<(usize, TextKind)>,
    time_zone: Tz,
    nested: Option<NestedText>,
    /// CSV: the columns and `ROW` fields the plan reads (`SourceSpec::read_schema`), when
    /// fewer than all. A nullable column it does not name is parsed as text and given as
    /// NULL, so no value there fails (Flink's CSV format pushes top-level projections
    /// down); a nullable `STRING` field of a ROW it does not name is NULL, not copied. The
    /// other fields of a read ROW are converted, so a bad value in one fails as in Flink
    /// (its CSV format converts whole ROWs). A ROW read only for whether it is NULL is
    /// read with its first field (the planner's choice).
    read: Option<SchemaRef>,
}

impl TextColumns {
    /// For a table of `schema` read in the session time zone `time_zone`.
    pub(crate) fn new(schema: SchemaRef, time_zone: Tz) -> Self {
        Self::with_nested(schema, time_zone, None, None)
    }

    /// For a CSV table: also its `ARRAY` and `ROW` columns, as `nested` spells them;
    /// `read`: the columns and `ROW` fields the plan reads (a narrowing of `schema`, in
    /// its order), when fewer than all.
    pub(crate) fn with_nested(
        schema: SchemaRef,
        time_zone: Tz,
        nested: Option<NestedText>,
        read: Option<SchemaRef>,
    ) -> Self {
        let mut columns = Vec::new();
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let unread = f.is_nullable()
                    && read
                        .as_ref()
                        .is_some_and(|r| r.field_with_name(f.name()).is_err());
                // The conversion, and the type the parser reads the column as.
                let text = match f.data_type() {
                    _ if unread => Some((TextKind::Unread, DataType::Utf8)),
                    DataType::Timestamp(TimeUnit::Millisecond, None) => {
                        Some((TextKind::Timestamp, DataType::Utf8))
                    }
                    DataType::Timestamp(TimeUnit::Millisecond, Some(_)) => {
                        Some((TextKind::LocalZoned, DataType::Utf8))
                    }
                    DataType::Decimal128(_, _) => Some((TextKind::Decimal, DataType::Utf8)),
                    DataType::List(_) | DataType::Struct(_) if nested.is_some() => {
                        Some((TextKind::Nested, DataType::Utf8))
                    }
                    DataType::Struct(fields) => json_text_fields(fields)
                        .map(|text| (TextKind::JsonRow, DataType::Struct(text))),
                    _ => None,
                };
                match text {
                    Some((kind, parsed)) => {
                        columns.push((i, kind));
                        f.as_ref().clone().with_data_type(parsed)
                    }
                    None if sluice_common::types::is_multiset(f.data_type()) => {
                        columns.push((i, TextKind::Multiset));
                        f.as_ref().clone()
                    }
                    None => f.as_ref().clone(),
                }
            })
            .collect();
        TextColumns {
            parse_schema: Arc::new(Schema::new(fields)),
            schema,
            columns,
            time_zone,
            nested,
            read,
        }
    }

    /// Why the CSV format cannot hold a column of type `t`, if it cannot: Flink's CSV
    /// format reads `ARRAY` and `ROW` of scalar types only (one delimiter, one level).
    pub(crate) fn csv_cannot_hold(t: &DataType) -> Option<&'static str> {
        match t {
            DataType::List(item) if item.data_type().is_nested() => {
                Some("an ARRAY of nested values")
            }
            DataType::Struct(fields) if fields.iter().any(|f| f.data_type().is_nested()) => {
                Some("a ROW with nested fields")
            }
            DataType::List(_) | DataType::Struct(_) => None,
            t if t.is_nested() => Some("a MAP or MULTISET"),
            _ => None,
        }
    }

    /// The table's physical columns.
    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The schema the format's parser reads: converted columns as text.
    pub(crate) fn parse_schema(&self) -> &SchemaRef {
        &self.parse_schema
    }

    /// The conversion of column `c`, if it is read as text.
    fn kind(&self, c: usize) -> Option<TextKind> {
        self.columns.iter().find(|(i, _)| *i == c).map(|(_, k)| *k)
    }

    /// Whether [`Self::convert_fields`] builds this table's batches: each column is one
    /// converted here from CSV text, a string, or a number of a type arrow's `Parser`
    /// reads (of the types arrow-csv reads, those [`Self::convert_fields`] reads as it does).
    pub(crate) fn reads_fields(&self) -> bool {
        self.nested.is_some()
            && self
                .parse_schema
                .fields()
                .iter()
                .enumerate()
                .all(|(c, f)| match self.kind(c) {
                    Some(kind) => !matches!(kind, TextKind::Multiset | TextKind::JsonRow),
                    None => {
                        *f.data_type() == DataType::Utf8
                            || numbers(&[], f.data_type(), c, false).is_some()
                    }
                })
    }

    /// For each column, whether [`Self::convert_fields`] reads its fields (false for a
    /// column no query reads).
    pub(crate) fn fields_read(&self) -> Vec<bool> {
        (0..self.schema.fields().len())
            .map(|c| self.kind(c) != Some(TextKind::Unread))
            .collect()
    }

    /// A batch of `rows` rows from the fields of CSV records its caller cut
    /// (`fields[c][row]`: the field's text, NULL when empty or the null literal; no fields
    /// for a column [`Self::fields_read`] leaves out), when [`Self::reads_fields`]:
    /// timestamps, decimals, `ARRAY`s and `ROW`s converted as [`Self::convert`] converts
    /// them; strings as they stand and numbers parsed untrimmed by arrow's `Parser`, as
    /// arrow-csv reads them. The first value that does not convert fails, and so does a
    /// NULL in a NOT NULL column (as arrow-csv fails it, before any conversion: an empty
    /// field of a NOT NULL `ARRAY` is no empty array here either).
    pub(crate) fn convert_fields(
        &self,
        fields: &[Vec<Option<&str>>],
        rows: usize,
    ) -> Result<RecordBatch, BadText> {
        let columns = self
            .parse_schema
            .fields()
            .iter()
            .zip(fields)
            .enumerate()
            .map(|(c, (f, text))| match (self.kind(c), f.data_type()) {
                _ if !f.is_nullable() && text.contains(&None) => {
                    Err(BadText::of_column(c, "a NULL in a NOT NULL column"))
                }
                (Some(TextKind::Unread), _) => {
                    Ok(new_null_array(self.schema.field(c).data_type(), rows))
                }
                (Some(_), _) => self.convert_column(c, text),
                (None, DataType::Utf8) => Ok(strings(text)),
                (None, t) => numbers(text, t, c, false).unwrap_or_else(|| {
                    Err(BadText::of_column(c, format!("{t} is read by arrow-csv")))
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        // The schema `convert` gives: the parser's when no column is converted.
        let schema = match self.columns.is_empty() {
            true => &self.parse_schema,
            false => &self.schema,
        };
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(Arc::clone(schema), columns, &options)
            .map_err(|e| BadText::of_column(0, e))
    }

    /// Converts the text columns of a parsed batch; the first bad value fails.
    pub(crate) fn convert(&self, batch: RecordBatch) -> Result<RecordBatch, BadText> {
        if self.columns.is_empty() {
            return Ok(batch);
        }
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        for &(c, kind) in &self.columns {
            if kind == TextKind::Multiset {
                columns[c] =
                    canonical_multisets(&columns[c]).map_err(|e| BadText::of_column(c, e))?;
                continue;
            }
            if let (TextKind::JsonRow, DataType::Struct(fields)) =
                (kind, self.schema.field(c).data_type())
            {
                columns[c] = self.json_row(columns[c].as_struct(), c, fields)?;
                continue;
            }
            let field = self.schema.field(c);
            if kind == TextKind::Unread {
                columns[c] = new_null_array(field.data_type(), batch.num_rows());
                continue;
            }
            let text: Vec<Option<&str>> = columns[c].as_string::<i32>().iter().collect();
            columns[c] = self.convert_column(c, &text)?;
        }
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        RecordBatch::try_new_with_options(Arc::clone(&self.schema), columns, &options)
            .map_err(|e| BadText::of_column(0, e))
    }

    /// The texts of column `c` (a timestamp, decimal, `ARRAY` or `ROW` column read as
    /// text), one per row, as the column's values; a ROW's fields the plan does not read
    /// are NULL (see the `read` field).
    fn convert_column(&self, c: usize, text: &[Option<&str>]) -> Result<ArrayRef, BadText> {
        let field = self.schema.field(c);
        let read = self
            .read
            .as_ref()
            .and_then(|read| read.field_with_name(field.name()).ok());
        match (field.data_type(), read.map(|f| f.data_type())) {
            (DataType::Struct(fields), Some(DataType::Struct(read))) if self.nested.is_some() => {
                self.row(text, c, fields, Some(read))
            }
            (target, _) => self.convert_text(text, target, c),
        }
    }

    /// `text` (of column `c`, one per row) as values of `target`: strings as they stand;
    /// numbers trimmed and parsed as arrow's cast parses them; timestamps by
    /// [`Self::timestamp`]; `ARRAY`s and `ROW`s split; other types by arrow's cast.
    fn convert_text(
        &self,
        text: &[Option<&str>],
        target: &DataType,
        c: usize,
    ) -> Result<ArrayRef, BadText> {
        if let Some(numbers) = numbers(text, target, c, true) {
            return numbers;
        }
        match target {
            DataType::Utf8 => Ok(strings(text)),
            DataType::Timestamp(TimeUnit::Millisecond, tz) => {
                self.timestamp(text.iter().copied(), c, target, tz.is_some())
            }
            DataType::List(item) => self.array(text, c, item),
            DataType::Struct(fields) => self.row(text, c, fields, None),
            _ => self.cast_text(text, c, target),
        }
    }

    /// Splits `text` (of column `c`) into ARRAY elements of `item`'s type.
    fn array(
        &self,
        text: &[Option<&str>],
        c: usize,
        item: &Arc<Field>,
    ) -> Result<ArrayRef, BadText> {
        let nested = self.nested.as_ref().expect("nested columns only in CSV");
        let delimiter = memchr::memmem::Finder::new(nested.delimiter.as_str());
        let mut elements: Vec<Option<&str>> = Vec::new();
        let mut lengths = Vec::with_capacity(text.len());
        let mut valid = Vec::with_capacity(text.len());
        for value in text {
            let before = elements.len();
            if let Some(v) = value.filter(|v| !v.is_empty()) {
                elements.extend(split_parts(v, &delimiter).map(Some));
            }
            lengths.push(elements.len() - before);
            valid.push(value.is_some() || nested.null_array_is_empty);
        }
        let offsets = OffsetBuffer::from_lengths(lengths);
        let values = self
            .convert_text(&elements, item.data_type(), c)
            .map_err(|mut bad| {
                // The element's row, for the message: the row whose range holds it.
                let e = bad.row as i32;
                bad.row = offsets
                    .windows(2)
                    .position(|w| w[0] <= e && e < w[1])
                    .unwrap_or(0);
                bad.value = text[bad.row].unwrap_or_default().to_string();
                bad
            })?;
        ListArray::try_new(Arc::clone(item), offsets, values, nulls_of(valid))
            .map(|a| Arc::new(a) as ArrayRef)
            .map_err(|e| BadText::of_column(c, e))
    }

    /// Splits `text` (of column `c`) into the values of a ROW of `fields`: each field's
    /// parts converted straight from the text (no intermediate text column per field).
    /// Nullable `STRING` fields `read` (when given) does not name are NULL: any text is a
    /// string, so skipping one loses no error (see the `read` field).
    fn row(
        &self,
        text: &[Option<&str>],
        c: usize,
        fields: &Fields,
        read: Option<&Fields>,
    ) -> Result<ArrayRef, BadText> {
        let nested = self.nested.as_ref().expect("nested columns only in CSV");
        let delimiter = memchr::memmem::Finder::new(nested.delimiter.as_str());
        let wanted: Vec<bool> = fields
            .iter()
            .map(|f| {
                !f.is_nullable()
                    || *f.data_type() != DataType::Utf8
                    || read.is_none_or(|r| r.find(f.name()).is_some())
            })
            .collect();
        let mut parts: Vec<Part> = wanted
            .iter()
            .map(|&w| Part {
                wanted: w,
                values: Vec::with_capacity(if w { text.len() } else { 0 }),
            })
            .collect();
        let mut valid = Vec::with_capacity(text.len());
        for (row, value) in text.iter().enumerate() {
            let value = value.filter(|v| !v.is_empty());
            valid.push(value.is_some());
            let Some(v) = value else {
                parts.iter_mut().for_each(|p| p.push(None));
                continue;
            };
            let complete = split_into(split_parts(v, &delimiter), &mut parts);
            if !complete {
                // Fewer parts than fields: Flink's "Row length mismatch".
                return Err(BadText {
                    row,
                    column: c,
                    value: v.to_string(),
                });
            }
        }
        let arrays = fields
            .iter()
            .zip(&parts)
            .map(|(f, p)| match p.wanted {
                true => self.convert_text(&p.values, f.data_type(), c),
                false => Ok(new_null_array(f.data_type(), text.len())),
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|mut bad| {
                bad.value = text[bad.row].unwrap_or_default().to_string();
                bad
            })?;
        StructArray::try_new(fields.clone(), arrays, nulls_of(valid))
            .map(|a| Arc::new(a) as ArrayRef)
            .map_err(|e| BadText::of_column(c, e))
    }

    /// A JSON ROW parsed with text fields (`json_text_fields`) as a ROW of `fields`: each
    /// text field converted (a nested ROW in turn), the others as parsed.
    fn json_row(
        &self,
        parsed: &StructArray,
        c: usize,
        fields: &Fields,
    ) -> Result<ArrayRef, BadText> {
        let children = fields
            .iter()
            .zip(parsed.columns())
            .map(|(f, column)| match (f.data_type(), column.data_type()) {
                (DataType::Struct(inner), DataType::Struct(_)) => {
                    self.json_row(column.as_struct(), c, inner)
                }
                (t, DataType::Utf8) if *t != DataType::Utf8 => {
                    let text: Vec<Option<&str>> = column.as_string::<i32>().iter().collect();
                    self.convert_text(&text, t, c)
                }
                _ => Ok(Arc::clone(column)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        StructArray::try_new(fields.clone(), children, parsed.nulls().cloned())
            .map(|a| Arc::new(a) as ArrayRef)
            .map_err(|e| BadText::of_column(c, e))
    }

    /// Timestamp text (of column `c`), one value per row, in epoch ms.
    fn timestamp<'a>(
        &self,
        text: impl ExactSizeIterator<Item = Option<&'a str>>,
        c: usize,
        target: &DataType,
        local_zoned: bool,
    ) -> Result<ArrayRef, BadText> {
        let (values, nulls) = convert_each(text, |s| timestamp_ms(s, local_zoned, &self.time_zone))
            .map_err(|(row, s)| BadText {
                row,
                column: c,
                value: s.to_string(),
            })?;
        Ok(timestamp_array(values, nulls, target))
    }

    /// `text` cast to `target` (decimals rounded half-up; other scalars by arrow's cast),
    /// trimmed; the first value that does not convert fails.
    fn cast_text(
        &self,
        text: &[Option<&str>],
        c: usize,
        target: &DataType,
    ) -> Result<ArrayRef, BadText> {
        let strict = CastOptions {
            safe: false,
            ..Default::default()
        };
        let trimmed: StringArray = text.iter().map(|v| v.map(str::trim)).collect();
        match cast_with_options(&trimmed, target, &strict) {
            Ok(a) => Ok(a),
            Err(_) => {
                // Find the first value that does not convert, to report it.
                let lenient = CastOptions::default();
                let converted = cast_with_options(&trimmed, target, &lenient).ok();
                let row = (0..trimmed.len())
                    .find(|&r| {
                        trimmed.is_valid(r) && converted.as_ref().is_none_or(|a| a.is_null(r))
                    })
                    .unwrap_or(0);
                Err(BadText {
                    row,
                    column: c,
                    value: trimmed.value(row).to_string(),
                })
            }
        }
    }
}

/// MULTISET values as Sluice holds them (what `COLLECT` gives): each element once, in
/// ascending order; elements whose count is not positive dropped. A file may spell one in
/// any order, or name an element twice (the last count holds).
fn canonical_multisets(column: &ArrayRef) -> Result<ArrayRef, datafusion_common::DataFusionError> {
    use datafusion_common::arrow::array::{Int32Array, MapArray};
    use datafusion_common::ScalarValue;
    let map = column.as_map();
    let DataType::Map(entries, sorted) = column.data_type() else {
        return Ok(Arc::clone(column));
    };
    let mut elements: Vec<ScalarValue> = Vec::new();
    let mut counts: Vec<i32> = Vec::new();
    let mut lengths = Vec::with_capacity(map.len());
    for row in 0..map.len() {
        let mut pairs: Vec<(ScalarValue, i32)> = Vec::new();
        if map.is_valid(row) {
            let entry = map.value(row);
            let (keys, values) = (entry.column(0), entry.column(1).as_primitive::<Int32Type>());
            for i in 0..keys.len() {
                let key = ScalarValue::try_from_array(keys, i)?;
                // A key named twice: the last one counts, as Flink's JSON parser reads it.
                match pairs.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, n)) => *n = values.value(i),
                    None => pairs.push((key, values.value(i))),
                }
            }
        }
        pairs.retain(|(_, n)| *n > 0);
        pairs.sort_by(|(a, _), (b, _)| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        lengths.push(pairs.len());
        for (k, n) in pairs {
            elements.push(k);
            counts.push(n);
        }
    }
    let DataType::Struct(fields) = entries.data_type() else {
        return Ok(Arc::clone(column));
    };
    let keys = if elements.is_empty() {
        datafusion_common::arrow::array::new_empty_array(fields[0].data_type())
    } else {
        ScalarValue::iter_to_array(elements)?
    };
    let pairs = StructArray::try_new(
        fields.clone(),
        vec![keys, Arc::new(Int32Array::from(counts))],
        None,
    )?;
    Ok(Arc::new(MapArray::try_new(
        Arc::clone(entries),
        OffsetBuffer::from_lengths(lengths),
        pairs,
        map.nulls().cloned(),
        *sorted,
    )?))
}

/// Whether timestamp text ends with its own offset (`Z`, `+02:00`, `-0500`).
fn has_offset(s: &str) -> bool {
    let s = s.trim();
    if s.ends_with(['Z', 'z']) {
        return true;
    }
    // An offset sign after the time part (the date's '-' signs are in the first 10 bytes).
    s.len() > 19 && s[19..].contains(['+', '-'])
}

/// Timestamp text in epoch ms: the common spelling by [`parse_timestamp_ms`], others by
/// [`general_timestamp_ms`]; `local_zoned` (`TIMESTAMP_LTZ`): a wall-clock time in
/// `time_zone`, unless the text carries its own offset, which makes it an instant.
fn timestamp_ms(s: &str, local_zoned: bool, time_zone: &Tz) -> Option<i64> {
    match parse_timestamp_ms(s.as_bytes()) {
        Some(v) if local_zoned => Some(local_to_utc_ms(time_zone, v)),
        Some(v) => Some(v),
        None => general_timestamp_ms(s).map(|v| {
            if local_zoned && !has_offset(s) {
                local_to_utc_ms(time_zone, v)
            } else {
                v
            }
        }),
    }
}

/// Epoch-ms `values` as a column of `target` (`TIMESTAMP(3)` or `TIMESTAMP_LTZ(3)`).
fn timestamp_array(values: Vec<i64>, nulls: Option<NullBuffer>, target: &DataType) -> ArrayRef {
    let array = PrimitiveArray::<TimestampMillisecondType>::new(values.into(), nulls);
    match target {
        DataType::Timestamp(_, Some(tz)) => Arc::new(array.with_timezone(tz.clone())),
        _ => Arc::new(array),
    }
}

/// Timestamps in spellings other than the fast path's (arrow's parser: `T`, offsets,
/// `Z`, ...), in epoch ms (an offset is applied; otherwise the text is read as UTC).
fn general_timestamp_ms(s: &str) -> Option<i64> {
    let array = StringArray::from(vec![s]);
    let ts = cast_with_options(
        &array,
        &DataType::Timestamp(TimeUnit::Millisecond, None),
        &CastOptions::default(),
    )
    .ok()?;
    let ts = ts.as_primitive::<TimestampMillisecondType>();
    ts.is_valid(0).then(|| ts.value(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_recognised() {
        assert!(has_offset("2024-03-10 07:30:00Z"));
        assert!(has_offset("2024-03-10T07:30:00+00:00"));
        assert!(has_offset("2024-03-10 07:30:00.123-05:00"));
        assert!(!has_offset("2024-03-10 07:30:00"));
        assert!(!has_offset("2024-03-10 07:30:00.123"));
    }

    /// The plain-digits shortcut gives what arrow's parser gives on the text (trimmed or
    /// as it stands), for every integer and float type and edge: leading zeros, 18 and 19
    /// digits, past the type's range, signs, spaces, and text that is not a number.
    #[test]
    fn numbers_parse_as_arrows_parser_parses_them() {
        use datafusion_common::arrow::compute::kernels::cast_utils::Parser;
        use datafusion_common::arrow::datatypes::{
            ArrowPrimitiveType, Float32Type, Float64Type, Int16Type, Int8Type,
        };
        let texts = [
            "0",
            "007",
            "42",
            "127",
            "128",
            "32767",
            "32768",
            "2147483647",
            "2147483648",
            "999999999999999999",
            "1000000000000000000",
            "9223372036854775807",
            "9223372036854775808",
            "-5",
            "+5",
            " 12 ",
            "\t3",
            "",
            " ",
            "1a",
            "1.5",
            "1e3",
            "\u{661}",
            "123456789012345678",
            "16777217",
            "NaN",
        ];
        /// `t` read by `parse_number` as `T` parses it (floats compared by their
        /// Debug text, so that NaN equals NaN).
        fn agrees<T: ArrowPrimitiveType + Parser>(t: &str, trim: bool) {
            let arrows = if trim { t.trim() } else { t };
            assert_eq!(
                format!("{:?}", parse_number::<T>(t, trim)),
                format!("{:?}", T::parse(arrows)),
                "{t:?} as {}, trimmed: {trim}",
                T::DATA_TYPE
            );
        }
        for t in texts {
            for trim in [true, false] {
                agrees::<Int64Type>(t, trim);
                agrees::<Int32Type>(t, trim);
                agrees::<Int16Type>(t, trim);
                agrees::<Int8Type>(t, trim);
                agrees::<Float64Type>(t, trim);
                agrees::<Float32Type>(t, trim);
            }
        }
        assert_eq!(
            parse_number::<Int64Type>("999999999999999999", true),
            Some(999_999_999_999_999_999)
        );
        assert_eq!(parse_number::<Int32Type>("2147483648", true), None);
    }
}
