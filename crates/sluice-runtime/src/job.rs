//! Builds live operators from the plan IR and runs them.
//!
//! A plan is run as a pipeline of tasks connected by bounded channels: the source task
//! (reading, parsing, computed columns, watermark assignment) and one task for the
//! chained operators that follow it (stateless operators, window assignment, window
//! aggregation, and the sink). Each task is a thread; the two run in parallel on two
//! cores. The job's output (the rows of a `SELECT`, or nothing for an `INSERT`) arrives
//! through [`RunningJob`], which also carries the first error.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use datafusion_common::arrow::array::{Array, Int64Array, RecordBatch};
use datafusion_common::arrow::datatypes::SchemaRef;
use datafusion_common::DFSchema;
use datafusion_expr::execution_props::ExecutionProps;
use datafusion_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion_physical_expr::aggregate::{AggregateFunctionExpr, LoweredAggregateBuilder};
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::plan::{OperatorSpec, PlanNode, SourceSpec, WindowInput};
use sluice_common::{not_supported, Result, SluiceError};

use crate::connectors::{create_sink, create_source, BatchSink, ConnectorContext, Source};
use crate::expr::{evaluate, evaluate_all, physical, physical_all};
use crate::message::{Message, StreamBatch};
use crate::metrics::JobMetrics;
use crate::operator::{Chain, Operator};
use crate::operators::group_aggregate::GroupAggregateOperator;
use crate::operators::session_aggregate::SessionAggregateOperator;
use crate::operators::stateless::{batch_with_schema, FilterOperator, ProjectOperator};
use crate::operators::window_aggregate::{AggregateCall, WindowAggregateOperator, WindowSource};
use crate::operators::window_assign::{event_times_ms, WindowAssignOperator};
use crate::state::AccumulatorFactory;

/// How a job runs.
#[derive(Debug, Clone)]
pub struct JobConfig {
    /// Where connectors resolve relative paths, rows per batch, job id.
    pub connectors: ConnectorContext,
    /// Subtasks of the keyed operator and what follows it (`'parallelism.default'`).
    pub parallelism: usize,
    /// Number of key groups (`'pipeline.max-parallelism'`, default 128).
    pub max_parallelism: u32,
}

/// A started job: its output rows, metrics, and the tasks running it.
pub struct RunningJob {
    /// Counters, updated while the job runs.
    pub metrics: Arc<JobMetrics>,
    /// Schema of the output rows: the plan root's columns, after a leading `op` column
    /// (`+I`, `-U`, `+U`, `-D`) when the result is updating.
    pub schema: SchemaRef,
    /// The result is a changelog (its batches start with the `op` column).
    pub updating: bool,
    output: tokio::sync::mpsc::Receiver<Result<RecordBatch>>,
    threads: Vec<JoinHandle<()>>,
}

impl RunningJob {
    /// The next output batch, waiting for it; `None` when the job has finished.
    /// An `Err` is the job's failure (the job stops).
    ///
    /// Must not be called from inside an async runtime; use [`RunningJob::next`] there.
    pub fn blocking_next(&mut self) -> Option<Result<RecordBatch>> {
        self.output.blocking_recv()
    }

    /// The next output batch; `None` when the job has finished.
    pub async fn next(&mut self) -> Option<Result<RecordBatch>> {
        self.output.recv().await
    }

    /// Waits for the tasks to stop (after the output is drained).
    pub fn join(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Starts running `plan`.
///
/// # Errors
/// Connector errors (missing options, a path that does not exist) and expressions that
/// cannot be lowered are reported here, before any row is read; data errors arrive
/// through [`RunningJob`].
pub fn start(plan: &PlanNode, config: &JobConfig) -> Result<RunningJob> {
    let metrics = Arc::new(JobMetrics::default());
    // The chain from the source up to the root.
    let mut nodes: Vec<&PlanNode> = Vec::new();
    let mut cur = plan;
    let source_node = loop {
        match &cur.spec {
            OperatorSpec::Source(_) => break cur,
            _ => {
                if cur.inputs.len() != 1 {
                    return not_supported!("operators with {} inputs", cur.inputs.len());
                }
                nodes.push(cur);
                cur = &cur.inputs[0];
            }
        }
    };
    nodes.reverse();
    let OperatorSpec::Source(source_spec) = &source_node.spec else {
        unreachable!("loop stops at a source")
    };

    let driver = SourceDriver::new(source_spec, source_node, config, Arc::clone(&metrics))?;
    let updating = plan.is_updating();
    let (tx, rx) = sync_channel::<Result<Message>>(8);
    let (out_tx, out_rx) = tokio::sync::mpsc::channel::<Result<RecordBatch>>(16);
    let mut threads = Vec::new();
    threads.push(spawn_task(
        "sluice-source",
        "source",
        out_tx.clone(),
        move || {
            let result = driver.run(&tx);
            if result.is_err() {
                // Tell the operators to stop; the error itself is reported by spawn_task.
                let _ = tx.send(Err(SluiceError::Execution("source failed".into())));
            }
            result
        },
    )?);

    // The keyed operator (if any) and everything after it run as `parallelism` subtasks,
    // fed by a router that sends each row to the subtask owning its key group.
    // Not yet: a second keyed operator would need its own exchange (and watermark
    // combining over the subtasks before it); such plans run at parallelism 1.
    let keyed = nodes.iter().position(|n| routing_keys(n).is_some());
    let keyed_count = nodes.iter().filter(|n| routing_keys(n).is_some()).count();
    // Without keys there is nothing to partition (and a global aggregate has exactly one
    // row, which one subtask must produce).
    let has_keys = |k: usize| routing_keys(nodes[k]).is_some_and(|(keys, _)| !keys.is_empty());
    let parallel = match keyed {
        Some(k) if config.parallelism > 1 && keyed_count == 1 && has_keys(k) => Some(k),
        _ => None,
    };
    match parallel {
        None => {
            let (operators, sink) = build_tail(&nodes[..], &config.connectors, &metrics, None)?;
            spawn_chain(
                "sluice-operators",
                operators,
                sink,
                rx,
                &out_tx,
                &metrics,
                updating,
                &config.connectors.time_zone,
                &mut threads,
            )?;
        }
        Some(k) => {
            // Stateless operators before the keyed one run in the router.
            let pre: Vec<Box<dyn Operator>> = nodes[..k]
                .iter()
                .map(|n| build_operator(n, &metrics))
                .collect::<Result<_>>()?;
            let node = nodes[k];
            let (key_exprs, key_schema) = routing_keys(node).expect("a keyed node");
            let keys = physical_all(&key_exprs, &key_schema)?;
            let mut subtask_txs = Vec::new();
            for subtask in 0..config.parallelism {
                let (stx, srx) = sync_channel::<Result<Message>>(8);
                subtask_txs.push(stx);
                let (operators, sink) =
                    build_tail(&nodes[k..], &config.connectors, &metrics, Some(subtask))?;
                spawn_chain(
                    &format!("sluice-subtask-{subtask}"),
                    operators,
                    sink,
                    srx,
                    &out_tx,
                    &metrics,
                    updating,
                    &config.connectors.time_zone,
                    &mut threads,
                )?;
            }
            let router = Router {
                keys,
                subtasks: subtask_txs,
                max_parallelism: config.max_parallelism,
            };
            threads.push(spawn_task(
                "sluice-router",
                "router",
                out_tx.clone(),
                move || router.run(&mut Chain::new(pre), rx),
            )?);
        }
    }
    drop(out_tx);
    let mut schema = localize_schema(plan.schema.as_arrow(), &config.connectors.time_zone);
    if updating {
        schema = op_schema(&schema);
    }
    Ok(RunningJob {
        metrics,
        updating,
        schema: Arc::new(schema),
        output: out_rx,
        threads,
    })
}

/// The key expressions (and the schema they are typed against) by which a keyed operator's
/// input is partitioned across subtasks; `None` for operators that are not keyed.
fn routing_keys(node: &PlanNode) -> Option<(Vec<datafusion_expr::Expr>, DFSchema)> {
    match &node.spec {
        OperatorSpec::WindowAggregate(spec) => {
            Some((spec.keys.clone(), spec.expr_schema.as_ref().clone()))
        }
        OperatorSpec::GroupAggregate { keys, .. } => {
            Some((keys.clone(), node.input().schema.as_ref().clone()))
        }
        _ => None,
    }
}

/// Builds the operators of `nodes` and their sink (`subtask`: which one, for part-file
/// names).
fn build_tail(
    nodes: &[&PlanNode],
    connectors: &ConnectorContext,
    metrics: &Arc<JobMetrics>,
    subtask: Option<usize>,
) -> Result<(Vec<Box<dyn Operator>>, Option<Box<dyn BatchSink>>)> {
    let mut sink = None;
    let mut operators = Vec::new();
    for node in nodes {
        match &node.spec {
            OperatorSpec::Sink(spec) => {
                let mut ctx = connectors.clone();
                if let Some(i) = subtask {
                    ctx.job_id = format!("{}-{i}", ctx.job_id);
                }
                sink = Some(create_sink(&spec.table, &spec.options, &ctx)?);
            }
            _ => operators.push(build_operator(node, metrics)?),
        }
    }
    Ok((operators, sink))
}

#[allow(clippy::too_many_arguments)]
fn spawn_chain(
    name: &str,
    operators: Vec<Box<dyn Operator>>,
    sink: Option<Box<dyn BatchSink>>,
    rx: Receiver<Result<Message>>,
    out_tx: &tokio::sync::mpsc::Sender<Result<RecordBatch>>,
    metrics: &Arc<JobMetrics>,
    updating: bool,
    time_zone: &str,
    threads: &mut Vec<JoinHandle<()>>,
) -> Result<()> {
    let report = out_tx.clone();
    let out_tx = out_tx.clone();
    let metrics = Arc::clone(metrics);
    let time_zone = time_zone.to_string();
    threads.push(spawn_task(&name, "operator", report, move || {
        let mut chain = Chain::new(operators);
        run_operators(
            &mut chain, rx, sink, &out_tx, &metrics, updating, &time_zone,
        )
    })?);
    Ok(())
}

/// Starts a task on its own thread. Its error, or its panic (as an internal error), is
/// reported through `report` (the job's output), which ends the job for the reader.
fn spawn_task(
    name: &str,
    kind: &'static str,
    report: tokio::sync::mpsc::Sender<Result<RecordBatch>>,
    body: impl FnOnce() -> Result<()> + Send + 'static,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let err = match std::panic::catch_unwind(AssertUnwindSafe(body)) {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(p) => Some(panic_error(kind, p)),
            };
            if let Some(e) = err {
                let _ = report.blocking_send(Err(e));
            }
        })
        .map_err(|e| SluiceError::io(format!("starting the {kind} task"), e))
}

/// Sends each row to the subtask that owns its key group (contiguous key-group ranges per
/// subtask, as Flink's `KeyGroupRangeAssignment`); watermarks and the end go to all.
struct Router {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    subtasks: Vec<SyncSender<Result<Message>>>,
    max_parallelism: u32,
}

impl Router {
    fn run(&self, chain: &mut Chain, rx: Receiver<Result<Message>>) -> Result<()> {
        while let Ok(msg) = rx.recv() {
            let Ok(msg) = msg else {
                return Ok(()); // the source reports its own error
            };
            let mut ended = false;
            chain.push(msg, &mut |m: Message| {
                match m {
                    Message::Data(b) => self.route(b)?,
                    Message::Watermark(w) => self.broadcast(Message::Watermark(w)),
                    Message::End => {
                        ended = true;
                        self.broadcast(Message::End)
                    }
                }
                Ok(())
            })?;
            if ended {
                break;
            }
        }
        Ok(())
    }

    fn broadcast(&self, m: Message) {
        for s in &self.subtasks {
            let _ = s.send(Ok(m.clone()));
        }
    }

    fn route(&self, b: StreamBatch) -> Result<()> {
        use datafusion_common::arrow::array::UInt32Array;
        use datafusion_common::arrow::compute::take;
        let n = self.subtasks.len();
        let rows = b.num_rows();
        let key_columns = evaluate_all(&self.keys, &b.data)?;
        let groups = crate::state::key_groups(&key_columns, rows, self.max_parallelism)?;
        let mut per: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (row, g) in groups.iter().enumerate() {
            let subtask = (*g as usize * n) / self.max_parallelism as usize;
            per[subtask].push(row as u32);
        }
        for (subtask, rows_of) in per.into_iter().enumerate() {
            if rows_of.is_empty() {
                continue;
            }
            let part = if rows_of.len() == rows {
                b.clone()
            } else {
                let idx = UInt32Array::from(rows_of);
                let columns = b
                    .data
                    .columns()
                    .iter()
                    .map(|c| take(c.as_ref(), &idx, None))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let take_i64 = |a: &Int64Array| -> Result<Int64Array> {
                    Ok(take(a, &idx, None)?
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .cloned()
                        .expect("i64"))
                };
                StreamBatch {
                    data: RecordBatch::try_new(b.data.schema(), columns)?,
                    row_watermarks: b.row_watermarks.as_ref().map(take_i64).transpose()?,
                    ops: match &b.ops {
                        Some(o) => Some(
                            take(o, &idx, None)?
                                .as_any()
                                .downcast_ref::<datafusion_common::arrow::array::Int8Array>()
                                .cloned()
                                .expect("i8"),
                        ),
                        None => None,
                    },
                }
            };
            let _ = self.subtasks[subtask].send(Ok(Message::Data(part)));
        }
        Ok(())
    }
}

/// `TIMESTAMP_LTZ` columns show and write as wall-clock times of the session time zone:
/// their values (instants) stay, their Arrow time zone becomes the session's.
fn localize(batch: &RecordBatch, time_zone: &str) -> Result<RecordBatch> {
    use datafusion_common::arrow::compute::cast;
    use datafusion_common::arrow::datatypes::DataType;
    let has_ltz = batch.schema().fields().iter().any(
        |f| matches!(f.data_type(), DataType::Timestamp(_, Some(tz)) if tz.as_ref() != time_zone),
    );
    if !has_ltz {
        return Ok(batch.clone());
    }
    let schema = Arc::new(localize_schema(&batch.schema(), time_zone));
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| cast(c, f.data_type()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(schema, columns)?)
}

fn localize_schema(
    schema: &datafusion_common::arrow::datatypes::Schema,
    time_zone: &str,
) -> datafusion_common::arrow::datatypes::Schema {
    use datafusion_common::arrow::datatypes::{DataType, Field, Schema};
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Timestamp(unit, Some(_)) => f
                .as_ref()
                .clone()
                .with_data_type(DataType::Timestamp(*unit, Some(time_zone.into()))),
            _ => f.as_ref().clone(),
        })
        .collect();
    Schema::new(fields)
}

/// The name of the RowKind column of an updating result.
pub const OP_COLUMN: &str = "op";

fn op_schema(
    schema: &datafusion_common::arrow::datatypes::Schema,
) -> datafusion_common::arrow::datatypes::Schema {
    use datafusion_common::arrow::datatypes::{DataType, Field, Schema};
    let mut fields = vec![Arc::new(Field::new(OP_COLUMN, DataType::Utf8, false))];
    fields.extend(schema.fields().iter().cloned());
    Schema::new(fields)
}

/// The batch with its RowKinds as a leading `op` column of `+I`/`-U`/`+U`/`-D`.
fn with_op_column(b: &StreamBatch) -> Result<RecordBatch> {
    use datafusion_common::arrow::array::{ArrayRef, StringArray};
    let ops: Vec<&str> = (0..b.num_rows()).map(|i| b.row_kind(i).short()).collect();
    let mut columns: Vec<ArrayRef> = vec![Arc::new(StringArray::from(ops))];
    columns.extend(b.data.columns().iter().cloned());
    Ok(RecordBatch::try_new(
        Arc::new(op_schema(&b.data.schema())),
        columns,
    )?)
}

fn panic_error(task: &str, payload: Box<dyn std::any::Any + Send>) -> SluiceError {
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    SluiceError::Internal(format!("the {task} task panicked: {msg}"))
}

fn run_operators(
    chain: &mut Chain,
    rx: Receiver<Result<Message>>,
    mut sink: Option<Box<dyn BatchSink>>,
    out: &tokio::sync::mpsc::Sender<Result<RecordBatch>>,
    metrics: &JobMetrics,
    updating: bool,
    time_zone: &str,
) -> Result<()> {
    let mut ended = false;
    while let Ok(msg) = rx.recv() {
        let msg = match msg {
            Ok(m) => m,
            // The source reports its own error; just stop.
            Err(_) => return Ok(()),
        };
        let mut deliver = |m: Message| -> Result<()> {
            match m {
                Message::Data(mut b) => {
                    JobMetrics::add(&metrics.rows_out, b.num_rows() as u64);
                    b.data = localize(&b.data, time_zone)?;
                    match sink.as_mut() {
                        Some(s) => s.write(&b)?,
                        None => {
                            let data = if updating {
                                with_op_column(&b)?
                            } else {
                                b.data
                            };
                            if out.blocking_send(Ok(data)).is_err() {
                                return Err(SluiceError::Execution(
                                    "result receiver closed".into(),
                                ));
                            }
                        }
                    }
                }
                Message::Watermark(_) => {}
                Message::End => {
                    ended = true;
                    if let Some(s) = sink.as_mut() {
                        s.finish()?;
                    }
                }
            }
            Ok(())
        };
        match chain.push(msg, &mut deliver) {
            Ok(()) => {}
            Err(SluiceError::Execution(m)) if m == "result receiver closed" => return Ok(()),
            Err(e) => return Err(e),
        }
        if ended {
            break;
        }
    }
    Ok(())
}

/// Builds the live operator of a (non-source, non-sink) plan node.
fn build_operator(node: &PlanNode, metrics: &Arc<JobMetrics>) -> Result<Box<dyn Operator>> {
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
            Box::new(WindowAggregateOperator::new(
                spec.window,
                windows,
                keys,
                calls,
                factory,
                &key_types,
                spec.group_outputs.clone(),
                out_schema,
                Arc::clone(metrics),
            )?)
        }
        OperatorSpec::GroupAggregate { keys, aggregates } => {
            let arrow_in = in_schema.as_arrow();
            let keys = physical_all(keys, in_schema)?;
            let key_types = keys
                .iter()
                .map(|k| k.data_type(arrow_in))
                .collect::<datafusion_common::Result<Vec<_>>>()?;
            let (calls, aggregates) = lower_aggregates(aggregates, in_schema)?;
            Box::new(GroupAggregateOperator::new(
                keys,
                &key_types,
                calls,
                aggregates,
                input.is_updating(),
                out_schema,
            )?)
        }
        OperatorSpec::Source(_) | OperatorSpec::Sink(_) => {
            return Err(SluiceError::Internal(
                "sources and sinks are not chained operators".into(),
            ))
        }
    })
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

/// Reads a source, evaluates computed columns and assigns per-row watermarks.
struct SourceDriver {
    source: Box<dyn Source>,
    columns: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
    watermark: Option<Arc<dyn PhysicalExpr>>,
    /// `Some((rowtime index, delay ms))` for `rowtime - <fixed interval>` strategies.
    fixed_delay: Option<(usize, i64)>,
    watermark_ms: i64,
    metrics: Arc<JobMetrics>,
}

impl SourceDriver {
    fn new(
        spec: &SourceSpec,
        node: &PlanNode,
        config: &JobConfig,
        metrics: Arc<JobMetrics>,
    ) -> Result<Self> {
        let source = create_source(
            &spec.table,
            &spec.options,
            Arc::new(spec.physical_schema.as_arrow().clone()),
            &config.connectors,
            Arc::clone(&metrics),
        )?;
        let columns = physical_all(&spec.columns, &spec.physical_schema)?;
        let watermark = match &spec.watermark {
            Some(wm) => Some(physical(&wm.expr, &node.schema)?),
            None => None,
        };
        let fixed_delay = spec
            .watermark
            .as_ref()
            .and_then(|wm| wm.delay_ms.map(|d| (wm.rowtime, d)));
        Ok(SourceDriver {
            source,
            columns,
            schema: Arc::new(node.schema.as_arrow().clone()),
            watermark,
            fixed_delay,
            watermark_ms: sluice_common::time::WATERMARK_MIN,
            metrics,
        })
    }

    fn run(mut self, tx: &SyncSender<Result<Message>>) -> Result<()> {
        while let Some(raw) = self.source.next_batch()? {
            let cols = evaluate_all(&self.columns, &raw)?;
            let data = batch_with_schema(&self.schema, cols, raw.num_rows())?;
            let before = self.watermark_ms;
            let row_watermarks = match &self.watermark {
                None => None,
                Some(expr) => {
                    let (candidates, delay_ms) = match self.fixed_delay {
                        Some((rowtime, delay)) => (event_times_ms(data.column(rowtime))?, delay),
                        None => (event_times_ms(&evaluate(expr, &data)?)?, 0),
                    };
                    let mut wms = Vec::with_capacity(data.num_rows());
                    let mut wm = self.watermark_ms;
                    for i in 0..candidates.len() {
                        wms.push(wm);
                        if candidates.is_valid(i) {
                            wm = wm.max(candidates.value(i).saturating_sub(delay_ms));
                        }
                    }
                    self.watermark_ms = wm;
                    Some(Int64Array::from(wms))
                }
            };
            let batch = StreamBatch {
                data,
                row_watermarks,
                ops: None,
            };
            if tx.send(Ok(Message::Data(batch))).is_err() {
                return Ok(()); // downstream stopped
            }
            if self.watermark_ms > before {
                self.metrics
                    .watermark_ms
                    .store(self.watermark_ms, Ordering::Relaxed);
                if tx.send(Ok(Message::Watermark(self.watermark_ms))).is_err() {
                    return Ok(());
                }
            }
        }
        let _ = tx.send(Ok(Message::End));
        Ok(())
    }
}
