//! `MIN`, `MAX` and `COUNT(DISTINCT)` over a changelog: every value with its count, so any
//! value can be retracted (DataFusion's sliding MIN/MAX retract in arrival order only).

use std::collections::BTreeMap;
use std::fmt;

use datafusion_common::arrow::array::{Array, ArrayRef};
use datafusion_common::arrow::datatypes::DataType;
use datafusion_common::ScalarValue;
use datafusion_expr::Accumulator;

/// What a [`Multiset`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MultisetKind {
    /// The smallest value.
    Min,
    /// The largest value.
    Max,
    /// The number of distinct values.
    CountDistinct,
}

/// MIN, MAX or COUNT(DISTINCT) that can retract any value: keeps every value with its
/// count (its state, for checkpoints, is the list of values repeated by their counts).
pub struct Multiset {
    kind: MultisetKind,
    /// Type of the values (and of MIN/MAX's result).
    data_type: DataType,
    values: BTreeMap<OrdScalar, usize>,
}

/// A scalar ordered by `partial_cmp` (values of one column compare; NaN sorts as equal).
#[derive(PartialEq, Eq)]
struct OrdScalar(ScalarValue);

impl PartialOrd for OrdScalar {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrdScalar {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0
            .partial_cmp(&other.0)
            .unwrap_or(std::cmp::Ordering::Equal)
    }
}

impl Multiset {
    /// No values yet; `data_type`: the values' type.
    pub fn new(kind: MultisetKind, data_type: DataType) -> Self {
        Multiset {
            kind,
            data_type,
            values: BTreeMap::new(),
        }
    }
}

impl fmt::Debug for Multiset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Multiset({:?}, {} values)", self.kind, self.values.len())
    }
}

impl Accumulator for Multiset {
    fn update_batch(&mut self, values: &[ArrayRef]) -> datafusion_common::Result<()> {
        let array = &values[0];
        for i in 0..array.len() {
            if array.is_valid(i) {
                *self
                    .values
                    .entry(OrdScalar(ScalarValue::try_from_array(array, i)?))
                    .or_default() += 1;
            }
        }
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> datafusion_common::Result<()> {
        let array = &values[0];
        for i in 0..array.len() {
            if array.is_valid(i) {
                let key = OrdScalar(ScalarValue::try_from_array(array, i)?);
                if let Some(c) = self.values.get_mut(&key) {
                    *c -= 1;
                    if *c == 0 {
                        self.values.remove(&key);
                    }
                }
            }
        }
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> datafusion_common::Result<ScalarValue> {
        let v = match self.kind {
            MultisetKind::CountDistinct => {
                return Ok(ScalarValue::Int64(Some(self.values.len() as i64)))
            }
            MultisetKind::Min => self.values.keys().next(),
            MultisetKind::Max => self.values.keys().next_back(),
        };
        match v {
            Some(v) => Ok(v.0.clone()),
            None => ScalarValue::try_from(&self.data_type),
        }
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.values.len() * 64
    }

    /// One list of every value held, repeated by its count.
    fn state(&mut self) -> datafusion_common::Result<Vec<ScalarValue>> {
        let values: Vec<ScalarValue> = self
            .values
            .iter()
            .flat_map(|(v, c)| std::iter::repeat_n(v.0.clone(), *c))
            .collect();
        Ok(vec![ScalarValue::List(ScalarValue::new_list_nullable(
            &values,
            &self.data_type,
        ))])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> datafusion_common::Result<()> {
        use datafusion_common::arrow::array::AsArray;
        let lists = states[0].as_list::<i32>();
        for values in lists.iter().flatten() {
            self.update_batch(&[values])?;
        }
        Ok(())
    }
}
