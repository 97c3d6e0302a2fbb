//! One aggregate call of an OVER window: what it computes ([`AggregateCall`]) and what it
//! keeps per partition ([`CallState`]).
//!
//! `COUNT`, `SUM` and `AVG` of numbers keep a running sum and count
//! ([`crate::state::group_state::numeric`], so values and result types are the updating
//! aggregate's, which are Flink's) and, for a bounded frame, each frame row's value to take
//! it back out when the row leaves: a few machine words per row, no allocation per value
//! (the frame's queue grows once). Every other
//! aggregate keeps a DataFusion `Accumulator` (a sliding one for bounded frames) and the
//! frame rows' arguments as scalars.
//!
//! A row leaving a bounded frame is retracted before the current row is added (Flink's
//! `RowTimeRowsBoundedPrecedingFunction` and `RowTimeRangeBoundedPrecedingFunction`), so
//! floating-point sums round as Flink's do.

use std::collections::VecDeque;
use std::sync::Arc;

use datafusion_common::arrow::array::{new_null_array, ArrayRef};
use datafusion_common::arrow::datatypes::DataType;
use datafusion_common::ScalarValue;
use datafusion_expr::Accumulator;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;
use sluice_common::{Result, SluiceError};

use crate::state::group_state::numeric::{NumericSpec, NumericValues, Running, Sum};

/// What one aggregate call computes, and its arguments (`first..first + count` of the
/// operator's argument expressions).
pub struct AggregateCall {
    how: How,
    /// Index of its first argument.
    first: usize,
    /// Number of arguments.
    count: usize,
    /// The arguments' types.
    arg_types: Vec<DataType>,
    /// The result type.
    result: DataType,
}

enum How {
    Numeric(NumericSpec),
    Accumulator(Arc<AggregateFunctionExpr>),
}

/// One call's state in one partition (see the module docs).
pub enum CallState {
    /// `COUNT`/`SUM`/`AVG` of numbers: the running sum and count; the frame rows' values
    /// (`None`: not counted), bounded frames only.
    Numeric {
        /// The sum and count over the frame.
        running: Running,
        /// The frame rows' values, oldest first.
        frame: VecDeque<Option<Sum>>,
    },
    /// Any other aggregate.
    Accumulator {
        /// Over the frame.
        accumulator: Box<dyn Accumulator>,
        /// The frame rows' arguments, oldest first (bounded frames only).
        frame: VecDeque<Vec<ScalarValue>>,
    },
}

/// A call's arguments over the rows being released.
pub enum CallArgs {
    /// As the running sum takes them.
    Numeric(NumericValues),
    /// The argument arrays.
    Arrays(Vec<ArrayRef>),
}

/// A call's values for the rows being released, by row.
pub enum CallOutput {
    /// Numeric calls.
    Numeric(Vec<Option<Sum>>),
    /// Accumulator calls.
    Scalars(Vec<ScalarValue>),
}

impl AggregateCall {
    /// The call of `function` over the operator's arguments from `first` on, one per type
    /// of `arg_types`.
    pub fn new(
        function: Arc<AggregateFunctionExpr>,
        first: usize,
        arg_types: Vec<DataType>,
    ) -> Self {
        let count = arg_types.len();
        let result = function.field().data_type().clone();
        let how = match NumericSpec::of(&function, &arg_types) {
            Some(spec) => How::Numeric(spec),
            None => How::Accumulator(function),
        };
        AggregateCall {
            how,
            first,
            count,
            arg_types,
            result,
        }
    }

    /// A partition's fresh state (a sliding accumulator for a `bounded` frame).
    ///
    /// # Errors
    /// An accumulator DataFusion cannot create.
    pub fn start(&self, bounded: bool) -> Result<CallState> {
        Ok(match &self.how {
            How::Numeric(spec) => CallState::Numeric {
                running: spec.start(),
                frame: VecDeque::new(),
            },
            How::Accumulator(f) => CallState::Accumulator {
                accumulator: if bounded {
                    f.create_sliding_accumulator()?
                } else {
                    f.create_accumulator()?
                },
                frame: VecDeque::new(),
            },
        })
    }

    /// The call's arguments (`args`: every argument of the operator over the released
    /// rows) prepared for [`CallState::add`].
    ///
    /// # Errors
    /// An argument that does not cast to the sum's type.
    pub fn args(&self, args: &[ArrayRef]) -> Result<CallArgs> {
        let mine = &args[self.first..self.first + self.count];
        Ok(match &self.how {
            How::Numeric(spec) => CallArgs::Numeric(spec.values(mine)?),
            How::Accumulator(_) => CallArgs::Arrays(mine.to_vec()),
        })
    }

    /// An empty output for `n` rows.
    pub fn output(&self, n: usize) -> CallOutput {
        match &self.how {
            How::Numeric(_) => CallOutput::Numeric(vec![None; n]),
            How::Accumulator(_) => CallOutput::Scalars(vec![ScalarValue::Null; n]),
        }
    }

    /// `out` as one array of the result type.
    ///
    /// # Errors
    /// Values that do not convert to the result type.
    pub fn finish(&self, out: CallOutput) -> Result<ArrayRef> {
        match (&self.how, out) {
            (How::Numeric(spec), CallOutput::Numeric(v)) => spec.array(v.into_iter()),
            (_, CallOutput::Scalars(v)) => scalars_to_array(v, &self.result),
            (How::Accumulator(_), CallOutput::Numeric(_)) => Err(mismatch()),
        }
    }

    /// The state of a `bounded` frame's rows, as snapshot columns (one row per frame row,
    /// partition after partition as `states` gives them): a numeric call one column (the
    /// value as its sum keeps it: BIGINT, DOUBLE or DECIMAL(38, s); NULL: not counted),
    /// an accumulator call its arguments.
    ///
    /// # Errors
    /// Values that do not convert to their type.
    pub fn frame_columns<'a>(
        &self,
        states: impl Iterator<Item = &'a CallState>,
    ) -> Result<Vec<ArrayRef>> {
        match &self.how {
            How::Numeric(spec) => {
                let mut values = Vec::new();
                for s in states {
                    let CallState::Numeric { frame, .. } = s else {
                        return Err(mismatch());
                    };
                    values.extend(frame.iter().copied());
                }
                Ok(vec![spec.value_array(values.into_iter())])
            }
            How::Accumulator(_) => {
                let mut columns = vec![Vec::new(); self.count];
                for s in states {
                    let CallState::Accumulator { frame, .. } = s else {
                        return Err(mismatch());
                    };
                    for row in frame {
                        for (c, v) in columns.iter_mut().zip(row) {
                            c.push(v.clone());
                        }
                    }
                }
                columns
                    .into_iter()
                    .zip(&self.arg_types)
                    .map(|(v, t)| scalars_to_array(v, t))
                    .collect()
            }
        }
    }

    /// The types of [`Self::frame_columns`].
    pub fn frame_types(&self) -> Vec<DataType> {
        match &self.how {
            How::Numeric(spec) => vec![spec.value_array(std::iter::empty()).data_type().clone()],
            How::Accumulator(_) => self.arg_types.clone(),
        }
    }

    /// The running state of an unbounded frame, as snapshot columns (one row per state):
    /// a numeric call `sum` and `count`, an accumulator call DataFusion's state fields.
    /// An accumulator whose `state()` consumes it is rebuilt from what it gave.
    ///
    /// # Errors
    /// What the accumulator fails with.
    pub fn state_columns<'a>(
        &self,
        states: impl Iterator<Item = &'a mut CallState>,
    ) -> Result<Vec<ArrayRef>> {
        match &self.how {
            How::Numeric(spec) => {
                let mut rows = Vec::new();
                for s in states {
                    let CallState::Numeric { running, .. } = s else {
                        return Err(mismatch());
                    };
                    rows.push(*running);
                }
                spec.state_columns(&rows)
            }
            How::Accumulator(f) => {
                let fields = f.state_fields()?;
                let mut columns = vec![Vec::new(); fields.len()];
                for s in states {
                    let CallState::Accumulator { accumulator, .. } = s else {
                        return Err(mismatch());
                    };
                    let state = accumulator.state()?;
                    let arrays = state
                        .iter()
                        .map(|v| v.to_array())
                        .collect::<datafusion_common::Result<Vec<_>>>()?;
                    *accumulator = f.create_accumulator()?;
                    accumulator.merge_batch(&arrays)?;
                    for (c, v) in columns.iter_mut().zip(state) {
                        c.push(v);
                    }
                }
                columns
                    .into_iter()
                    .zip(&fields)
                    .map(|(v, field)| scalars_to_array(v, field.data_type()))
                    .collect()
            }
        }
    }

    /// The types of [`Self::state_columns`].
    ///
    /// # Errors
    /// What DataFusion fails with for the state fields.
    pub fn state_types(&self) -> Result<Vec<DataType>> {
        Ok(match &self.how {
            How::Numeric(spec) => spec
                .state_columns(&[])?
                .iter()
                .map(|c| c.data_type().clone())
                .collect(),
            How::Accumulator(f) => f
                .state_fields()?
                .iter()
                .map(|f| f.data_type().clone())
                .collect(),
        })
    }
}

impl CallState {
    /// Adds row `i` of `args` to the frame (and keeps it, for a `bounded` frame).
    ///
    /// # Errors
    /// What the accumulator fails with.
    #[inline]
    pub fn add(&mut self, args: &CallArgs, i: usize, bounded: bool) -> Result<()> {
        match (self, args) {
            (CallState::Numeric { running, frame }, CallArgs::Numeric(values)) => {
                let v = NumericSpec::value_at(values, i);
                if let Some(v) = v {
                    NumericSpec::add(running, v, false);
                }
                if bounded {
                    frame.push_back(v);
                }
                Ok(())
            }
            (CallState::Accumulator { accumulator, frame }, CallArgs::Arrays(arrays)) => {
                let row: Vec<ArrayRef> = arrays.iter().map(|a| a.slice(i, 1)).collect();
                accumulator.update_batch(&row)?;
                if bounded {
                    frame.push_back(
                        row.iter()
                            .map(|a| ScalarValue::try_from_array(a, 0))
                            .collect::<datafusion_common::Result<Vec<_>>>()?,
                    );
                }
                Ok(())
            }
            _ => Err(mismatch()),
        }
    }

    /// Takes the oldest frame row back out.
    ///
    /// # Errors
    /// What the accumulator fails with.
    #[inline]
    pub fn retract_oldest(&mut self) -> Result<()> {
        match self {
            CallState::Numeric { running, frame } => {
                if let Some(Some(v)) = frame.pop_front() {
                    NumericSpec::add(running, v, true);
                }
            }
            CallState::Accumulator { accumulator, frame } => {
                if let Some(old) = frame.pop_front() {
                    let arrays = old
                        .iter()
                        .map(|v| v.to_array())
                        .collect::<datafusion_common::Result<Vec<_>>>()?;
                    accumulator.retract_batch(&arrays)?;
                }
            }
        }
        Ok(())
    }

    /// Writes the current value into `out` at `rows`.
    ///
    /// # Errors
    /// What the accumulator fails with.
    #[inline]
    pub fn evaluate(
        &mut self,
        call: &AggregateCall,
        out: &mut CallOutput,
        rows: &[usize],
    ) -> Result<()> {
        match (self, out, &call.how) {
            (CallState::Numeric { running, .. }, CallOutput::Numeric(out), How::Numeric(spec)) => {
                let v = spec.value(running);
                for &i in rows {
                    out[i] = v;
                }
            }
            (CallState::Accumulator { accumulator, .. }, CallOutput::Scalars(out), _) => {
                let v = accumulator.evaluate()?;
                for &i in rows {
                    out[i] = v.clone();
                }
            }
            _ => return Err(mismatch()),
        }
        Ok(())
    }

    /// Takes in frame row `r` of snapshot columns written by
    /// [`AggregateCall::frame_columns`].
    ///
    /// # Errors
    /// Columns of another shape; what the accumulator fails with.
    pub fn restore_frame_row(
        &mut self,
        call: &AggregateCall,
        columns: &[ArrayRef],
        r: usize,
    ) -> Result<()> {
        match (self, &call.how) {
            (CallState::Numeric { running, frame }, How::Numeric(spec)) => {
                let [column] = columns else {
                    return Err(mismatch());
                };
                let v = spec.value_from(column, r)?;
                if let Some(v) = v {
                    NumericSpec::add(running, v, false);
                }
                frame.push_back(v);
            }
            (CallState::Accumulator { accumulator, frame }, How::Accumulator(_)) => {
                if columns.len() != call.count {
                    return Err(mismatch());
                }
                let row: Vec<ArrayRef> = columns.iter().map(|c| c.slice(r, 1)).collect();
                accumulator.update_batch(&row)?;
                frame.push_back(
                    columns
                        .iter()
                        .map(|c| ScalarValue::try_from_array(c, r))
                        .collect::<datafusion_common::Result<Vec<_>>>()?,
                );
            }
            _ => return Err(mismatch()),
        }
        Ok(())
    }

    /// Takes in the unbounded frame's state at row `r` of columns written by
    /// [`AggregateCall::state_columns`].
    ///
    /// # Errors
    /// Columns of another shape; what the accumulator fails with.
    pub fn restore_state(
        &mut self,
        call: &AggregateCall,
        columns: &[ArrayRef],
        r: usize,
    ) -> Result<()> {
        match (self, &call.how) {
            (CallState::Numeric { running, .. }, How::Numeric(spec)) => {
                // A partition has one state row in a snapshot.
                *running = spec.running_at(columns, r)?;
            }
            (CallState::Accumulator { accumulator, .. }, How::Accumulator(_)) => {
                let state: Vec<ArrayRef> = columns.iter().map(|c| c.slice(r, 1)).collect();
                accumulator.merge_batch(&state)?;
            }
            _ => return Err(mismatch()),
        }
        Ok(())
    }
}

fn mismatch() -> SluiceError {
    SluiceError::Execution(
        "OVER aggregate: a call's state (or its snapshot columns) does not match the call \
         (a snapshot of another query or Sluice version?)"
            .into(),
    )
}

/// Values of one type as an array (NULLs typed).
pub(super) fn scalars_to_array(values: Vec<ScalarValue>, data_type: &DataType) -> Result<ArrayRef> {
    if values.is_empty() {
        return Ok(new_null_array(data_type, 0));
    }
    let typed_null = ScalarValue::try_from(data_type)?;
    let array = ScalarValue::iter_to_array(values.into_iter().map(|v| {
        if v.is_null() {
            typed_null.clone()
        } else {
            v
        }
    }))?;
    if array.data_type() != data_type {
        return Ok(datafusion_common::arrow::compute::cast(&array, data_type)?);
    }
    Ok(array)
}
