//! `COUNT(DISTINCT x)` of integer, floating-point and TIMESTAMP columns: per group every
//! non-NULL value (its [`super::value_keys`] key) with how many rows hold it, so over a
//! changelog a retraction takes one copy out and the value leaves when none is left
//! (DataFusion's sliding distinct count keeps counts too, but writes only the values into
//! its state: a restored one would lose them). BIGINT, never NULL.

use datafusion_common::arrow::array::{ArrayRef, BooleanArray};
use datafusion_common::arrow::datatypes::DataType;
use sluice_common::Result;

use super::shared_distinct::SharedDistinct;
use super::{BatchRows, GroupsState};

/// See the module docs: a [`SharedDistinct`] serving one aggregate.
pub struct DistinctCount(SharedDistinct<1>);

impl DistinctCount {
    /// Distinct values of `data_type` ([`super::value_keys::supports`] it).
    pub fn new(data_type: DataType) -> Self {
        DistinctCount(SharedDistinct::new(data_type))
    }
}

impl GroupsState for DistinctCount {
    fn update(
        &mut self,
        values: &[ArrayRef],
        rows: BatchRows<'_>,
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        self.0.update(&values[0], &[filter], rows)
    }

    fn evaluate(&mut self, groups: &[u32]) -> Result<ArrayRef> {
        Ok(self.0.evaluate(0, groups))
    }

    /// One column: per group a list of its values, each repeated by its count (the
    /// layout of [`super::multiset::Multiset`]'s state).
    fn state(&mut self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.0.state(0, groups)?])
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        self.0.merge(0, states.first(), groups, total)
    }

    fn reset(&mut self, group: usize) {
        self.0.reset(group);
    }
}
