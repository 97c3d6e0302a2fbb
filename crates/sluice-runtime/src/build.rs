//! Builds live operators and sinks from plan nodes (one `match` over
//! [`OperatorSpec`]).

use std::sync::Arc;

use datafusion_common::arrow::datatypes::SchemaRef;
use datafusion_common::DFSchema;
use datafusion_expr::execution_props::ExecutionProps;
use datafusion_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion_physical_expr::aggregate::{AggregateFunctionExpr, LoweredAggregateBuilder};
use sluice_common::plan::{OperatorSpec, PlanNode, RankFunction, WindowInput};
use sluice_common::{Result, SluiceError};

use crate::connectors::{create_sink, BatchSink, ConnectorContext};
use crate::expr::{physical, physical_all};
use crate::metrics::JobMetrics;
use crate::operator::Operator;
use crate::operators::group_aggregate::GroupAggregateOperator;
use crate::operators::interval_join::IntervalJoinOperator;
use crate::operators::join::{JoinInput, JoinOperator};
use crate::operators::session_aggregate::SessionAggregateOperator;
use crate::operators::stateless::{ExpandOperator, FilterOperator, ProjectOperator, UnionOperator};
use crate::operators::unnest::UnnestOperator;
use crate::operators::window_aggregate::{AggregateCall, WindowAggregateOperator, WindowSource};
use crate::operators::window_assign::WindowAssignOperator;
use crate::operators::window_join::{WindowJoinInput, WindowJoinOperator};
use crate::state::AccumulatorFactory;

/// The live operators of a stage's chain `nodes` (each with its operator id) and its
/// sink. `ctx.subtask` names the subtask's part files.
pub(crate) fn build_chain(
    nodes: &[(usize, &PlanNode)],
    ctx: &ConnectorContext,
    env: &OperatorEnv,
) -> Result<(Vec<(usize, Box<dyn Operator>)>, Option<Box<dyn BatchSink>>)> {
    let mut sink = None;
    let mut operators = Vec::new();
    for &(id, node) in nodes {
        match &node.spec {
            OperatorSpec::Sink(spec) => {
                let updating = node.inputs.first().is_some_and(|i| i.is_updating());
                let schema = node.inputs.first().map_or(&node.schema, |i| &i.schema);
                let inner = create_sink(
                    &spec.table,
                    &spec.options,
                    &spec.partition_keys,
                    Arc::new(schema.as_arrow().clone()),
                    ctx,
                    updating,
                )?;
                sink = Some(if spec.not_null.is_empty() {
                    inner
                } else {
                    Box::new(crate::connectors::NotNullEnforcer {
                        inner,
                        columns: spec.not_null.clone(),
                        drop: spec.drop_null_rows,
                        table: spec.table.clone(),
                    })
                });
            }
            _ => operators.push((id, build_operator(node, env)?)),
        }
    }
    Ok((operators, sink))
}

/// Builds the live operator of a (non-source, non-sink) plan node.
/// What operators are built with besides their plan node.
pub(crate) struct OperatorEnv {
    pub metrics: Arc<JobMetrics>,
    /// `'table.exec.state.ttl'`: idle keys of updating aggregates expire after this.
    pub state_ttl: Option<std::time::Duration>,
    /// Processing time.
    pub clock: crate::clock::ProcessingClock,
    /// Where tables a lookup join reads are (paths, time zone).
    pub connectors: ConnectorContext,
}

pub(crate) fn build_operator(node: &PlanNode, env: &OperatorEnv) -> Result<Box<dyn Operator>> {
    let metrics = &env.metrics;
    let input = node.input();
    let in_schema: &DFSchema = &input.schema;
    let out_schema: SchemaRef = Arc::new(node.schema.as_arrow().clone());
    Ok(match &node.spec {
        OperatorSpec::Filter { predicate } => {
            Box::new(FilterOperator::new(physical(predicate, in_schema)?))
        }
        OperatorSpec::Project { exprs } => Box::new(ProjectOperator::new(
            physical_all(exprs, in_schema)?,
            out_schema,
        )),
        OperatorSpec::Expand { projections } => Box::new(ExpandOperator::new(
            projections
                .iter()
                .map(|exprs| physical_all(exprs, in_schema))
                .collect::<Result<Vec<_>>>()?,
            out_schema,
        )),
        OperatorSpec::Unnest { lists, nulls } => {
            Box::new(UnnestOperator::new(lists.clone(), *nulls, out_schema))
        }
        OperatorSpec::WindowAssign {
            window,
            time_column,
        } => Box::new(WindowAssignOperator::new(
            *window,
            *time_column,
            out_schema,
            Arc::clone(metrics),
        )),
        OperatorSpec::WindowAggregate(spec) => {
            let in_schema: &DFSchema = &spec.expr_schema;
            let keys = physical_all(&spec.keys, in_schema)?;
            let arrow_in = in_schema.as_arrow();
            let key_types = keys
                .iter()
                .map(|k| k.data_type(arrow_in))
                .collect::<datafusion_common::Result<Vec<_>>>()?;
            let (calls, aggregates) = lower_aggregates(&spec.aggregates, in_schema)?;
            let factory = AccumulatorFactory::new(aggregates);
            if let sluice_common::plan::WindowKind::Session { gap_ms } = spec.window.kind {
                let WindowInput::Assign { time_column } = spec.windows else {
                    return Err(SluiceError::Internal(
                        "a SESSION aggregate must assign its own windows".into(),
                    ));
                };
                return Ok(Box::new(SessionAggregateOperator::new(
                    spec.window,
                    gap_ms,
                    time_column,
                    keys,
                    &key_types,
                    calls,
                    factory,
                    spec.group_outputs.clone(),
                    out_schema,
                    Arc::clone(metrics),
                )?));
            }
            let windows = match spec.windows {
                WindowInput::Columns { start, end } => WindowSource::Columns { start, end },
                WindowInput::Assign { time_column } => WindowSource::Assign { time_column },
            };
            Box::new(
                WindowAggregateOperator::new(
                    spec.window,
                    windows,
                    keys,
                    calls,
                    factory,
                    &key_types,
                    spec.group_outputs.clone(),
                    out_schema,
                    Arc::clone(metrics),
                )?
                .with_clock(env.clock.clone()),
            )
        }
        OperatorSpec::GroupAggregate { keys, aggregates } => {
            let arrow_in = in_schema.as_arrow();
            let keys = physical_all(keys, in_schema)?;
            let key_types = keys
                .iter()
                .map(|k| k.data_type(arrow_in))
                .collect::<datafusion_common::Result<Vec<_>>>()?;
            let (calls, aggregates) = lower_aggregates(aggregates, in_schema)?;
            Box::new(
                GroupAggregateOperator::new(
                    keys,
                    &key_types,
                    calls,
                    aggregates,
                    input.is_updating(),
                    arrow_in,
                    out_schema,
                )?
                .with_state_ttl(env.state_ttl, env.clock.clone()),
            )
        }
        OperatorSpec::Union => Box::new(UnionOperator::new(out_schema)),
        OperatorSpec::ChangelogNormalize { key } => Box::new(
            crate::operators::normalize::ChangelogNormalizeOperator::new(key.clone(), out_schema)?,
        ),
        OperatorSpec::LookupJoin(spec) => {
            use crate::operators::lookup_join::{LookupCache, LookupJoinOperator, LookupTable};
            let source = &spec.table;
            let table = LookupTable {
                files: crate::connectors::lookup::LookupFiles::new(
                    &source.table,
                    &source.options,
                    Arc::new(source.physical_schema.as_arrow().clone()),
                    &env.connectors,
                )?,
                columns: physical_all(&source.columns, &source.physical_schema)?,
                schema: Arc::new(spec.table_schema.as_arrow().clone()),
                keys: physical_all(&spec.right_keys, &spec.table_schema)?,
                cache: LookupCache::from_options(&source.table, &source.options)?,
            };
            let residual = spec
                .residual
                .as_ref()
                .map(|r| physical(r, &spec.pair_schema))
                .transpose()?;
            Box::new(LookupJoinOperator::new(
                spec.kind,
                physical_all(&spec.left_keys, in_schema)?,
                &Arc::new(in_schema.as_arrow().clone()),
                table,
                residual,
                out_schema,
                env.clock.clone(),
            )?)
        }
        OperatorSpec::Join(spec) => {
            let input = |i: usize, keys: &[datafusion_expr::Expr]| -> Result<JoinInput> {
                let schema: &DFSchema = &node.inputs[i].schema;
                JoinInput::new(
                    physical_all(keys, schema)?,
                    Arc::new(schema.as_arrow().clone()),
                )
            };
            let residual = spec
                .residual
                .as_ref()
                .map(|r| physical(r, &spec.pair_schema))
                .transpose()?;
            if let Some(times) = spec.temporal {
                use crate::operators::temporal_join::{TemporalInput, TemporalJoinOperator};
                let temporal_input = |i: usize, keys: &[datafusion_expr::Expr], time| {
                    let schema: &DFSchema = &node.inputs[i].schema;
                    Ok::<_, SluiceError>(TemporalInput {
                        keys: physical_all(keys, schema)?,
                        schema: Arc::new(schema.as_arrow().clone()),
                        time,
                    })
                };
                return Ok(Box::new(TemporalJoinOperator::new(
                    spec.kind,
                    temporal_input(0, &spec.left_keys, times.left_time)?,
                    temporal_input(1, &spec.right_keys, times.right_time)?,
                    residual,
                    out_schema,
                    Arc::clone(metrics),
                )?));
            }
            if let Some(columns) = spec.window {
                let window_input = |i: usize, keys: &[datafusion_expr::Expr], bounds| {
                    let schema: &DFSchema = &node.inputs[i].schema;
                    Ok::<_, SluiceError>(WindowJoinInput {
                        keys: physical_all(keys, schema)?,
                        schema: Arc::new(schema.as_arrow().clone()),
                        bounds,
                    })
                };
                return Ok(Box::new(WindowJoinOperator::new(
                    spec.kind,
                    window_input(0, &spec.left_keys, (columns.left_start, columns.left_end))?,
                    window_input(
                        1,
                        &spec.right_keys,
                        (columns.right_start, columns.right_end),
                    )?,
                    columns,
                    spec.null_equal,
                    spec.null_aware,
                    residual,
                    Arc::new(spec.pair_schema.as_arrow().clone()),
                    out_schema,
                    Arc::clone(metrics),
                )?));
            }
            let join = JoinOperator::new(
                spec.kind,
                input(0, &spec.left_keys)?,
                input(1, &spec.right_keys)?,
                spec.null_equal,
                spec.null_aware,
                residual,
                Arc::new(spec.pair_schema.as_arrow().clone()),
                out_schema,
            )?
            .with_append_only_inputs(
                [0, 1].map(|i| !node.inputs[i].is_updating()),
                // An interval join's rows leave by the watermark; a regular join keeps them.
                spec.interval.is_some(),
            );
            match spec.interval {
                // State bounded by the watermark, not by a TTL.
                Some(bounds) => Box::new(IntervalJoinOperator::new(
                    join.with_state_ttl(None, env.clock.clone()),
                    bounds,
                )?),
                None => Box::new(join.with_state_ttl(env.state_ttl, env.clock.clone())),
            }
        }
        OperatorSpec::OverAggregate(spec) => {
            use crate::operators::over_aggregate::calls::AggregateCall;
            use crate::operators::over_aggregate::{OverAggregateOperator, OverCallExec};
            use sluice_common::plan::OverCall;
            let mut calls = Vec::new();
            let mut args = Vec::new();
            let mut lag_values = Vec::new();
            for call in &spec.calls {
                calls.push(match call {
                    OverCall::Aggregate(e) => {
                        let (mut lowered, mut functions) =
                            lower_aggregates(std::slice::from_ref(e), in_schema)?;
                        let call_args = lowered.remove(0).args;
                        let types = call_args
                            .iter()
                            .map(|a| a.data_type(in_schema.as_arrow()))
                            .collect::<datafusion_common::Result<Vec<_>>>()?;
                        let first = args.len();
                        args.extend(call_args);
                        OverCallExec::Aggregate(AggregateCall::new(
                            functions.remove(0),
                            first,
                            types,
                        ))
                    }
                    OverCall::Lag {
                        value,
                        offset,
                        default,
                    } => {
                        lag_values.push(physical(value, in_schema)?);
                        OverCallExec::Lag {
                            value: lag_values.len() - 1,
                            offset: *offset,
                            default: default
                                .as_ref()
                                .map(|d| physical(d, in_schema))
                                .transpose()?,
                        }
                    }
                });
            }
            Box::new(OverAggregateOperator::new(
                physical_all(&spec.partition_by, in_schema)?,
                spec.time_column,
                spec.processing_time,
                spec.frame,
                calls,
                args,
                lag_values,
                Arc::new(in_schema.as_arrow().clone()),
                out_schema,
                Arc::clone(metrics),
            )?)
        }
        OperatorSpec::Sort(spec) => Box::new(crate::operators::sort::SortOperator::new(
            spec.time_column,
            sort_keys(&spec.order_by[1..], in_schema)?,
            Arc::new(in_schema.as_arrow().clone()),
            Arc::clone(metrics),
        )?),
        OperatorSpec::Limit { offset, fetch } => {
            Box::new(crate::operators::sort::LimitOperator::new(*offset, *fetch))
        }
        // A Top-1 over append-only input keeps one row per partition.
        OperatorSpec::Rank(spec)
            if spec.window.is_none()
                && spec.function == RankFunction::RowNumber
                && (spec.lower, spec.upper) == (1, 1)
                && !input.is_updating() =>
        {
            Box::new(
                crate::operators::deduplicate::DeduplicateOperator::new(
                    physical_all(&spec.partition_by, in_schema)?,
                    sort_keys(&spec.order_by, in_schema)?,
                    spec.rank_column,
                    spec.by_arrival,
                    Arc::new(in_schema.as_arrow().clone()),
                    out_schema,
                )?
                .with_state_ttl(env.state_ttl, env.clock.clone()),
            )
        }
        OperatorSpec::Rank(spec) => {
            let rank = crate::operators::rank::RankOperator::new(
                spec.function,
                physical_all(&spec.partition_by, in_schema)?,
                sort_keys(&spec.order_by, in_schema)?,
                spec.lower,
                spec.upper,
                spec.rank_column,
                !input.is_updating(),
                spec.by_arrival,
                spec.window.map(|w| {
                    crate::operators::rank::WindowRanking::new(
                        w.spec,
                        w.end_column,
                        Arc::clone(metrics),
                    )
                }),
                Arc::new(in_schema.as_arrow().clone()),
                out_schema,
            )?
            .with_state_ttl(env.state_ttl, env.clock.clone());
            // (A state TTL lets the aggregate forget a group: its count starts again.)
            match spec
                .update_fast_key(input)
                .filter(|_| env.state_ttl.is_none())
            {
                Some(key) => {
                    let key = key
                        .into_iter()
                        .map(|i| {
                            Arc::new(datafusion_physical_expr::expressions::Column::new(
                                in_schema.field(i).name(),
                                i,
                            ))
                                as Arc<dyn datafusion_physical_expr::PhysicalExpr>
                        })
                        .collect();
                    Box::new(rank.with_update_fast_key(key)?)
                }
                None => Box::new(rank),
            }
        }
        OperatorSpec::MatchRecognize(spec) => Box::new(
            crate::operators::match_recognize::operator::MatchRecognizeOperator::new(
                spec.as_ref().clone(),
                Arc::new(in_schema.as_arrow().clone()),
                out_schema,
                Arc::clone(metrics),
            )?,
        ),
        OperatorSpec::Source(_) | OperatorSpec::Sink(_) => {
            return Err(SluiceError::Internal(
                "sources and sinks are not chained operators".into(),
            ))
        }
    })
}

/// `ORDER BY` expressions as physical expressions with Arrow's sort options.
fn sort_keys(
    order_by: &[datafusion_expr::SortExpr],
    in_schema: &DFSchema,
) -> Result<
    Vec<(
        Arc<dyn datafusion_physical_expr::PhysicalExpr>,
        datafusion_common::arrow::compute::SortOptions,
    )>,
> {
    order_by
        .iter()
        .map(|s| {
            Ok((
                physical(&s.expr, in_schema)?,
                datafusion_common::arrow::compute::SortOptions {
                    descending: !s.asc,
                    nulls_first: s.nulls_first,
                },
            ))
        })
        .collect()
}

/// Lowers aggregate calls: their argument and FILTER expressions, and DataFusion's
/// aggregate function expressions (which create the accumulators).
fn lower_aggregates(
    aggregates: &[datafusion_expr::Expr],
    in_schema: &DFSchema,
) -> Result<(Vec<AggregateCall>, Vec<Arc<AggregateFunctionExpr>>)> {
    let props = ExecutionProps::new();
    let planning = PhysicalPlanningContext::default();
    let mut calls = Vec::new();
    let mut lowered_all = Vec::new();
    for a in aggregates {
        let lowered =
            LoweredAggregateBuilder::new(a, in_schema, in_schema.as_arrow(), &props, &planning)
                .build()?;
        calls.push(AggregateCall {
            args: lowered.aggregate.expressions(),
            filter: lowered.filter.clone(),
        });
        lowered_all.push(Arc::clone(&lowered.aggregate));
    }
    Ok((calls, lowered_all))
}
