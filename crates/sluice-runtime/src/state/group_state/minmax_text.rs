//! `MIN` and `MAX` of `VARCHAR` (`Utf8`, `LargeUtf8`) columns over an append-only input:
//! per group the best string so far, kept in one reused `String` (replaced in place only
//! when a row beats it, so a batch costs no allocation per row). Strings compare by their
//! UTF-8 bytes, which is code-point order, as Flink's `StringData` and DataFusion compare
//! them. Result type `VARCHAR`, NULL while a group holds no value (Flink docs, "Aggregate
//! Functions"). Over a changelog a retraction needs every value: that case stays with
//! [`super::multiset::Multiset`] through [`super::rowwise::RowwiseGroups`].

use std::sync::Arc;

use datafusion_common::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, GenericStringArray, LargeStringArray, OffsetSizeTrait,
    StringArray,
};
use datafusion_common::arrow::datatypes::DataType;
use sluice_common::{Result, SluiceError};

use super::numeric::for_each_row;
use super::{BatchRows, GroupsState};

/// Whether [`MinMaxText`] keeps `MIN`/`MAX` over arguments of `data_type`.
pub fn supports(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Utf8 | DataType::LargeUtf8)
}

/// See the module docs.
pub struct MinMaxText {
    max: bool,
    /// The argument's (and result's) type: `Utf8` or `LargeUtf8`.
    data_type: DataType,
    /// Per group id: the best value, `None` before the group's first non-NULL value.
    best: Vec<Option<String>>,
}

impl MinMaxText {
    /// `MAX` (else `MIN`) of an append-only input of `data_type` ([`supports`] it).
    pub fn new(max: bool, data_type: DataType) -> Self {
        MinMaxText {
            max,
            data_type,
            best: Vec::new(),
        }
    }

    fn grow(&mut self, total: usize) {
        if self.best.len() < total {
            self.best.resize(total, None);
        }
    }

    /// Makes `x` group `g`'s value if it beats the one there.
    fn offer(&mut self, g: usize, x: &str) {
        let max = self.max;
        match &mut self.best[g] {
            Some(best) => {
                if (max && x > best.as_str()) || (!max && x < best.as_str()) {
                    best.clear();
                    best.push_str(x);
                }
            }
            slot @ None => *slot = Some(x.to_owned()),
        }
    }

    fn update_strings<O: OffsetSizeTrait>(
        &mut self,
        v: &GenericStringArray<O>,
        rows: BatchRows<'_>,
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        let mut retracted = false;
        for_each_row(rows, v.nulls(), filter, |row, g, retract| {
            retracted |= retract;
            self.offer(g, v.value(row));
        });
        if retracted {
            return Err(SluiceError::Internal(
                "MIN/MAX of an append-only input got a retraction".into(),
            ));
        }
        Ok(())
    }
}

impl GroupsState for MinMaxText {
    fn update(
        &mut self,
        values: &[ArrayRef],
        rows: BatchRows<'_>,
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        self.grow(rows.total_groups);
        let v = &values[0];
        match v.data_type() {
            DataType::Utf8 => self.update_strings(v.as_string::<i32>(), rows, filter),
            DataType::LargeUtf8 => self.update_strings(v.as_string::<i64>(), rows, filter),
            other => Err(SluiceError::Internal(format!(
                "MIN/MAX of VARCHAR got a {other} argument"
            ))),
        }
    }

    fn evaluate(&mut self, groups: &[u32]) -> Result<ArrayRef> {
        let values = groups
            .iter()
            .map(|&g| self.best.get(g as usize).and_then(|b| b.as_deref()));
        Ok(if self.data_type == DataType::LargeUtf8 {
            Arc::new(LargeStringArray::from_iter(values))
        } else {
            Arc::new(StringArray::from_iter(values))
        })
    }

    /// One column, the value (NULL without one): DataFusion's MIN/MAX state, which
    /// [`super::rowwise::RowwiseGroups`] wrote for these aggregates before.
    fn state(&mut self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(groups)?])
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        self.grow(total);
        let column = states
            .first()
            .ok_or_else(|| SluiceError::Internal("MIN/MAX state: no column".into()))?;
        let mut add = |row: usize, x: Option<&str>| {
            if let Some(x) = x {
                self.offer(groups[row], x);
            }
        };
        match column.data_type() {
            DataType::Utf8 => column
                .as_string::<i32>()
                .iter()
                .enumerate()
                .for_each(|(r, x)| add(r, x)),
            DataType::LargeUtf8 => column
                .as_string::<i64>()
                .iter()
                .enumerate()
                .for_each(|(r, x)| add(r, x)),
            other => {
                return Err(SluiceError::Internal(format!(
                    "MIN/MAX of VARCHAR: a state column of type {other}"
                )))
            }
        }
        Ok(())
    }

    fn reset(&mut self, group: usize) {
        if let Some(b) = self.best.get_mut(group) {
            *b = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(groups: &[usize]) -> BatchRows<'_> {
        BatchRows {
            groups,
            retract: None,
            total_groups: 2,
        }
    }

    fn text(values: &[Option<&str>]) -> ArrayRef {
        Arc::new(StringArray::from(values.to_vec()))
    }

    /// Byte-wise order ("Z" < "a" < "é"), NULLs and filtered rows skipped, a group without
    /// values NULL; a snapshot restores the same values.
    #[test]
    fn best_string_per_group_and_its_snapshot() {
        for (max, expected) in [(true, [Some("é"), None]), (false, [Some("Z"), None])] {
            let mut s = MinMaxText::new(max, DataType::Utf8);
            let values = text(&[Some("a"), Some("é"), None, Some("Z"), Some("zz")]);
            let filter = BooleanArray::from(vec![true, true, true, true, false]);
            s.update(&[values], rows(&[0, 0, 1, 0, 1]), Some(&filter))
                .unwrap();
            let out = s.evaluate(&[0, 1]).unwrap();
            assert_eq!(out.as_string::<i32>().iter().collect::<Vec<_>>(), expected);

            let snapshot = s.state(&[0, 1]).unwrap();
            let mut restored = MinMaxText::new(max, DataType::Utf8);
            restored.merge(&snapshot, &[1, 0], 2).unwrap();
            let out = restored.evaluate(&[1, 0]).unwrap();
            assert_eq!(out.as_string::<i32>().iter().collect::<Vec<_>>(), expected);
        }
    }

    /// A later, better value replaces the kept one across batches; a worse one does not.
    #[test]
    fn later_batches_replace_only_with_a_better_value() {
        let mut s = MinMaxText::new(true, DataType::Utf8);
        s.update(&[text(&[Some("10:05")])], rows(&[0]), None)
            .unwrap();
        s.update(
            &[text(&[Some("09:59"), Some("10:07")])],
            rows(&[0, 0]),
            None,
        )
        .unwrap();
        s.update(&[text(&[Some("10:06")])], rows(&[0]), None)
            .unwrap();
        let out = s.evaluate(&[0]).unwrap();
        assert_eq!(out.as_string::<i32>().value(0), "10:07");
        s.reset(0);
        assert!(s.evaluate(&[0]).unwrap().is_null(0));
    }

    /// A retraction is refused: the append-only state cannot take a value back.
    #[test]
    fn a_retraction_is_an_error() {
        let mut s = MinMaxText::new(true, DataType::Utf8);
        let batch = BatchRows {
            groups: &[0],
            retract: Some(&[true]),
            total_groups: 1,
        };
        assert!(s.update(&[text(&[Some("a")])], batch, None).is_err());
    }
}
