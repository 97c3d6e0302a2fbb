//! The bytes an operator keeps a whole row in: a join input's rows, Top-N's and
//! deduplication's kept rows, rows waiting for the watermark, a lookup table's rows.
//! [`RowCodec`] encodes a batch's columns into one byte string per row and decodes held
//! rows back to columns (on output and for snapshots, which hold columns, not these bytes).
//!
//! One row is a NULL bitmap (a bit per column, bit set = NULL; `ceil(columns / 8)` bytes)
//! followed by each non-NULL column's value:
//! - integer-like types (`TINYINT` to `BIGINT`, unsigned ones, `DATE`, `TIME`,
//!   `TIMESTAMP`, durations): the sign-extended value, zigzag-mapped, as an LEB128 varint
//!   (an id below 64 takes one byte, a millisecond timestamp of 2026 six);
//! - other fixed-width types (floats, decimals, intervals): their little-endian bytes;
//! - `BOOLEAN`: one byte;
//! - `VARCHAR` / `BYTES` (every Arrow string and binary layout): a varint length, then
//!   the bytes;
//! - anything else (`ROW`, `ARRAY`, `MAP`, dictionaries): a varint length, then the
//!   column's bytes in Arrow's row format (which holds the column's NULL itself).
//!
//! Nexmark's bid (three BIGINTs, a TIMESTAMP, three strings of 9, 63 and 67 bytes) takes
//! about 165 bytes here and about 230 in Arrow's row format, which pads strings to 8- and
//! 32-byte blocks so that rows sort by their bytes; held rows are only compared for
//! equality, never sorted. Equal rows have equal bytes (floats by their bits, as in Arrow's
//! row format), so the bytes are a row's identity where distinct rows are counted (a
//! join's [`super::rows::JoinRows`]).

use std::sync::Arc;

use datafusion_common::arrow::array::{
    make_array, new_null_array, Array, ArrayData, ArrayRef, AsArray, BinaryViewArray,
    BinaryViewBuilder, BooleanArray, BooleanBufferBuilder, GenericBinaryBuilder, GenericByteArray,
    OffsetSizeTrait, StringViewArray,
};
use datafusion_common::arrow::buffer::{Buffer, MutableBuffer, NullBuffer};
use datafusion_common::arrow::datatypes::{ByteArrayType, DataType, Schema};
use datafusion_common::arrow::row::{RowConverter, Rows, SortField};
use sluice_common::{Result, SluiceError};

/// How one column's values are written.
enum ColumnCodec {
    /// Integer-like, `width` bytes: zigzag varint.
    Int {
        width: usize,
    },
    /// Other fixed-width: `width` raw bytes.
    Raw {
        width: usize,
    },
    Boolean,
    /// Strings and binaries: varint length, bytes.
    Bytes(BytesLayout),
    /// Arrow's row format of this column alone: varint length, bytes.
    RowFormat(RowConverter),
    /// The `NULL` type: nothing (always NULL).
    Null,
}

/// The Arrow layout of a string or binary column.
#[derive(Clone, Copy)]
enum BytesLayout {
    Utf8,
    LargeUtf8,
    Utf8View,
    Binary,
    LargeBinary,
    BinaryView,
}

/// Encodes rows of one schema to bytes and back (see the module docs).
pub struct RowCodec {
    types: Vec<DataType>,
    columns: Vec<ColumnCodec>,
    /// Bytes of the NULL bitmap.
    null_bytes: usize,
}

/// A batch's rows encoded by a [`RowCodec`]: one byte string per row.
pub struct EncodedRows {
    data: Vec<u8>,
    /// Row `i` is `data[offsets[i]..offsets[i + 1]]`.
    offsets: Vec<usize>,
}

impl EncodedRows {
    /// Row `i`'s bytes.
    pub fn row(&self, i: usize) -> &[u8] {
        &self.data[self.offsets[i]..self.offsets[i + 1]]
    }

    /// Number of rows.
    pub fn num_rows(&self) -> usize {
        self.offsets.len() - 1
    }
}

impl RowCodec {
    /// A codec for rows of `schema` (every column, in order).
    ///
    /// # Errors
    /// A column type Arrow's row format cannot hold either.
    pub fn new(schema: &Schema) -> Result<Self> {
        let types: Vec<DataType> = schema
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let columns = types.iter().map(column_codec).collect::<Result<Vec<_>>>()?;
        Ok(RowCodec {
            null_bytes: types.len().div_ceil(8),
            types,
            columns,
        })
    }

    /// The rows of `columns` (this codec's schema's columns, equally long), encoded.
    ///
    /// # Errors
    /// Columns of other types than the schema's (nested field names aside, as Arrow's row
    /// format: [`DataType::equals_datatype`]).
    pub fn encode(&self, columns: &[ArrayRef]) -> Result<EncodedRows> {
        let rows = columns.first().map_or(0, |c| c.len());
        if columns.len() != self.columns.len()
            || columns
                .iter()
                .zip(&self.types)
                .any(|(c, t)| !c.data_type().equals_datatype(t))
        {
            return Err(SluiceError::Internal(
                "row codec: columns differ from the schema".into(),
            ));
        }
        let views = self
            .columns
            .iter()
            .zip(columns)
            .map(|(codec, column)| ColumnView::new(codec, column))
            .collect::<Result<Vec<_>>>()?;
        // Lengths first, then every column written at each row's cursor.
        let mut lens = vec![self.null_bytes; rows];
        for view in &views {
            for (i, len) in lens.iter_mut().enumerate() {
                *len += view.len(i);
            }
        }
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        let mut total = 0;
        for len in &lens {
            total += len;
            offsets.push(total);
        }
        let mut data = vec![0u8; total];
        let mut cursors: Vec<usize> = offsets[..rows]
            .iter()
            .map(|o| o + self.null_bytes)
            .collect();
        for (k, view) in views.iter().enumerate() {
            for (i, cursor) in cursors.iter_mut().enumerate() {
                match view.put(&mut data, *cursor, i) {
                    Some(at) => *cursor = at,
                    None => data[offsets[i] + k / 8] |= 1 << (k % 8),
                }
            }
        }
        Ok(EncodedRows { data, offsets })
    }

    /// The columns of `rows` (bytes this codec encoded), in order.
    ///
    /// # Errors
    /// Bytes this codec did not write (a corrupt row).
    pub fn decode<'a>(&self, rows: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<ArrayRef>> {
        let rows: Vec<&[u8]> = rows.into_iter().collect();
        if rows.iter().any(|r| r.len() < self.null_bytes) {
            return Err(corrupt());
        }
        let mut cursors = vec![self.null_bytes; rows.len()];
        self.columns
            .iter()
            .zip(&self.types)
            .enumerate()
            .map(|(k, (codec, dt))| decode_column(codec, dt, k, &rows, &mut cursors))
            .collect()
    }
}

impl RowCodec {
    /// The columns of `rows` where `wanted[k]` (a column past `wanted`'s end is not
    /// wanted); every other column is all NULL, its bytes skipped unread. For a predicate
    /// over a few columns of held rows (a join's residual condition).
    ///
    /// # Errors
    /// As [`Self::decode`].
    pub fn decode_only<'a>(
        &self,
        rows: impl IntoIterator<Item = &'a [u8]>,
        wanted: &[bool],
    ) -> Result<Vec<ArrayRef>> {
        let rows: Vec<&[u8]> = rows.into_iter().collect();
        if rows.iter().any(|r| r.len() < self.null_bytes) {
            return Err(corrupt());
        }
        let last = wanted.iter().rposition(|&w| w);
        let mut cursors = vec![self.null_bytes; rows.len()];
        self.columns
            .iter()
            .zip(&self.types)
            .enumerate()
            .map(|(k, (codec, dt))| {
                if wanted.get(k).copied().unwrap_or(false) {
                    decode_column(codec, dt, k, &rows, &mut cursors)
                } else {
                    if last.is_some_and(|last| k < last) {
                        skip_column(codec, k, &rows, &mut cursors)?;
                    }
                    Ok(new_null_array(dt, rows.len()))
                }
            })
            .collect()
    }
}

/// Advances each row's cursor past column `k`, reading exactly what [`decode_column`]
/// reads.
fn skip_column(codec: &ColumnCodec, k: usize, rows: &[&[u8]], cursors: &mut [usize]) -> Result<()> {
    let is_null = |row: &[u8]| row[k / 8] & (1 << (k % 8)) != 0;
    for (row, at) in rows.iter().zip(cursors.iter_mut()) {
        let len = match codec {
            ColumnCodec::Null => 0,
            ColumnCodec::RowFormat(_) => get_varint(row, at)? as usize,
            _ if is_null(row) => 0,
            ColumnCodec::Int { .. } => {
                get_varint(row, at)?;
                0
            }
            ColumnCodec::Raw { width } => *width,
            ColumnCodec::Boolean => 1,
            ColumnCodec::Bytes(_) => get_varint(row, at)? as usize,
        };
        *at = at
            .checked_add(len)
            .filter(|&e| e <= row.len())
            .ok_or_else(corrupt)?;
    }
    Ok(())
}

fn corrupt() -> SluiceError {
    SluiceError::Internal("row codec: a held row's bytes are corrupt".into())
}

fn column_codec(dt: &DataType) -> Result<ColumnCodec> {
    use DataType::*;
    Ok(match dt {
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 | Date32 | Date64
        | Time32(_) | Time64(_) | Timestamp(..) | Duration(_) => ColumnCodec::Int {
            width: dt.primitive_width().expect("a primitive type"),
        },
        Float16 | Float32 | Float64 | Decimal32(..) | Decimal64(..) | Decimal128(..)
        | Decimal256(..) | Interval(_) => ColumnCodec::Raw {
            width: dt.primitive_width().expect("a primitive type"),
        },
        Boolean => ColumnCodec::Boolean,
        Utf8 => ColumnCodec::Bytes(BytesLayout::Utf8),
        LargeUtf8 => ColumnCodec::Bytes(BytesLayout::LargeUtf8),
        Utf8View => ColumnCodec::Bytes(BytesLayout::Utf8View),
        Binary => ColumnCodec::Bytes(BytesLayout::Binary),
        LargeBinary => ColumnCodec::Bytes(BytesLayout::LargeBinary),
        BinaryView => ColumnCodec::Bytes(BytesLayout::BinaryView),
        Null => ColumnCodec::Null,
        other => ColumnCodec::RowFormat(RowConverter::new(vec![SortField::new(other.clone())])?),
    })
}

/// A fixed-width value's bytes: `width` bytes of `values` (a primitive column's value
/// buffer from its first row).
fn fixed_at(values: &[u8], width: usize, i: usize) -> &[u8] {
    &values[i * width..(i + 1) * width]
}

/// The sign-extended integer a fixed-width value's bytes hold.
fn int_of(b: &[u8]) -> i64 {
    match b.len() {
        1 => i64::from(b[0] as i8),
        2 => i64::from(i16::from_le_bytes([b[0], b[1]])),
        4 => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        _ => i64::from_le_bytes(b.try_into().expect("8 bytes")),
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Writes `v` as an LEB128 varint at `at`; returns the position after it.
fn put_varint(data: &mut [u8], mut at: usize, mut v: u64) -> usize {
    while v >= 0x80 {
        data[at] = (v as u8) | 0x80;
        v >>= 7;
        at += 1;
    }
    data[at] = v as u8;
    at + 1
}

/// Reads an LEB128 varint at `*at`, advancing it.
fn get_varint(row: &[u8], at: &mut usize) -> Result<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *row.get(*at).ok_or_else(corrupt)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err(corrupt())
}

/// One column as [`RowCodec::encode`] reads it: downcast once, then read per row.
struct ColumnView<'a> {
    /// The column's validity (`None`: no NULLs).
    nulls: Option<&'a NullBuffer>,
    values: Values<'a>,
}

/// A column's values by how they are written.
enum Values<'a> {
    /// Integer-like, `width` bytes each (the value buffer from the first row): varints.
    Int {
        width: usize,
        bytes: Buffer,
    },
    /// Other fixed-width, `width` bytes each: raw.
    Raw {
        width: usize,
        bytes: Buffer,
    },
    Boolean(&'a BooleanArray),
    /// Offsets into `values` (`Utf8`, `Binary`).
    Bytes32 {
        offsets: &'a [i32],
        values: &'a [u8],
    },
    /// Offsets into `values` (`LargeUtf8`, `LargeBinary`).
    Bytes64 {
        offsets: &'a [i64],
        values: &'a [u8],
    },
    StringView(&'a StringViewArray),
    BinaryView(&'a BinaryViewArray),
    /// Arrow's row format of the column.
    RowFormat(Rows),
    /// The `NULL` type.
    Null,
}

/// A string or binary array's offsets and value bytes (one layout for both).
fn offsets_and_values<T: ByteArrayType>(a: &GenericByteArray<T>) -> (&[T::Offset], &[u8]) {
    (a.value_offsets(), a.value_data())
}

impl<'a> ColumnView<'a> {
    fn new(codec: &ColumnCodec, column: &'a ArrayRef) -> Result<Self> {
        // A fixed-width column's value bytes from its first row (the buffer is shared).
        let fixed = |width: usize| {
            let d = column.to_data();
            d.buffers()[0].slice_with_length(d.offset() * width, d.len() * width)
        };
        let values = match codec {
            ColumnCodec::Int { width } => Values::Int {
                width: *width,
                bytes: fixed(*width),
            },
            ColumnCodec::Raw { width } => Values::Raw {
                width: *width,
                bytes: fixed(*width),
            },
            ColumnCodec::Boolean => Values::Boolean(column.as_boolean()),
            ColumnCodec::Bytes(layout) => match layout {
                BytesLayout::Utf8 => {
                    let (offsets, values) = offsets_and_values(column.as_string::<i32>());
                    Values::Bytes32 { offsets, values }
                }
                BytesLayout::Binary => {
                    let (offsets, values) = offsets_and_values(column.as_binary::<i32>());
                    Values::Bytes32 { offsets, values }
                }
                BytesLayout::LargeUtf8 => {
                    let (offsets, values) = offsets_and_values(column.as_string::<i64>());
                    Values::Bytes64 { offsets, values }
                }
                BytesLayout::LargeBinary => {
                    let (offsets, values) = offsets_and_values(column.as_binary::<i64>());
                    Values::Bytes64 { offsets, values }
                }
                BytesLayout::Utf8View => Values::StringView(column.as_string_view()),
                BytesLayout::BinaryView => Values::BinaryView(column.as_binary_view()),
            },
            ColumnCodec::RowFormat(c) => {
                Values::RowFormat(c.convert_columns(&[Arc::clone(column)])?)
            }
            ColumnCodec::Null => Values::Null,
        };
        let nulls = match values {
            // Its row format holds the NULL.
            Values::RowFormat(_) => None,
            _ => column.nulls(),
        };
        Ok(ColumnView { nulls, values })
    }

    /// Whether row `i` is written as NULL (its bitmap bit, no value).
    #[inline]
    fn is_null(&self, i: usize) -> bool {
        matches!(self.values, Values::Null) || self.nulls.is_some_and(|n| n.is_null(i))
    }

    /// Row `i`'s bytes (string and binary layouts).
    #[inline]
    fn bytes(&self, i: usize) -> &[u8] {
        match &self.values {
            Values::Bytes32 { offsets, values } => {
                &values[offsets[i] as usize..offsets[i + 1] as usize]
            }
            Values::Bytes64 { offsets, values } => {
                &values[offsets[i] as usize..offsets[i + 1] as usize]
            }
            Values::StringView(a) => a.value(i).as_bytes(),
            Values::BinaryView(a) => a.value(i),
            Values::RowFormat(rows) => rows.row(i).data(),
            _ => &[],
        }
    }

    /// Bytes row `i`'s value takes (none when NULL).
    #[inline]
    fn len(&self, i: usize) -> usize {
        if self.is_null(i) {
            return 0;
        }
        match &self.values {
            Values::Int { width, bytes } => varint_len(zigzag(int_of(fixed_at(bytes, *width, i)))),
            Values::Raw { width, .. } => *width,
            Values::Boolean(_) => 1,
            Values::Null => 0,
            _ => {
                let n = self.bytes(i).len();
                varint_len(n as u64) + n
            }
        }
    }

    /// Writes row `i`'s value at `at`; returns the position after it, or `None` when the
    /// value is NULL (nothing written).
    #[inline]
    fn put(&self, data: &mut [u8], at: usize, i: usize) -> Option<usize> {
        if self.is_null(i) {
            return None;
        }
        Some(match &self.values {
            Values::Int { width, bytes } => {
                put_varint(data, at, zigzag(int_of(fixed_at(bytes, *width, i))))
            }
            Values::Raw { width, bytes } => {
                data[at..at + width].copy_from_slice(fixed_at(bytes, *width, i));
                at + width
            }
            Values::Boolean(a) => {
                data[at] = u8::from(a.value(i));
                at + 1
            }
            Values::Null => at,
            _ => {
                let b = self.bytes(i);
                let at = put_varint(data, at, b.len() as u64);
                data[at..at + b.len()].copy_from_slice(b);
                at + b.len()
            }
        })
    }
}

/// Column `k` of `rows`, read at each row's cursor (advanced past it).
fn decode_column(
    codec: &ColumnCodec,
    dt: &DataType,
    k: usize,
    rows: &[&[u8]],
    cursors: &mut [usize],
) -> Result<ArrayRef> {
    let n = rows.len();
    let is_null = |row: &[u8]| row[k / 8] & (1 << (k % 8)) != 0;
    let nulls = || -> Option<NullBuffer> {
        let valid: Vec<bool> = rows.iter().map(|r| !is_null(r)).collect();
        let nulls = NullBuffer::from(valid);
        (nulls.null_count() > 0).then_some(nulls)
    };
    let take = |row: &'_ [u8], at: &mut usize, len: usize| -> Result<std::ops::Range<usize>> {
        let start = *at;
        let end = start
            .checked_add(len)
            .filter(|&e| e <= row.len())
            .ok_or_else(corrupt)?;
        *at = end;
        Ok(start..end)
    };
    match codec {
        ColumnCodec::Int { width } | ColumnCodec::Raw { width } => {
            let mut values = MutableBuffer::from_len_zeroed(n * width);
            for (i, (row, at)) in rows.iter().zip(cursors.iter_mut()).enumerate() {
                if is_null(row) {
                    continue;
                }
                let slot = &mut values.as_slice_mut()[i * width..(i + 1) * width];
                if let ColumnCodec::Int { .. } = codec {
                    let v = unzigzag(get_varint(row, at)?).to_le_bytes();
                    slot.copy_from_slice(&v[..*width]);
                } else {
                    slot.copy_from_slice(&row[take(row, at, *width)?]);
                }
            }
            let data = ArrayData::builder(dt.clone())
                .len(n)
                .add_buffer(values.into())
                .nulls(nulls())
                .build()?;
            Ok(make_array(data))
        }
        ColumnCodec::Boolean => {
            let mut values = BooleanBufferBuilder::new(n);
            for (row, at) in rows.iter().zip(cursors.iter_mut()) {
                let v = !is_null(row) && row[take(row, at, 1)?][0] != 0;
                values.append(v);
            }
            Ok(Arc::new(BooleanArray::new(values.finish(), nulls())))
        }
        ColumnCodec::Bytes(layout) => {
            let mut value_of =
                |row: &'_ [u8], at: &mut usize| -> Result<Option<std::ops::Range<usize>>> {
                    if is_null(row) {
                        return Ok(None);
                    }
                    let len = get_varint(row, at)? as usize;
                    take(row, at, len).map(Some)
                };
            match layout {
                BytesLayout::Utf8 | BytesLayout::Binary => decode_bytes::<i32>(
                    rows,
                    cursors,
                    &mut value_of,
                    matches!(layout, BytesLayout::Utf8),
                ),
                BytesLayout::LargeUtf8 | BytesLayout::LargeBinary => decode_bytes::<i64>(
                    rows,
                    cursors,
                    &mut value_of,
                    matches!(layout, BytesLayout::LargeUtf8),
                ),
                BytesLayout::Utf8View | BytesLayout::BinaryView => {
                    let mut b = BinaryViewBuilder::with_capacity(n);
                    for (row, at) in rows.iter().zip(cursors.iter_mut()) {
                        b.append_option(value_of(row, at)?.map(|r| &row[r]));
                    }
                    let binary = b.finish();
                    Ok(if matches!(layout, BytesLayout::Utf8View) {
                        Arc::new(binary.to_string_view().map_err(|_| corrupt())?)
                    } else {
                        Arc::new(binary)
                    })
                }
            }
        }
        ColumnCodec::RowFormat(converter) => {
            let mut slices = Vec::with_capacity(n);
            for (row, at) in rows.iter().zip(cursors.iter_mut()) {
                let len = get_varint(row, at)? as usize;
                slices.push(&row[take(row, at, len)?]);
            }
            let parser = converter.parser();
            let mut columns = converter.convert_rows(slices.iter().map(|s| parser.parse(s)))?;
            Ok(columns.remove(0))
        }
        ColumnCodec::Null => Ok(new_null_array(dt, n)),
    }
}

/// A string (`utf8`) or binary column of offset type `O` from each row's value range.
fn decode_bytes<O: OffsetSizeTrait>(
    rows: &[&[u8]],
    cursors: &mut [usize],
    value_of: &mut impl FnMut(&[u8], &mut usize) -> Result<Option<std::ops::Range<usize>>>,
    utf8: bool,
) -> Result<ArrayRef> {
    let mut b = GenericBinaryBuilder::<O>::with_capacity(rows.len(), 0);
    for (row, at) in rows.iter().zip(cursors.iter_mut()) {
        b.append_option(value_of(row, at)?.map(|r| &row[r]));
    }
    let binary = b.finish();
    if utf8 {
        let strings =
            datafusion_common::arrow::array::GenericStringArray::<O>::try_from_binary(binary)
                .map_err(|_| corrupt())?;
        Ok(Arc::new(strings))
    } else {
        Ok(Arc::new(binary))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::array::{
        BinaryArray, Date32Array, Decimal128Array, Float64Array, Int16Array, Int32Array,
        Int64Array, Int8Array, LargeStringArray, ListArray, NullArray, StringArray,
        StringViewArray, StructArray, TimestampMillisecondArray, UInt64Array,
    };
    use datafusion_common::arrow::datatypes::{Field, Int32Type};

    fn schema_of(columns: &[ArrayRef]) -> Schema {
        Schema::new(
            columns
                .iter()
                .enumerate()
                .map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true))
                .collect::<Vec<_>>(),
        )
    }

    fn round_trip(columns: &[ArrayRef]) -> Vec<ArrayRef> {
        let codec = RowCodec::new(&schema_of(columns)).unwrap();
        let rows = codec.encode(columns).unwrap();
        assert_eq!(rows.num_rows(), columns[0].len());
        codec
            .decode((0..rows.num_rows()).map(|i| rows.row(i)))
            .unwrap()
    }

    #[test]
    fn a_row_is_its_null_bitmap_then_varints_and_length_prefixed_bytes() {
        // (BIGINT 5, VARCHAR 'ab', TIMESTAMP NULL): bitmap 0b100 (column 2 NULL), 5
        // zigzagged is 10, 'ab' is its length 2 and the bytes 97 98.
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![5])),
            Arc::new(StringArray::from(vec!["ab"])),
            Arc::new(TimestampMillisecondArray::from(vec![None])),
        ];
        let codec = RowCodec::new(&schema_of(&columns)).unwrap();
        let rows = codec.encode(&columns).unwrap();
        assert_eq!(rows.row(0), &[4, 10, 2, 97, 98]);
        // -1 zigzags to 1; 300 to 600 = 0b100_1011000: two varint bytes.
        let ints: Vec<ArrayRef> = vec![Arc::new(Int32Array::from(vec![-1, 300]))];
        let rows = RowCodec::new(&schema_of(&ints))
            .unwrap()
            .encode(&ints)
            .unwrap();
        assert_eq!(rows.row(0), &[0, 1]);
        assert_eq!(rows.row(1), &[0, 0xd8, 0x04]);
    }

    #[test]
    fn every_kind_of_column_decodes_to_what_was_encoded() {
        let list = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1), None]),
            None,
            Some(vec![]),
            Some(vec![Some(-7)]),
        ]);
        let row = StructArray::new(
            vec![
                Field::new("a", DataType::Int64, true),
                Field::new("s", DataType::Utf8, true),
            ]
            .into(),
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None, Some(3), Some(4)])),
                Arc::new(StringArray::from(vec![
                    Some("x"),
                    Some("y"),
                    None,
                    Some(""),
                ])),
            ],
            Some(NullBuffer::from(vec![true, true, false, true])),
        );
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int8Array::from(vec![
                Some(i8::MIN),
                None,
                Some(0),
                Some(i8::MAX),
            ])),
            Arc::new(Int16Array::from(vec![
                Some(-300),
                Some(300),
                None,
                Some(i16::MIN),
            ])),
            Arc::new(Int64Array::from(vec![
                Some(i64::MIN),
                Some(i64::MAX),
                Some(-1),
                None,
            ])),
            Arc::new(UInt64Array::from(vec![
                Some(u64::MAX),
                Some(0),
                None,
                Some(1 << 63),
            ])),
            Arc::new(Date32Array::from(vec![
                Some(-719_162),
                Some(20_000),
                None,
                Some(0),
            ])),
            Arc::new(
                TimestampMillisecondArray::from(vec![
                    Some(1_436_918_400_000),
                    None,
                    Some(-1),
                    Some(0),
                ])
                .with_timezone("UTC"),
            ),
            Arc::new(Float64Array::from(vec![
                Some(-0.0),
                Some(f64::NAN),
                None,
                Some(1.5),
            ])),
            Arc::new(
                Decimal128Array::from(vec![Some(-12_345), None, Some(i128::MAX), Some(0)])
                    .with_precision_and_scale(38, 2)
                    .unwrap(),
            ),
            Arc::new(BooleanArray::from(vec![
                Some(true),
                Some(false),
                None,
                Some(true),
            ])),
            Arc::new(StringArray::from(vec![
                Some(""),
                None,
                Some("Zürich"),
                Some("a"),
            ])),
            Arc::new(LargeStringArray::from(vec![
                None,
                Some("b"),
                Some(""),
                Some("c"),
            ])),
            Arc::new(StringViewArray::from(vec![
                Some("a string longer than twelve bytes"),
                Some("short"),
                None,
                Some(""),
            ])),
            Arc::new(BinaryArray::from(vec![
                Some(&[0u8, 255][..]),
                None,
                Some(&[][..]),
                Some(&[1u8][..]),
            ])),
            Arc::new(list),
            Arc::new(row),
            Arc::new(NullArray::new(4)),
        ];
        let decoded = round_trip(&columns);
        for (i, (got, want)) in decoded.iter().zip(&columns).enumerate() {
            assert_eq!(got.to_data(), want.to_data(), "column {i}");
        }
        // Any one column, or every third, alone: the others skipped and NULL.
        let codec = RowCodec::new(&schema_of(&columns)).unwrap();
        let encoded = codec.encode(&columns).unwrap();
        let rows = || (0..encoded.num_rows()).map(|i| encoded.row(i));
        let n = columns.len();
        let subsets = (0..n)
            .map(|k| (0..n).map(|i| i == k).collect::<Vec<bool>>())
            .chain((0..3).map(|r| (0..n).map(|i| i % 3 == r).collect()));
        for wanted in subsets {
            let got = codec.decode_only(rows(), &wanted).unwrap();
            for (i, (got, want)) in got.iter().zip(&columns).enumerate() {
                if wanted[i] {
                    assert_eq!(got.to_data(), want.to_data(), "column {i} of {wanted:?}");
                } else {
                    assert_eq!(
                        got.logical_null_count(),
                        got.len(),
                        "column {i} of {wanted:?}"
                    );
                }
            }
        }
        // Sliced columns (an offset into their buffers) encode their own rows.
        let sliced: Vec<ArrayRef> = columns.iter().map(|c| c.slice(1, 3)).collect();
        let decoded = round_trip(&sliced);
        for (i, (got, want)) in decoded.iter().zip(&sliced).enumerate() {
            assert_eq!(got.to_data(), want.to_data(), "sliced column {i}");
        }
    }

    #[test]
    fn equal_rows_have_equal_bytes_and_different_rows_different_bytes() {
        // Column boundaries cannot shift ('a','bc' vs 'ab','c'); NULL is not ''; -0.0 is
        // not 0.0 (as in Arrow's row format, floats by their bits).
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![
                Some("a"),
                Some("ab"),
                Some("a"),
                None,
                Some(""),
            ])),
            Arc::new(StringArray::from(vec![
                Some("bc"),
                Some("c"),
                Some("bc"),
                Some(""),
                None,
            ])),
            Arc::new(Float64Array::from(vec![0.0, 0.0, 0.0, -0.0, 0.0])),
        ];
        let codec = RowCodec::new(&schema_of(&columns)).unwrap();
        let rows = codec.encode(&columns).unwrap();
        assert_eq!(rows.row(0), rows.row(2));
        for (a, b) in [(0, 1), (0, 3), (3, 4), (1, 4)] {
            assert_ne!(rows.row(a), rows.row(b), "rows {a} and {b}");
        }
    }

    #[test]
    fn nested_field_names_may_differ_from_the_schema() {
        // A list whose item field is named "element" into a codec typed with "item": the
        // rows decode as the codec's type, values unchanged.
        let element = Arc::new(Field::new("element", DataType::Int32, true));
        let list: ArrayRef = Arc::new(ListArray::new(
            element,
            datafusion_common::arrow::buffer::OffsetBuffer::from_lengths([2, 0]),
            Arc::new(Int32Array::from(vec![1, 2])),
            None,
        ));
        let item = DataType::List(Arc::new(Field::new("item", DataType::Int32, true)));
        let codec = RowCodec::new(&Schema::new(vec![Field::new("l", item.clone(), true)])).unwrap();
        let rows = codec.encode(std::slice::from_ref(&list)).unwrap();
        let back = codec.decode([rows.row(0), rows.row(1)]).unwrap();
        assert_eq!(back[0].data_type(), &item);
        let want = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            Some(vec![]),
        ]);
        assert_eq!(back[0].to_data(), want.to_data());
    }

    #[test]
    fn bytes_not_written_by_the_codec_are_an_error() {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![1])),
            Arc::new(StringArray::from(vec!["abc"])),
        ];
        let codec = RowCodec::new(&schema_of(&columns)).unwrap();
        let rows = codec.encode(&columns).unwrap();
        let cut = &rows.row(0)[..rows.row(0).len() - 1];
        assert!(codec.decode([cut]).is_err());
        assert!(codec.decode([&[][..]]).is_err());
        assert!(codec.decode([&[0u8, 0x80][..]]).is_err());
        // A string length past the end of memory.
        let huge = [
            0u8, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ];
        assert!(codec.decode([&huge[..]]).is_err());
    }
}
