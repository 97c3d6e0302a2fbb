//! `GROUP BY GROUPING SETS (...)`, `ROLLUP (...)` and `CUBE (...)` (Flink SQL "Group
//! Aggregation > GROUPING SETS", also in window aggregations), as Flink runs them: an
//! `Expand` gives each input row once per grouping set, the grouping expressions outside
//! the set NULL, plus the set's grouping id; one aggregate keyed by all of them follows.
//!
//! The grouping id is DataFusion's `__grouping_id` (see `Aggregate::INTERNAL_GROUPING_ID`):
//! bit `n - 1 - j` set when the `j`-th of the `n` distinct grouping expressions is not in
//! the set, and above bit `n` an ordinal that tells repeated sets apart (each gives its
//! own rows, as in Flink). `GROUPING(...)` / `GROUPING_ID(...)` read it (DataFusion's
//! `ResolveGroupingFunction` analyzer rule).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion_common::arrow::datatypes::{DataType, Field};
use datafusion_common::{Column, DFSchema, ScalarValue};
use datafusion_expr::logical_plan::Aggregate;
use datafusion_expr::utils::grouping_set_to_exprlist;
use datafusion_expr::{Expr, ExprSchemable, GroupingSet};
use sluice_common::plan::{
    GroupOutput, OperatorSpec, PlanNode, WindowAggregateSpec, WindowInput, WindowKind,
};
use sluice_common::{not_supported, plan_err, Result};

use super::{unalias, Planned, Planner, WindowColumns};

/// The grouping sets of a `GROUP BY` (one `Expr::GroupingSet` after DataFusion merged
/// plain expressions into each set).
fn sets(group_expr: &[Expr]) -> Result<Vec<Vec<Expr>>> {
    let [Expr::GroupingSet(gs)] = group_expr else {
        return plan_err!("expected one grouping set expression");
    };
    Ok(match gs {
        GroupingSet::GroupingSets(sets) => sets.clone(),
        GroupingSet::Rollup(exprs) => (0..=exprs.len())
            .rev()
            .map(|i| exprs[..i].to_vec())
            .collect(),
        GroupingSet::Cube(exprs) => {
            let n = exprs.len();
            (0..1usize << n)
                .map(|bits| {
                    (0..n)
                        .filter(|i| bits & (1 << i) == 0)
                        .map(|i| exprs[i].clone())
                        .collect()
                })
                .collect()
        }
    })
}

impl Planner {
    /// An `Aggregate` over grouping sets: `Expand`, then a group (or window) aggregate.
    pub(super) fn lower_grouping_sets(&self, agg: &Aggregate) -> Result<Planned> {
        let input = self.lower(&agg.input)?;
        let in_schema = Arc::clone(agg.input.schema());
        let in_len = in_schema.fields().len();
        let distinct: Vec<Expr> = grouping_set_to_exprlist(&agg.group_expr)?
            .into_iter()
            .cloned()
            .collect();
        let n = distinct.len();
        if n >= 64 {
            return not_supported!("GROUPING SETS over {n} expressions (at most 63)");
        }
        let gid_type = agg.schema.field(n).data_type().clone();
        let key_types = distinct
            .iter()
            .map(|e| e.get_type(&in_schema))
            .collect::<datafusion_common::Result<Vec<DataType>>>()?;

        // The expanded rows: the input's columns, each grouping expression (or NULL),
        // the grouping id.
        let mut fields: Vec<(Option<datafusion_common::TableReference>, Arc<Field>)> = in_schema
            .iter()
            .map(|(q, f)| (q.cloned(), Arc::clone(f)))
            .collect();
        for (j, t) in key_types.iter().enumerate() {
            fields.push((
                None,
                Arc::new(Field::new(format!("__grouping_key_{j}"), t.clone(), true)),
            ));
        }
        fields.push((
            None,
            Arc::new(Field::new(
                Aggregate::INTERNAL_GROUPING_ID,
                gid_type.clone(),
                false,
            )),
        ));
        let expanded_schema = Arc::new(DFSchema::new_with_metadata(fields, HashMap::new())?);
        let mut ordinals: HashMap<u64, u64> = HashMap::new();
        let mut projections = Vec::new();
        for set in sets(&agg.group_expr)? {
            let mut exprs: Vec<Expr> = (0..in_len)
                .map(|i| Expr::Column(Column::from(in_schema.qualified_field(i))))
                .collect();
            let mut mask = 0u64;
            for (j, e) in distinct.iter().enumerate() {
                if set.contains(e) {
                    exprs.push(e.clone());
                } else {
                    mask |= 1 << (n - 1 - j);
                    exprs.push(Expr::Literal(ScalarValue::try_from(&key_types[j])?, None));
                }
            }
            let ordinal = ordinals.entry(mask).or_insert(0);
            let gid = ScalarValue::UInt64(Some(mask | (*ordinal << n))).cast_to(&gid_type)?;
            *ordinal += 1;
            exprs.push(Expr::Literal(gid, None));
            projections.push(exprs);
        }
        let key_column =
            |j: usize| Expr::Column(Column::from(expanded_schema.qualified_field(in_len + j)));
        let gid_column = key_column(n);
        let expand = PlanNode {
            spec: OperatorSpec::Expand { projections },
            schema: Arc::clone(&expanded_schema),
            // The input's columns keep their places: its event-time attribute stays.
            rowtime: input.node.rowtime,
            inputs: vec![input.node],
        };

        // A window aggregate when every set holds both window bounds (Flink's rule).
        let column_index = |e: &Expr| match unalias(e) {
            Expr::Column(c) => in_schema.index_of_column(c).ok(),
            _ => None,
        };
        let window = input.window.clone().filter(|w| {
            distinct.iter().any(|e| column_index(e) == Some(w.start))
                && distinct.iter().any(|e| column_index(e) == Some(w.end))
        });
        let Some(window) = window else {
            let mut keys: Vec<Expr> = (0..n).map(key_column).collect();
            keys.push(gid_column);
            return Ok(Planned {
                node: PlanNode {
                    spec: OperatorSpec::GroupAggregate {
                        keys,
                        aggregates: agg.aggr_expr.clone(),
                    },
                    schema: Arc::clone(&agg.schema),
                    rowtime: None,
                    inputs: vec![expand],
                },
                window: None,
            });
        };
        let bound = |i: usize| distinct.iter().position(|e| column_index(e) == Some(i));
        let (start, end) = (bound(window.start), bound(window.end));
        for set in sets(&agg.group_expr)? {
            let holds = |j: Option<usize>| j.is_some_and(|j| set.contains(&distinct[j]));
            if !holds(start) || !holds(end) {
                return not_supported!(
                    "a grouping set of a window aggregate without window_start and window_end \
                     (every set must hold both)"
                );
            }
        }
        if matches!(window.spec.kind, WindowKind::Session { .. }) {
            return not_supported!("GROUPING SETS over SESSION windows");
        }
        let mut keys = Vec::new();
        let mut group_outputs = Vec::new();
        for j in 0..n {
            if Some(j) == start {
                group_outputs.push(GroupOutput::WindowStart);
            } else if Some(j) == end {
                group_outputs.push(GroupOutput::WindowEnd);
            } else {
                group_outputs.push(GroupOutput::Key(keys.len()));
                keys.push(key_column(j));
            }
        }
        group_outputs.push(GroupOutput::Key(keys.len()));
        keys.push(gid_column);
        let out_window = (!window.spec.processing_time).then(|| WindowColumns {
            start: start.expect("checked above"),
            end: end.expect("checked above"),
            time: None,
            spec: window.spec,
            partition_by: Vec::new(),
        });
        Ok(Planned {
            node: PlanNode {
                spec: OperatorSpec::WindowAggregate(WindowAggregateSpec {
                    window: window.spec,
                    windows: WindowInput::Columns {
                        start: window.start,
                        end: window.end,
                    },
                    expr_schema: expanded_schema,
                    keys,
                    group_outputs,
                    aggregates: agg.aggr_expr.clone(),
                }),
                schema: Arc::clone(&agg.schema),
                rowtime: None,
                inputs: vec![expand],
            },
            window: out_window,
        })
    }
}
