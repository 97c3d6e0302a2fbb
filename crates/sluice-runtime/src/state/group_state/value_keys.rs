//! Values of integer, floating-point and TIMESTAMP columns as `i64` keys that order as the
//! values do, so per-group value sets (`MIN`/`MAX` over a changelog, `COUNT(DISTINCT)`)
//! hold plain integers, not scalars. A floating-point value's bits are arranged so that
//! integer order is Java's `Double.compare` order (-0.0 below 0.0, NaN above everything);
//! equal keys are equal bits, every NaN made the one NaN first, as Java's `Double.equals`
//! compares them.

use std::sync::Arc;

use datafusion_common::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, ListArray,
};
use datafusion_common::arrow::buffer::OffsetBuffer;
use datafusion_common::arrow::compute::cast;
use datafusion_common::arrow::datatypes::{DataType, Field, Float64Type, Int64Type};
use sluice_common::{Result, SluiceError};

/// Whether values of `t` have keys here.
pub fn supports(t: &DataType) -> bool {
    t.is_signed_integer() || t.is_floating() || matches!(t, DataType::Timestamp(_, _))
}

/// A DOUBLE's bits as an `i64` whose order is the values' total order (negative values
/// have every bit but the sign flipped); its own inverse.
#[inline]
fn float_key(bits: i64) -> i64 {
    bits ^ (((bits >> 63) as u64) >> 1) as i64
}

/// `x`, every NaN as the one NaN (Java's `Double.equals` and `Double.compare` treat
/// all NaNs as one value).
#[inline]
fn canonical(x: f64) -> f64 {
    if x.is_nan() {
        f64::NAN
    } else {
        x
    }
}

/// The values of `array` (a type [`supports`] takes) as keys; NULLs stay NULL.
///
/// # Errors
/// A type without keys.
pub fn keys(array: &ArrayRef) -> Result<Int64Array> {
    if array.data_type().is_floating() {
        let v = cast(array, &DataType::Float64)?;
        return Ok(v
            .as_primitive::<Float64Type>()
            .unary(|x| float_key(canonical(x).to_bits() as i64)));
    }
    Ok(cast(array, &DataType::Int64)?
        .as_primitive::<Int64Type>()
        .clone())
}

/// `keys` decoded into values of `t` (the type they were made from).
///
/// # Errors
/// A type without keys.
pub fn values(keys: Int64Array, t: &DataType) -> Result<ArrayRef> {
    if t.is_floating() {
        let floats: Float64Array = keys.unary(|k| f64::from_bits(float_key(k) as u64));
        return Ok(cast(&floats, t)?);
    }
    Ok(cast(&keys, t)?)
}

/// Value sets with counts as a snapshot column: per group a list of its values (of type
/// `t`), each repeated by its count (the layout of [`super::multiset::Multiset`]'s state).
/// `sets` gives each group's `(key, count)` pairs.
///
/// # Errors
/// A type without keys.
pub fn counted_lists<'a, S, C>(sets: impl Iterator<Item = S>, t: &DataType) -> Result<ArrayRef>
where
    S: IntoIterator<Item = (&'a i64, &'a C)>,
    C: Copy + Into<u64> + 'a,
{
    let mut flat = Vec::new();
    let mut lengths = Vec::new();
    for set in sets {
        let before = flat.len();
        for (&x, &c) in set {
            flat.extend(std::iter::repeat_n(x, c.into() as usize));
        }
        lengths.push(flat.len() - before);
    }
    let items = values(Int64Array::from(flat), t)?;
    let field = Arc::new(Field::new_list_field(t.clone(), true));
    Ok(Arc::new(ListArray::try_new(
        field,
        OffsetBuffer::from_lengths(lengths),
        items,
        None,
    )?))
}

/// Reads a column written by [`counted_lists`]: `add(row, key)` for each listed value of
/// each row (a value repeated `c` times comes `c` times). `what` names the state for
/// errors.
///
/// # Errors
/// A column that is not a list of a type with keys.
pub fn read_counted_lists(
    column: &ArrayRef,
    what: &str,
    mut add: impl FnMut(usize, i64) -> Result<()>,
) -> Result<()> {
    let lists = column
        .as_list_opt::<i32>()
        .ok_or_else(|| SluiceError::Internal(format!("{what} state: not a list")))?;
    for row in 0..lists.len() {
        if lists.is_null(row) {
            continue;
        }
        for x in keys(&lists.value(row))?.iter().flatten() {
            add(row, x)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn keys_order_as_values_and_decode_back() {
        let doubles = [
            f64::NEG_INFINITY,
            -2.5,
            -0.0,
            0.0,
            1e-300,
            3.0,
            f64::INFINITY,
            f64::NAN,
        ];
        let array: ArrayRef = Arc::new(Float64Array::from(doubles.to_vec()));
        let k = keys(&array).unwrap();
        assert!(k.values().windows(2).all(|w| w[0] < w[1]), "{k:?}");
        let back = values(k, &DataType::Float64).unwrap();
        let back = back.as_primitive::<Float64Type>();
        for (a, b) in doubles.iter().zip(back.values()) {
            assert_eq!(a.to_bits(), b.to_bits());
        }
        // A NaN with other payload bits is the same value (Java's Double.equals).
        let nans: ArrayRef = Arc::new(Float64Array::from(vec![
            f64::NAN,
            f64::from_bits(f64::NAN.to_bits() | 1),
            -f64::NAN,
        ]));
        let k = keys(&nans).unwrap();
        assert!(k.values().iter().all(|&x| x == k.value(0)), "{k:?}");
        let ts: ArrayRef = Arc::new(
            datafusion_common::arrow::array::TimestampMillisecondArray::from(vec![
                Some(-5),
                None,
                Some(7),
            ]),
        );
        let k = keys(&ts).unwrap();
        assert_eq!(k.iter().collect::<Vec<_>>(), vec![Some(-5), None, Some(7)]);
        assert_eq!(values(k, ts.data_type()).unwrap().to_data(), ts.to_data());
    }
}
