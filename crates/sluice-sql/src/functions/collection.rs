//! Flink's collection functions and value construction / access for `ARRAY`, `MAP` and
//! `ROW` (Flink docs: System (Built-in) Functions > Collection Functions, Value
//! Construction Functions, Value Access Functions).
//!
//! Arrays are Arrow `List`s (`sluice_common::types::array_type`). Most functions are one
//! rule: each result array is a list of *indices* into the argument's flattened values
//! (several arguments' values concatenated when a result mixes them), gathered at the end
//! with `take`, so a function works the same for every element type. Elements are compared
//! by their Arrow row-format bytes (`RowConverter`): equal values (NULL with NULL) have equal
//! bytes, and byte order is the ascending order Flink sorts by.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion_common::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, GenericListArray, Int32Array, ListArray, MapArray,
    StringBuilder, StructArray, UInt32Array,
};
use datafusion_common::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion_common::arrow::compute::{cast, concat, take};
use datafusion_common::arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion_common::arrow::row::{RowConverter, Rows, SortField};
use datafusion_common::{exec_err, plan_err, Result, ScalarValue};
use sluice_common::types::{array_type, map_type};

use super::rows::{int_at, ints, str_at, strs};
use super::udf::{Arg, Call, Def};

use Arg::{Any, Array as Arr, Common, Element, Int, Map, Str};

/// The functions of this module (`$array` and `$at` are `ARRAY[...]` and `x[i]`, planned
/// by `functions::planner`; `map` is `MAP[...]`, which the parser turns into a call).
pub(crate) const FUNCTIONS: &[Def] = &[
    Def::new("$array", &[&[Common]], ret_array_of_common, make_array).variadic(),
    Def::new("$at", &[&[Arr, Int], &[Map, Element]], ret_element, at),
    Def::new("map", &[&[Common, Any]], ret_map, make_map).pairs(),
    Def::new("row", &[&[Any]], ret_row, make_row).variadic(),
    Def::new("cardinality", &[&[Arr], &[Map]], ret_int, cardinality),
    // `UNNEST(...) WITH ORDINALITY`'s positions: [1, ..., longest array's length].
    Def::new("$ordinals", &[&[Arr]], ret_ordinals, ordinals).variadic(),
    // `UNNEST(x) AS t(c1, ..., ck)`'s column i of k: an ARRAY of ROW's field i, a MAP's
    // keys (1) or values (2), an ARRAY itself (k = 1), as arrays zipped by UNNEST.
    Def::new(
        "$unnest_part",
        &[&[Any, Int, Int]],
        ret_unnest_part,
        unnest_part,
    ),
    Def::new("element", &[&[Arr]], ret_element, element),
    Def::new("array_append", &[&[Arr, Element]], ret_first, append),
    Def::new("array_prepend", &[&[Arr, Element]], ret_first, prepend),
    Def::new("array_concat", &[&[Common]], ret_first, array_concat).variadic(),
    Def::new("array_contains", &[&[Arr, Element]], ret_bool, contains),
    Def::new("array_distinct", &[&[Arr]], ret_first, distinct),
    Def::new("array_except", &[&[Common, Common]], ret_first, except),
    Def::new(
        "array_intersect",
        &[&[Common, Common]],
        ret_first,
        intersect,
    ),
    Def::new("array_union", &[&[Common, Common]], ret_first, union),
    Def::new(
        "array_join",
        &[&[Arr, Str], &[Arr, Str, Str]],
        ret_string,
        array_join,
    ),
    Def::new("array_max", &[&[Arr]], ret_element, array_max),
    Def::new("array_min", &[&[Arr]], ret_element, array_min),
    Def::new("array_position", &[&[Arr, Element]], ret_int, position),
    Def::new("array_remove", &[&[Arr, Element]], ret_first, remove),
    Def::new("array_reverse", &[&[Arr]], ret_first, reverse),
    Def::new(
        "array_slice",
        &[&[Arr, Int], &[Arr, Int, Int]],
        ret_first,
        slice,
    ),
    Def::new(
        "array_sort",
        &[&[Arr], &[Arr, Any], &[Arr, Any, Any]],
        ret_first,
        sort,
    ),
    Def::new("map_keys", &[&[Map]], ret_map_keys, map_keys),
    Def::new("map_values", &[&[Map]], ret_map_values, map_values),
    Def::new("map_entries", &[&[Map]], ret_map_entries, map_entries),
    Def::new(
        "map_from_arrays",
        &[&[Arr, Arr]],
        ret_map_from_arrays,
        map_from_arrays,
    ),
    Def::new("map_union", &[&[Common]], ret_first, map_union).variadic(),
    Def::new("split", &[&[Str, Str]], ret_strings, split),
    Def::new(
        "str_to_map",
        &[&[Str], &[Str, Str, Str]],
        ret_string_map,
        str_to_map,
    ),
];

type Types<'a> = &'a [DataType];
type Consts<'a> = &'a [Option<&'a ScalarValue>];

/// The element field of a list type, or a map's value field: what `x[i]` gives.
fn element_field(t: &DataType) -> Option<FieldRef> {
    match t {
        DataType::List(f) => Some(Arc::clone(f)),
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) => Some(Arc::clone(&kv[1])),
            _ => None,
        },
        _ => None,
    }
}

/// A map type's (key, value) fields.
fn map_fields(t: &DataType) -> Option<(FieldRef, FieldRef)> {
    match t {
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => Some((Arc::clone(&kv[0]), Arc::clone(&kv[1]))),
            _ => None,
        },
        _ => None,
    }
}

/// The type an [`Arg::Element`] argument is coerced to when the first argument has type
/// `t`: an array's element type, a map's key type (`ARRAY_CONTAINS(a, x)`, `m[k]`).
pub(crate) fn needle_type(t: &DataType) -> Option<DataType> {
    match t {
        DataType::List(f) => Some(f.data_type().clone()),
        _ => map_fields(t).map(|(k, _)| k.data_type().clone()),
    }
}

fn ret_array_of_common(t: Types, _: Consts) -> Result<DataType> {
    Ok(array_type(
        t.first().cloned().unwrap_or(DataType::Null),
        true,
    ))
}
fn ret_element(t: Types, _: Consts) -> Result<DataType> {
    match element_field(&t[0]) {
        Some(f) => Ok(f.data_type().clone()),
        None => plan_err!("expected an ARRAY or a MAP"),
    }
}
fn ret_first(t: Types, _: Consts) -> Result<DataType> {
    Ok(t[0].clone())
}
fn ret_int(_: Types, _: Consts) -> Result<DataType> {
    Ok(DataType::Int32)
}
fn ret_bool(_: Types, _: Consts) -> Result<DataType> {
    Ok(DataType::Boolean)
}
fn ret_string(t: Types, _: Consts) -> Result<DataType> {
    match element_field(&t[0]).map(|f| f.data_type().clone()) {
        Some(DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 | DataType::Null) => {
            Ok(DataType::Utf8)
        }
        _ => plan_err!("ARRAY_JOIN takes an ARRAY<STRING>"),
    }
}
fn ret_strings(_: Types, _: Consts) -> Result<DataType> {
    Ok(array_type(DataType::Utf8, true))
}
fn ret_string_map(_: Types, _: Consts) -> Result<DataType> {
    Ok(map_type(DataType::Utf8, DataType::Utf8, true))
}
fn ret_map(t: Types, _: Consts) -> Result<DataType> {
    let key = t.first().cloned().unwrap_or(DataType::Null);
    let values: Vec<DataType> = t.iter().skip(1).step_by(2).cloned().collect();
    let value = datafusion_expr::type_coercion::binary::type_union_resolution(&values)
        .map_or_else(|| plan_err!("MAP's values have no common type"), Ok)?;
    Ok(map_type(key, value, true))
}
fn ret_row(t: Types, _: Consts) -> Result<DataType> {
    Ok(DataType::Struct(row_fields(t)))
}
fn ret_map_keys(t: Types, _: Consts) -> Result<DataType> {
    let (k, _) = map_fields(&t[0]).expect("a MAP");
    Ok(array_type(k.data_type().clone(), true))
}
fn ret_map_values(t: Types, _: Consts) -> Result<DataType> {
    let (_, v) = map_fields(&t[0]).expect("a MAP");
    Ok(array_type(v.data_type().clone(), true))
}
fn ret_map_entries(t: Types, _: Consts) -> Result<DataType> {
    let (k, v) = map_fields(&t[0]).expect("a MAP");
    Ok(array_type(
        DataType::Struct(Fields::from(vec![
            Field::new("key", k.data_type().clone(), true),
            Field::new("value", v.data_type().clone(), true),
        ])),
        true,
    ))
}
fn ret_map_from_arrays(t: Types, _: Consts) -> Result<DataType> {
    let k = element_field(&t[0]).expect("an ARRAY");
    let v = element_field(&t[1]).expect("an ARRAY");
    Ok(map_type(k.data_type().clone(), v.data_type().clone(), true))
}

/// `ROW(a, b, ...)`'s fields: Calcite names them `EXPR$0`, `EXPR$1`, ...
fn row_fields(t: &[DataType]) -> Fields {
    t.iter()
        .enumerate()
        .map(|(i, t)| Field::new(format!("EXPR${i}"), t.clone(), true))
        .collect()
}

/// The list argument `i` of a call.
fn list<'a>(c: &'a Call, i: usize) -> &'a ListArray {
    c.args[i].as_list::<i32>()
}

/// The element range of row `row`, `None` when the list is NULL.
fn range(l: &ListArray, row: usize) -> Option<std::ops::Range<usize>> {
    if l.is_null(row) {
        return None;
    }
    let o = l.value_offsets();
    Some(o[row] as usize..o[row + 1] as usize)
}

/// Result lists built as indices into one values array (see the module docs).
struct ListOut {
    offsets: Vec<i32>,
    indices: Vec<Option<u32>>,
    valid: Vec<bool>,
}

impl ListOut {
    fn new(rows: usize) -> Self {
        ListOut {
            offsets: {
                let mut v = Vec::with_capacity(rows + 1);
                v.push(0);
                v
            },
            indices: Vec::new(),
            valid: Vec::with_capacity(rows),
        }
    }

    /// Ends a row holding the indices pushed since the last one.
    fn row(&mut self, items: impl IntoIterator<Item = usize>) {
        self.indices
            .extend(items.into_iter().map(|i| Some(i as u32)));
        self.offsets.push(self.indices.len() as i32);
        self.valid.push(true);
    }

    /// A NULL row.
    fn null(&mut self) {
        self.offsets.push(self.indices.len() as i32);
        self.valid.push(false);
    }

    fn finish(self, field: FieldRef, values: &ArrayRef) -> Result<ArrayRef> {
        let idx = UInt32Array::from(self.indices);
        let taken = take(values.as_ref(), &idx, None)?;
        let taken = if taken.data_type() != field.data_type() {
            cast(&taken, field.data_type())?
        } else {
            taken
        };
        Ok(Arc::new(ListArray::try_new(
            field,
            OffsetBuffer::new(self.offsets.into()),
            taken,
            nulls_of(self.valid),
        )?))
    }
}

/// A validity buffer from per-row flags; `None` when every row is valid.
fn nulls_of(valid: Vec<bool>) -> Option<NullBuffer> {
    let nulls = NullBuffer::from(valid);
    (nulls.null_count() > 0).then_some(nulls)
}

/// Result maps built as (key, value) indices into one keys array and one values array. An
/// entry whose key equals (row bytes) one already in its row replaces that entry's value
/// and keeps its position, as Flink's maps (Java `HashMap`s) do; a NULL key is an error
/// (an Arrow map cannot hold one).
struct MapOut<'a> {
    keys: &'a ArrayRef,
    key_rows: Rows,
    key_idx: Vec<u32>,
    value_idx: Vec<u32>,
    offsets: Vec<i32>,
    valid: Vec<bool>,
}

impl<'a> MapOut<'a> {
    fn new(keys: &'a ArrayRef, rows: usize) -> Result<Self> {
        let converter = RowConverter::new(vec![SortField::new(keys.data_type().clone())])?;
        let key_rows = converter.convert_columns(&[Arc::clone(keys)])?;
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        Ok(MapOut {
            keys,
            key_rows,
            key_idx: Vec::new(),
            value_idx: Vec::new(),
            offsets,
            valid: Vec::with_capacity(rows),
        })
    }

    /// Adds the entry (key `k`, value `v`) to the current row.
    fn put(&mut self, k: usize, v: usize) -> Result<()> {
        if self.keys.is_null(k) {
            return exec_err!("a MAP key must not be NULL");
        }
        let start = self.offsets[self.offsets.len() - 1] as usize;
        let rows = &self.key_rows;
        match (start..self.key_idx.len())
            .find(|&e| rows.row(self.key_idx[e] as usize) == rows.row(k))
        {
            Some(e) => self.value_idx[e] = v as u32,
            None => {
                self.key_idx.push(k as u32);
                self.value_idx.push(v as u32);
            }
        }
        Ok(())
    }

    /// Ends the current row: its entries, or NULL (`valid` false, no entries put).
    fn end_row(&mut self, valid: bool) {
        self.offsets.push(self.key_idx.len() as i32);
        self.valid.push(valid);
    }

    /// The `MapArray` of type `map` (keys and values cast to its entry types).
    fn finish(self, map: &DataType, values: &ArrayRef) -> Result<ArrayRef> {
        let DataType::Map(entries, _) = map else {
            return exec_err!("a map function must return a MAP, not {map}");
        };
        let DataType::Struct(kv) = entries.data_type() else {
            return exec_err!("a MAP's entries must be a ROW");
        };
        let k = take(self.keys.as_ref(), &UInt32Array::from(self.key_idx), None)?;
        let v = take(values.as_ref(), &UInt32Array::from(self.value_idx), None)?;
        let k = cast(&k, kv[0].data_type())?;
        let v = cast(&v, kv[1].data_type())?;
        let s = StructArray::try_new(kv.clone(), vec![k, v], None)?;
        Ok(Arc::new(MapArray::try_new(
            Arc::clone(entries),
            OffsetBuffer::new(self.offsets.into()),
            s,
            nulls_of(self.valid),
            false,
        )?))
    }
}

/// The list field of the result type.
fn out_field(c: &Call) -> FieldRef {
    match c.return_type {
        DataType::List(f) => Arc::clone(f),
        other => Arc::new(Field::new_list_field(other.clone(), true)),
    }
}

/// Arrays concatenated, with the index where each starts.
struct Values {
    values: ArrayRef,
    bases: Vec<usize>,
}

impl Values {
    fn of(parts: &[&ArrayRef]) -> Result<Values> {
        let mut bases = Vec::with_capacity(parts.len());
        let mut at = 0;
        for p in parts {
            bases.push(at);
            at += p.len();
        }
        let refs: Vec<&dyn Array> = parts.iter().map(|p| p.as_ref() as &dyn Array).collect();
        let values = if refs.len() == 1 {
            Arc::clone(parts[0])
        } else {
            concat(&refs)?
        };
        Ok(Values { values, bases })
    }

    /// The row-format bytes of every value (equality and ascending order).
    fn rows(&self) -> Result<Rows> {
        let converter = RowConverter::new(vec![SortField::new(self.values.data_type().clone())])?;
        Ok(converter.convert_columns(&[Arc::clone(&self.values)])?)
    }
}

/// A list argument's values and a second argument (an element column, or a second list's
/// values) in one `Values`: the list's values start at 0, the other at `bases[1]`.
fn list_and(c: &Call, other: &ArrayRef) -> Result<Values> {
    let l = list(c, 0);
    let values = l.values();
    let other = if other.data_type() != values.data_type() {
        cast(other, values.data_type())?
    } else {
        Arc::clone(other)
    };
    Values::of(&[values, &other])
}

fn make_array(c: &Call) -> Result<ArrayRef> {
    let parts: Vec<&ArrayRef> = c.args.iter().collect();
    let v = Values::of(&parts)?;
    let mut out = ListOut::new(c.rows);
    for i in 0..c.rows {
        out.row(v.bases.iter().map(|b| b + i));
    }
    out.finish(out_field(c), &v.values)
}

fn at(c: &Call) -> Result<ArrayRef> {
    if let DataType::Map(_, _) = c.args[0].data_type() {
        return map_get(c);
    }
    let l = list(c, 0);
    let idx = ints(&c.args[1]);
    let mut picked = Vec::with_capacity(c.rows);
    for i in 0..c.rows {
        let p = match (range(l, i), int_at(idx, i)) {
            (Some(r), Some(k)) => {
                if k < 1 {
                    return exec_err!(
                        "Array element access needs an index starting at 1 but was {k}."
                    );
                }
                let k = k as usize - 1;
                (k < r.len()).then(|| (r.start + k) as u32)
            }
            _ => None,
        };
        picked.push(p);
    }
    Ok(take(l.values().as_ref(), &UInt32Array::from(picked), None)?)
}

/// `m[key]`: the value of `key`, NULL when the map has none (the last entry of a key wins,
/// though maps Sluice builds have each key once).
fn map_get(c: &Call) -> Result<ArrayRef> {
    let m = c.args[0].as_map();
    let keys = Values::of(&[m.keys(), &cast(&c.args[1], m.key_type())?])?;
    let rows = keys.rows()?;
    let probe = keys.bases[1];
    let offsets = m.value_offsets();
    let mut picked = Vec::with_capacity(c.rows);
    for i in 0..c.rows {
        let p = if m.is_null(i) || c.args[1].is_null(i) {
            None
        } else {
            (offsets[i] as usize..offsets[i + 1] as usize)
                .rev()
                .find(|&j| rows.row(j) == rows.row(probe + i))
                .map(|j| j as u32)
        };
        picked.push(p);
    }
    Ok(take(m.values().as_ref(), &UInt32Array::from(picked), None)?)
}

/// `MAP[k1, v1, k2, v2, ...]`: a later entry of an equal key replaces the earlier one (as
/// Flink's `MapData` built from Java's `HashMap`), keeping the key's first position.
fn make_map(c: &Call) -> Result<ArrayRef> {
    let Some((key, value)) = map_fields(c.return_type) else {
        return exec_err!("MAP[...] must return a MAP");
    };
    let n = c.args.len() / 2;
    let key_parts: Vec<ArrayRef> = (0..n)
        .map(|j| cast(&c.args[2 * j], key.data_type()))
        .collect::<std::result::Result<_, _>>()?;
    let value_parts: Vec<ArrayRef> = (0..n)
        .map(|j| cast(&c.args[2 * j + 1], value.data_type()))
        .collect::<std::result::Result<_, _>>()?;
    let keys = Values::of(&key_parts.iter().collect::<Vec<_>>())?;
    let values = Values::of(&value_parts.iter().collect::<Vec<_>>())?;
    let mut out = MapOut::new(&keys.values, c.rows)?;
    for i in 0..c.rows {
        for j in 0..n {
            out.put(keys.bases[j] + i, values.bases[j] + i)?;
        }
        out.end_row(true);
    }
    out.finish(c.return_type, &values.values)
}

fn make_row(c: &Call) -> Result<ArrayRef> {
    let DataType::Struct(fields) = c.return_type else {
        return exec_err!("ROW(...) must return a ROW");
    };
    let columns = c
        .args
        .iter()
        .zip(fields.iter())
        .map(|(a, f)| cast(a, f.data_type()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(Arc::new(StructArray::try_new(
        fields.clone(),
        columns,
        None,
    )?))
}

fn ret_ordinals(_: Types, _: Consts) -> Result<DataType> {
    Ok(array_type(DataType::Int32, false))
}

/// The arrays `UNNEST(x) AS t(c1, ..., ck)` zips, one per alias column (Flink SQL
/// "Joins > Array Expansion": an ARRAY of ROW gives the rows' fields, a MAP its keys and
/// values): the element fields of `x`, or `x` itself when it is an ARRAY of another type
/// (then `k` = 1).
fn unnest_columns(t: &DataType) -> Result<Vec<FieldRef>> {
    match t {
        DataType::List(item) => match item.data_type() {
            DataType::Struct(fields) => Ok(fields.iter().cloned().collect()),
            _ => Ok(vec![Arc::clone(item)]),
        },
        DataType::Map(_, _) if sluice_common::types::is_multiset(t) => {
            plan_err!("UNNEST of a MULTISET is not supported yet (only of an ARRAY or a MAP)")
        }
        DataType::Map(_, _) => {
            let (k, v) = map_fields(t).expect("a MAP");
            Ok(vec![k, v])
        }
        other => plan_err!(
            "UNNEST expands an ARRAY or a MAP, not {}",
            sluice_common::types::flink_type_name(other)
        ),
    }
}

fn ret_unnest_part(t: Types, consts: Consts) -> Result<DataType> {
    let constant = |i: usize| match consts
        .get(i)
        .copied()
        .flatten()
        .and_then(|v| v.cast_to(&DataType::Int64).ok())
    {
        Some(ScalarValue::Int64(Some(n))) if n > 0 => Ok(n as usize),
        _ => plan_err!("$unnest_part needs constant positions"),
    };
    let (i, k) = (constant(1)?, constant(2)?);
    let columns = unnest_columns(&t[0])?;
    if columns.len() != k {
        let names: Vec<String> = columns.iter().map(|f| format!("'{}'", f.name())).collect();
        return plan_err!(
            "List of column aliases must have same degree as table; UNNEST of {} has {} \
             columns ({}), whereas alias list has {k} columns",
            sluice_common::types::flink_type_name(&t[0]),
            columns.len(),
            names.join(", ")
        );
    }
    Ok(array_type(columns[i - 1].data_type().clone(), true))
}

fn unnest_part(c: &Call) -> Result<ArrayRef> {
    let x = &c.args[0];
    if x.is_empty() {
        return Ok(datafusion_common::arrow::array::new_empty_array(
            c.return_type,
        ));
    }
    let positions = ints(&c.args[1]);
    let i = (0..positions.len())
        .find_map(|r| int_at(positions, r))
        .unwrap_or(1)
        .max(1) as usize
        - 1;
    let (offsets, nulls, values) = match x.data_type() {
        DataType::Map(_, _) => {
            let m = x.as_map();
            let part = if i == 0 { m.keys() } else { m.values() };
            (m.offsets().clone(), m.nulls().cloned(), Arc::clone(part))
        }
        _ => {
            let list = x.as_list::<i32>();
            match list.values().as_struct_opt() {
                // A NULL row gives no row, as in Flink (every part drops the same ones, so
                // the parts stay aligned).
                Some(rows) if rows.null_count() > 0 => {
                    let mut offsets = vec![0i32];
                    let mut kept = Vec::new();
                    for r in 0..list.len() {
                        let (start, end) = (list.value_offsets()[r], list.value_offsets()[r + 1]);
                        kept.extend(
                            (start as u32..end as u32).filter(|&e| rows.is_valid(e as usize)),
                        );
                        offsets.push(kept.len() as i32);
                    }
                    let values = take(rows.column(i).as_ref(), &UInt32Array::from(kept), None)?;
                    (
                        OffsetBuffer::new(offsets.into()),
                        list.nulls().cloned(),
                        values,
                    )
                }
                Some(rows) => (
                    list.offsets().clone(),
                    list.nulls().cloned(),
                    Arc::clone(rows.column(i)),
                ),
                None => (
                    list.offsets().clone(),
                    list.nulls().cloned(),
                    Arc::clone(list.values()),
                ),
            }
        }
    };
    Ok(Arc::new(ListArray::try_new(
        out_field(c),
        offsets,
        values,
        nulls,
    )?))
}

fn ordinals(c: &Call) -> Result<ArrayRef> {
    let lists: Vec<_> = c.args.iter().map(|a| a.as_list::<i32>()).collect();
    let mut offsets = vec![0i32];
    let mut values = Vec::new();
    for i in 0..c.rows {
        let longest = lists
            .iter()
            .map(|l| if l.is_null(i) { 0 } else { l.value_length(i) })
            .max()
            .unwrap_or(0);
        values.extend(1..=longest);
        offsets.push(values.len() as i32);
    }
    let DataType::List(item) = ret_ordinals(&[], &[])? else {
        unreachable!("an array type")
    };
    Ok(Arc::new(ListArray::try_new(
        item,
        OffsetBuffer::new(offsets.into()),
        Arc::new(Int32Array::from(values)),
        None,
    )?))
}

fn cardinality(c: &Call) -> Result<ArrayRef> {
    let a = &c.args[0];
    let (offsets, nulls): (&[i32], _) = match a.data_type() {
        DataType::Map(_, _) => (a.as_map().value_offsets(), a.logical_nulls()),
        _ => (a.as_list::<i32>().value_offsets(), a.logical_nulls()),
    };
    Ok(Arc::new(Int32Array::new(
        (0..c.rows).map(|i| offsets[i + 1] - offsets[i]).collect(),
        nulls,
    )))
}

fn element(c: &Call) -> Result<ArrayRef> {
    let l = list(c, 0);
    let mut picked = Vec::with_capacity(c.rows);
    for i in 0..c.rows {
        picked.push(match range(l, i) {
            Some(r) if r.len() == 1 => Some(r.start as u32),
            Some(r) if r.len() > 1 => {
                return exec_err!(
                    "ELEMENT of an array of {} elements: it must have at most one",
                    r.len()
                )
            }
            _ => None,
        });
    }
    Ok(take(l.values().as_ref(), &UInt32Array::from(picked), None)?)
}

fn append_or_prepend(c: &Call, append: bool) -> Result<ArrayRef> {
    let v = list_and(c, &c.args[1])?;
    let l = list(c, 0);
    let mut out = ListOut::new(c.rows);
    for i in 0..c.rows {
        match range(l, i) {
            None => out.null(),
            Some(r) => {
                let extra = v.bases[1] + i;
                if append {
                    out.row(r.chain(std::iter::once(extra)))
                } else {
                    out.row(std::iter::once(extra).chain(r))
                }
            }
        }
    }
    out.finish(out_field(c), &v.values)
}

fn append(c: &Call) -> Result<ArrayRef> {
    append_or_prepend(c, true)
}
fn prepend(c: &Call) -> Result<ArrayRef> {
    append_or_prepend(c, false)
}

/// The values of several list arguments in one `Values` (their offsets shift by `bases`).
fn lists_values<'a>(c: &'a Call) -> Result<(Vec<&'a ListArray>, Values)> {
    let lists: Vec<&ListArray> = (0..c.args.len()).map(|i| list(c, i)).collect();
    let parts: Vec<&ArrayRef> = lists.iter().map(|l| l.values()).collect();
    let v = Values::of(&parts)?;
    Ok((lists, v))
}

fn array_concat(c: &Call) -> Result<ArrayRef> {
    let (lists, v) = lists_values(c)?;
    let mut out = ListOut::new(c.rows);
    'rows: for i in 0..c.rows {
        let mut items = Vec::new();
        for (j, l) in lists.iter().enumerate() {
            match range(l, i) {
                None => {
                    out.null();
                    continue 'rows;
                }
                Some(r) => items.extend(r.map(|e| v.bases[j] + e)),
            }
        }
        out.row(items);
    }
    out.finish(out_field(c), &v.values)
}

/// `ARRAY_CONTAINS` / `ARRAY_POSITION` / `ARRAY_REMOVE`: the positions (0-based, within
/// the row) of the elements equal to the needle, or `None` for a NULL array.
fn matches(
    c: &Call,
    mut f: impl FnMut(usize, Option<(std::ops::Range<usize>, Vec<bool>)>),
) -> Result<()> {
    let v = list_and(c, &c.args[1])?;
    let rows = v.rows()?;
    let l = list(c, 0);
    for i in 0..c.rows {
        let needle = rows.row(v.bases[1] + i);
        f(
            i,
            range(l, i).map(|r| {
                let eq = r.clone().map(|e| rows.row(e) == needle).collect();
                (r, eq)
            }),
        );
    }
    Ok(())
}

fn contains(c: &Call) -> Result<ArrayRef> {
    let mut out = Vec::with_capacity(c.rows);
    matches(c, |_, m| out.push(m.map(|(_, eq)| eq.contains(&true))))?;
    Ok(Arc::new(BooleanArray::from(out)))
}

fn position(c: &Call) -> Result<ArrayRef> {
    let mut out = Vec::with_capacity(c.rows);
    matches(c, |_, m| {
        out.push(m.map(|(_, eq)| eq.iter().position(|&b| b).map_or(0, |p| p as i32 + 1)))
    })?;
    Ok(Arc::new(Int32Array::from(out)))
}

fn remove(c: &Call) -> Result<ArrayRef> {
    let mut out = ListOut::new(c.rows);
    matches(c, |_, m| match m {
        None => out.null(),
        Some((r, eq)) => out.row(r.zip(eq).filter(|(_, e)| !e).map(|(i, _)| i)),
    })?;
    out.finish(out_field(c), list(c, 0).values())
}

fn distinct(c: &Call) -> Result<ArrayRef> {
    let l = list(c, 0);
    let v = Values::of(&[l.values()])?;
    let rows = v.rows()?;
    let mut out = ListOut::new(c.rows);
    for i in 0..c.rows {
        match range(l, i) {
            None => out.null(),
            Some(r) => {
                let mut seen = HashSet::new();
                out.row(r.filter(|&e| seen.insert(rows.row(e))).collect::<Vec<_>>());
            }
        }
    }
    out.finish(out_field(c), &v.values)
}

/// `ARRAY_EXCEPT`, `ARRAY_INTERSECT`, `ARRAY_UNION` over two arrays: NULL when either is.
fn set_op(c: &Call, op: fn(&[usize], &[usize], &Rows) -> Vec<usize>) -> Result<ArrayRef> {
    let (lists, v) = lists_values(c)?;
    let rows = v.rows()?;
    let mut out = ListOut::new(c.rows);
    for i in 0..c.rows {
        match (range(lists[0], i), range(lists[1], i)) {
            (Some(a), Some(b)) => {
                let a: Vec<usize> = a.collect();
                let b: Vec<usize> = b.map(|e| v.bases[1] + e).collect();
                out.row(op(&a, &b, &rows));
            }
            _ => out.null(),
        }
    }
    out.finish(out_field(c), &v.values)
}

fn except(c: &Call) -> Result<ArrayRef> {
    set_op(c, |a, b, rows| {
        let drop: HashSet<_> = b.iter().map(|&e| rows.row(e)).collect();
        let mut seen = HashSet::new();
        a.iter()
            .copied()
            .filter(|&e| !drop.contains(&rows.row(e)) && seen.insert(rows.row(e)))
            .collect()
    })
}

fn intersect(c: &Call) -> Result<ArrayRef> {
    set_op(c, |a, b, rows| {
        let keep: HashSet<_> = b.iter().map(|&e| rows.row(e)).collect();
        let mut seen = HashSet::new();
        a.iter()
            .copied()
            .filter(|&e| keep.contains(&rows.row(e)) && seen.insert(rows.row(e)))
            .collect()
    })
}

fn union(c: &Call) -> Result<ArrayRef> {
    set_op(c, |a, b, rows| {
        let mut seen = HashSet::new();
        a.iter()
            .chain(b)
            .copied()
            .filter(|&e| seen.insert(rows.row(e)))
            .collect()
    })
}

fn array_join(c: &Call) -> Result<ArrayRef> {
    let l = list(c, 0);
    let values = cast(l.values(), &DataType::Utf8)?;
    let values = values.as_string::<i32>();
    let sep = strs(&c.args[1]);
    let null_text = c.args.get(2).map(strs);
    let mut b = StringBuilder::new();
    for i in 0..c.rows {
        let (Some(r), Some(sep)) = (range(l, i), str_at(sep, i)) else {
            b.append_null();
            continue;
        };
        let replacement = null_text.map(|n| str_at(n, i));
        if replacement == Some(None) {
            b.append_null();
            continue;
        }
        let parts: Vec<&str> = r
            .filter_map(|e| {
                if values.is_null(e) {
                    replacement.flatten()
                } else {
                    Some(values.value(e))
                }
            })
            .collect();
        b.append_value(parts.join(sep));
    }
    Ok(Arc::new(b.finish()))
}

/// The greatest (`max`) or least non-NULL element, NULL for an empty or all-NULL array.
fn extreme(c: &Call, max: bool) -> Result<ArrayRef> {
    let l = list(c, 0);
    let v = Values::of(&[l.values()])?;
    let rows = v.rows()?;
    let mut picked = Vec::with_capacity(c.rows);
    for i in 0..c.rows {
        let r = range(l, i).unwrap_or(0..0);
        let best = r.filter(|&e| !v.values.is_null(e)).reduce(|a, b| {
            let b_wins = if max {
                rows.row(b) > rows.row(a)
            } else {
                rows.row(b) < rows.row(a)
            };
            if b_wins {
                b
            } else {
                a
            }
        });
        picked.push(best.map(|e| e as u32));
    }
    Ok(take(v.values.as_ref(), &UInt32Array::from(picked), None)?)
}

fn array_max(c: &Call) -> Result<ArrayRef> {
    extreme(c, true)
}
fn array_min(c: &Call) -> Result<ArrayRef> {
    extreme(c, false)
}

fn reverse(c: &Call) -> Result<ArrayRef> {
    let l = list(c, 0);
    let mut out = ListOut::new(c.rows);
    for i in 0..c.rows {
        match range(l, i) {
            None => out.null(),
            Some(r) => out.row(r.rev()),
        }
    }
    out.finish(out_field(c), l.values())
}

/// `ARRAY_SLICE(array, start[, end])`: positions from 1, negative ones count from the end
/// (-1 is the last), 0 is the first; both ends inclusive; NULL when an argument is.
fn slice(c: &Call) -> Result<ArrayRef> {
    let l = list(c, 0);
    let start = ints(&c.args[1]);
    let end = c.args.get(2).map(ints);
    let mut out = ListOut::new(c.rows);
    for i in 0..c.rows {
        let r = range(l, i);
        let s = int_at(start, i);
        let e = match end {
            Some(e) => int_at(e, i),
            None => Some(-1),
        };
        let (Some(r), Some(s), Some(e)) = (r, s, e) else {
            out.null();
            continue;
        };
        let n = r.len() as i64;
        let pos = |p: i64| if p < 0 { n + p + 1 } else { p };
        let (s, e) = (pos(s).max(1), pos(e).min(n));
        if s > e {
            out.row(std::iter::empty());
        } else {
            out.row((r.start + s as usize - 1)..(r.start + e as usize));
        }
    }
    out.finish(out_field(c), l.values())
}

/// `ARRAY_SORT(array[, ascending[, nulls_first]])`: ascending by default; NULLs first when
/// ascending and last when descending unless the third argument says.
fn sort(c: &Call) -> Result<ArrayRef> {
    use datafusion_common::arrow::compute::SortOptions;
    let l = list(c, 0);
    let flag = |k: usize| -> Result<Option<BooleanArray>> {
        c.args
            .get(k)
            .map(|a| cast(a, &DataType::Boolean).map(|b| b.as_boolean().clone()))
            .transpose()
            .map_err(Into::into)
    };
    let asc = flag(1)?;
    let nulls = flag(2)?;
    let values = l.values();
    let mut out = ListOut::new(c.rows);
    let mut converters: [Option<Rows>; 4] = [None, None, None, None];
    for i in 0..c.rows {
        let ascending = match &asc {
            Some(a) if a.is_null(i) => None,
            Some(a) => Some(a.value(i)),
            None => Some(true),
        };
        let nulls_first = match (&nulls, ascending) {
            (Some(n), _) if n.is_null(i) => None,
            (Some(n), _) => Some(n.value(i)),
            (None, a) => a,
        };
        let (Some(r), Some(ascending), Some(nulls_first)) = (range(l, i), ascending, nulls_first)
        else {
            out.null();
            continue;
        };
        let slot = usize::from(ascending) * 2 + usize::from(nulls_first);
        if converters[slot].is_none() {
            let converter = RowConverter::new(vec![SortField::new_with_options(
                values.data_type().clone(),
                SortOptions {
                    descending: !ascending,
                    nulls_first,
                },
            )])?;
            converters[slot] = Some(converter.convert_columns(&[Arc::clone(values)])?);
        }
        let rows = converters[slot].as_ref().expect("converted above");
        let mut items: Vec<usize> = r.collect();
        items.sort_by(|&a, &b| rows.row(a).cmp(&rows.row(b)));
        out.row(items);
    }
    out.finish(out_field(c), values)
}

/// A map's keys or values as arrays.
fn map_part(c: &Call, keys: bool) -> Result<ArrayRef> {
    let m = c.args[0].as_map();
    let part = if keys { m.keys() } else { m.values() };
    let field = out_field(c);
    let part = cast(part, field.data_type())?;
    Ok(Arc::new(GenericListArray::<i32>::try_new(
        field,
        m.offsets().clone(),
        part,
        m.logical_nulls(),
    )?))
}

fn map_keys(c: &Call) -> Result<ArrayRef> {
    map_part(c, true)
}
fn map_values(c: &Call) -> Result<ArrayRef> {
    map_part(c, false)
}

fn map_entries(c: &Call) -> Result<ArrayRef> {
    let m = c.args[0].as_map();
    let field = out_field(c);
    let DataType::Struct(fields) = field.data_type() else {
        return exec_err!("MAP_ENTRIES must return an ARRAY of ROWs");
    };
    let entries = StructArray::try_new(
        fields.clone(),
        vec![Arc::clone(m.keys()), Arc::clone(m.values())],
        None,
    )?;
    Ok(Arc::new(ListArray::try_new(
        field,
        m.offsets().clone(),
        Arc::new(entries),
        m.logical_nulls(),
    )?))
}

/// The entries `(key index, value index)` of row `i` of a map, in order.
fn entries_of(m: &MapArray, i: usize) -> std::ops::Range<usize> {
    let o = m.value_offsets();
    o[i] as usize..o[i + 1] as usize
}

fn map_from_arrays(c: &Call) -> Result<ArrayRef> {
    let (keys, values) = (list(c, 0), list(c, 1));
    let mut out = MapOut::new(keys.values(), c.rows)?;
    for i in 0..c.rows {
        match (range(keys, i), range(values, i)) {
            (Some(k), Some(v)) => {
                if k.len() != v.len() {
                    return exec_err!(
                        "Invalid function MAP_FROM_ARRAYS call: the key array has {} elements and the value array {}; they must have the same length",
                        k.len(),
                        v.len()
                    );
                }
                for (ke, ve) in k.zip(v) {
                    out.put(ke, ve)?;
                }
                out.end_row(true);
            }
            _ => out.end_row(false),
        }
    }
    out.finish(c.return_type, values.values())
}

/// `MAP_UNION(m1, m2, ...)`: the entries of all maps, a later map's value replacing an
/// earlier one's for an equal key; NULL when any map is NULL.
fn map_union(c: &Call) -> Result<ArrayRef> {
    let maps: Vec<&MapArray> = c.args.iter().map(|a| a.as_map()).collect();
    let keys = Values::of(&maps.iter().map(|m| m.keys()).collect::<Vec<_>>())?;
    let values = Values::of(&maps.iter().map(|m| m.values()).collect::<Vec<_>>())?;
    let mut out = MapOut::new(&keys.values, c.rows)?;
    for i in 0..c.rows {
        if maps.iter().any(|m| m.is_null(i)) {
            out.end_row(false);
            continue;
        }
        for (j, m) in maps.iter().enumerate() {
            for e in entries_of(m, i) {
                out.put(keys.bases[j] + e, values.bases[j] + e)?;
            }
        }
        out.end_row(true);
    }
    out.finish(c.return_type, &values.values)
}

/// A `STRING` array column from the parts of each row (`None`: a NULL row).
pub(crate) fn string_lists(
    c: &Call,
    mut f: impl FnMut(usize) -> Option<Vec<Option<String>>>,
) -> Result<ArrayRef> {
    let mut flat = StringBuilder::new();
    let mut out = ListOut::new(c.rows);
    let mut n = 0;
    for i in 0..c.rows {
        match f(i) {
            None => out.null(),
            Some(parts) => {
                let start = n;
                for p in parts {
                    flat.append_option(p);
                    n += 1;
                }
                out.row(start..n);
            }
        }
    }
    let values: ArrayRef = Arc::new(flat.finish());
    out.finish(out_field(c), &values)
}

/// `SPLIT(s, delimiter)`: Flink splits at every occurrence (empty parts kept, an empty
/// delimiter splits into characters).
fn split(c: &Call) -> Result<ArrayRef> {
    let (s, d) = (strs(&c.args[0]), strs(&c.args[1]));
    string_lists(c, |i| {
        let (s, d) = (str_at(s, i)?, str_at(d, i)?);
        Some(if d.is_empty() {
            s.chars().map(|ch| Some(ch.to_string())).collect()
        } else {
            s.split(d).map(|p| Some(p.to_string())).collect()
        })
    })
}

/// `STR_TO_MAP(s[, entry_delimiter, kv_delimiter])`: delimiters are regular expressions
/// (Java's `String.split`), `,` and `=` by default; an entry without the key-value
/// delimiter maps to NULL; a later equal key replaces an earlier one.
fn str_to_map(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let (entry_d, kv_d) = match c.args.len() {
        3 => (Some(strs(&c.args[1])), Some(strs(&c.args[2]))),
        _ => (None, None),
    };
    // Every row's entries as text first, then one map per row (a later key replaces).
    let mut keys = StringBuilder::new();
    let mut values = StringBuilder::new();
    let mut rows: Vec<Option<std::ops::Range<usize>>> = Vec::with_capacity(c.rows);
    let mut n = 0;
    for i in 0..c.rows {
        let text = str_at(s, i);
        let ed = entry_d.map_or(Some(","), |a| str_at(a, i));
        let kd = kv_d.map_or(Some("="), |a| str_at(a, i));
        let (Some(text), Some(ed), Some(kd)) = (text, ed, kd) else {
            rows.push(None);
            continue;
        };
        let start = n;
        for entry in java_split(text, ed)? {
            let mut parts = java_split_limit(&entry, kd, 2)?;
            keys.append_value(parts.remove(0));
            values.append_option(parts.pop());
            n += 1;
        }
        rows.push(Some(start..n));
    }
    let (keys, values): (ArrayRef, ArrayRef) = (Arc::new(keys.finish()), Arc::new(values.finish()));
    let mut out = MapOut::new(&keys, c.rows)?;
    for r in rows {
        match r {
            Some(r) => {
                for e in r {
                    out.put(e, e)?;
                }
                out.end_row(true);
            }
            None => out.end_row(false),
        }
    }
    out.finish(c.return_type, &values)
}

/// Java's `String.split(regex)`: trailing empty strings dropped.
fn java_split(s: &str, regex: &str) -> Result<Vec<String>> {
    let mut parts = java_split_limit(s, regex, 0)?;
    while parts.len() > 1 && parts.last().is_some_and(String::is_empty) {
        parts.pop();
    }
    if parts.len() == 1 && parts[0].is_empty() && !s.is_empty() {
        parts.clear();
    }
    Ok(parts)
}

/// Java's `String.split(regex, limit)` for `limit` 0 (all parts) or a positive limit.
fn java_split_limit(s: &str, regex: &str, limit: usize) -> Result<Vec<String>> {
    let re = fancy_regex::Regex::new(regex).map_err(|e| {
        datafusion_common::DataFusionError::Execution(format!(
            "invalid regular expression {regex}: {e}"
        ))
    })?;
    let mut parts = Vec::new();
    let mut last = 0;
    for m in re.find_iter(s) {
        let m = m.map_err(|e| datafusion_common::DataFusionError::Execution(e.to_string()))?;
        if limit > 0 && parts.len() + 1 == limit {
            break;
        }
        if m.end() == 0 {
            continue;
        }
        parts.push(s[last..m.start()].to_string());
        last = m.end();
    }
    parts.push(s[last..].to_string());
    Ok(parts)
}
