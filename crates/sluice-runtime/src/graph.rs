//! The job graph: the plan as the runtime runs it, worked out once. Launching a job,
//! EXPLAIN (text and DOT) and the checkpoint manifest all read it; nothing else decides
//! the topology.
//!
//! - **Operators** are the plan's non-source nodes (sinks included) in topological order
//!   (every operator after its inputs); an operator's index is its [`OperatorId`], stable
//!   for a plan, which names its state files (`op-<id>-<subtask>.arrow`).
//! - **Source groups**: one per distinct source scan. The same table scanned twice with the
//!   same columns and watermark is one group, read once, feeding both consumers.
//! - **Stages** are chains of operators run by the same subtasks (threads), in topological
//!   order. A source stage is a source group's subtasks (`'scan.parallelism'`) with the
//!   stateless operators chained after the source; an operator stage runs its chain as
//!   `parallelism` subtasks. Each input edge of a stage has an [`Exchange`]: `Hash` by the
//!   first operator's keys into key groups (Flink's `KeyGroupRangeAssignment`), or `Single`
//!   (every upstream subtask into one subtask).
//!
//! Stage rules, as Flink chains operators:
//! - A keyed operator ([`routing_keys`]) starts a stage of `parallelism` subtasks (one
//!   when it has no keys, a global aggregate, or at parallelism 1: a keyed exchange ends a
//!   chain in Flink at any parallelism) fed by a `Hash` (`Single`) exchange. Stateless
//!   operators before the first keyed one chain onto the source stage (they run on its
//!   router thread, overlapping the operators after them), except a sink or the result,
//!   which run in an operator stage (they take part in checkpoints); stateless operators
//!   after a keyed one chain onto its stage.
//! - A keyed operator with several inputs (a join) starts a stage of `parallelism`
//!   subtasks with a `Hash` exchange on each input (by that input's keys). An unkeyed one
//!   (`UNION ALL`) starts a stage of one subtask fed by every input (a merge), and so does
//!   a stateless operator whose input feeds several consumers. A keyed operator never
//!   chains onto a stage of several subtasks it is not partitioned for.

use std::collections::BTreeMap;

use std::sync::Arc;

use datafusion_common::arrow::datatypes::{DataType, Field, Fields};
use datafusion_common::{DFSchema, DFSchemaRef};
use datafusion_expr::Expr;
use sluice_common::plan::{OperatorSpec, PlanNode, SourceSpec};
use sluice_common::{Result, SluiceError};

/// An operator's index in [`JobGraph::operators`].
pub type OperatorId = usize;

/// Where an operator's input comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Upstream {
    /// A source group (index into [`JobGraph::sources`]).
    Source(usize),
    /// Another operator.
    Operator(OperatorId),
}

/// The key expressions (typed against `schema`) by which a keyed operator's input is
/// partitioned into key groups.
#[derive(Debug, Clone)]
pub struct RoutingKeys {
    /// Key expressions; empty for a keyed operator with one global key.
    pub exprs: Vec<Expr>,
    /// The schema the expressions are typed against.
    pub schema: DFSchema,
}

/// The keys a keyed operator partitions each of its inputs by (one entry per input, in
/// input order; equal keys of different inputs go to the same subtask); `None` for
/// operators without keyed state. Every operator kind is named: a new one must say
/// whether it is keyed.
pub fn routing_keys(node: &PlanNode) -> Option<Vec<RoutingKeys>> {
    let one = |keys: RoutingKeys| Some(vec![keys]);
    match &node.spec {
        OperatorSpec::WindowAggregate(spec) => one(RoutingKeys {
            exprs: spec.keys.clone(),
            schema: spec.expr_schema.as_ref().clone(),
        }),
        OperatorSpec::GroupAggregate { keys, .. } => one(RoutingKeys {
            exprs: keys.clone(),
            schema: node.input().schema.as_ref().clone(),
        }),
        // A null-aware (NOT IN) join compares a NULL key with every key: one subtask.
        OperatorSpec::Join(spec) => Some(
            [&spec.left_keys, &spec.right_keys]
                .iter()
                .enumerate()
                .map(|(i, keys)| RoutingKeys {
                    exprs: if spec.null_aware {
                        Vec::new()
                    } else {
                        keys.to_vec()
                    },
                    schema: node.inputs[i].schema.as_ref().clone(),
                })
                .collect(),
        ),
        OperatorSpec::OverAggregate(spec) => one(RoutingKeys {
            exprs: spec.partition_by.clone(),
            schema: node.input().schema.as_ref().clone(),
        }),
        // A global order and a global count: one key, one subtask.
        OperatorSpec::Sort(_) | OperatorSpec::Limit { .. } => one(RoutingKeys {
            exprs: Vec::new(),
            schema: node.input().schema.as_ref().clone(),
        }),
        OperatorSpec::Rank(spec) => one(RoutingKeys {
            exprs: spec.partition_by.clone(),
            schema: node.input().schema.as_ref().clone(),
        }),
        OperatorSpec::ChangelogNormalize { key } => {
            let schema = node.input().schema.as_ref();
            one(RoutingKeys {
                exprs: key
                    .iter()
                    .map(|&c| {
                        Expr::Column(datafusion_common::Column::from(schema.qualified_field(c)))
                    })
                    .collect(),
                schema: schema.clone(),
            })
        }
        OperatorSpec::MatchRecognize(spec) => {
            let schema = node.input().schema.as_ref();
            let exprs = spec
                .partition_by
                .iter()
                .map(|&c| Expr::Column(datafusion_common::Column::from(schema.qualified_field(c))))
                .collect();
            one(RoutingKeys {
                exprs,
                schema: schema.clone(),
            })
        }
        // A lookup join keeps no keyed state: it runs where its input is.
        OperatorSpec::Source(_)
        | OperatorSpec::Filter { .. }
        | OperatorSpec::Project { .. }
        | OperatorSpec::Unnest { .. }
        | OperatorSpec::Expand { .. }
        | OperatorSpec::WindowAssign { .. }
        | OperatorSpec::LookupJoin(_)
        | OperatorSpec::Union
        | OperatorSpec::Sink(_) => None,
    }
}

/// A source scan and its subtasks.
#[derive(Debug)]
pub struct SourceGroup<'p> {
    /// The `Source` plan node.
    pub node: &'p PlanNode,
    /// Its spec; `read_schema` is the union of what the group's scans read.
    pub spec: SourceSpec,
    /// Source subtasks (`'scan.parallelism'`).
    pub parallelism: usize,
    /// The number of its subtask 0 among all source subtasks of the job (source subtasks
    /// are numbered over all groups, group by group).
    pub first_subtask: usize,
    /// Its source stage.
    pub stage: usize,
}

/// An operator of the graph.
#[derive(Debug)]
pub struct GraphOperator<'p> {
    /// The plan node (its `inputs` are the plan's; [`GraphOperator::inputs`] says where
    /// they run).
    pub node: &'p PlanNode,
    /// Where each input comes from, in input-index order.
    pub inputs: Vec<Upstream>,
    /// The keys each input is partitioned by (keyed operators; one per input).
    pub keys: Option<Vec<RoutingKeys>>,
    /// The stage that runs it.
    pub stage: usize,
}

/// How rows travel along an edge into a stage.
#[derive(Debug, Clone)]
pub enum Exchange {
    /// Each row to the subtask owning its key group; watermarks, barriers and the end to
    /// every subtask.
    Hash(RoutingKeys),
    /// Everything into the stage's only subtask.
    Single,
}

impl Exchange {
    /// EXPLAIN's name for it, each key expression shown by `render`.
    pub fn describe(&self, render: &dyn Fn(&Expr) -> String) -> String {
        match self {
            Exchange::Single => "single".into(),
            Exchange::Hash(k) => format!(
                "hash[{}]",
                k.exprs.iter().map(render).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// An input edge of a stage.
#[derive(Debug, Clone)]
pub struct StageInput {
    /// The upstream stage.
    pub from: usize,
    /// How rows cross the edge.
    pub exchange: Exchange,
    /// Which input of the stage's first operator this edge feeds.
    pub input: usize,
}

/// What kind of stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageKind {
    /// A source group's subtasks (with any operators chained after the source).
    Source(usize),
    /// Operator subtasks.
    Operators,
}

/// Subtasks running one chain of operators.
#[derive(Debug, Clone)]
pub struct Stage {
    /// A source group's stage or an operator stage.
    pub kind: StageKind,
    /// The chained operators, in order (a source stage's may be empty).
    pub operators: Vec<OperatorId>,
    /// Subtasks.
    pub parallelism: usize,
    /// Input edges (none for a source stage).
    pub inputs: Vec<StageInput>,
    /// The stages reading this stage's output (through their [`StageInput`]s).
    pub consumers: Vec<usize>,
}

impl Stage {
    /// The channels of each subtask's input gate: per input edge, one per upstream
    /// subtask, edge by edge. `(edge, upstream subtask)` for each channel.
    pub fn gate_channels(&self, graph: &JobGraph) -> Vec<(usize, usize)> {
        let mut channels = Vec::new();
        for (e, edge) in self.inputs.iter().enumerate() {
            for s in 0..graph.stages[edge.from].parallelism {
                channels.push((e, s));
            }
        }
        channels
    }

    /// The index of upstream subtask `subtask`'s channel at this stage's gates for input
    /// edge `edge`.
    pub fn channel_of(&self, graph: &JobGraph, edge: usize, subtask: usize) -> usize {
        self.gate_channels(graph)
            .iter()
            .position(|&c| c == (edge, subtask))
            .expect("an edge of this stage")
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct JobGraph<'p> {
    /// Source groups, in order of first appearance.
    pub sources: Vec<SourceGroup<'p>>,
    /// Operators in topological order.
    pub operators: Vec<GraphOperator<'p>>,
    /// Stages in topological order.
    pub stages: Vec<Stage>,
    /// The roots (sinks, or the query's result), as given.
    pub roots: Vec<OperatorId>,
}

/// The table's `'scan.parallelism'` (default 1): source subtasks, each reading every
/// `n`-th file of a `filesystem` path, or generating every `n`-th `nexmark` event.
///
/// # Errors
/// Not a positive number, or more than one subtask for a connector that cannot split.
pub fn source_parallelism(spec: &SourceSpec) -> Result<usize> {
    let Some(v) = spec.options.get("scan.parallelism") else {
        return Ok(1);
    };
    let n = v
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|n| *n > 0 && *n <= 1024)
        .ok_or_else(|| {
            SluiceError::Config(format!(
                "'scan.parallelism' of table '{}' must be a whole number from 1 to 1024, found '{v}'",
                spec.table
            ))
        })?;
    let connector = spec.options.get("connector").map(|s| s.as_str());
    if n > 1
        && !matches!(
            connector,
            Some("filesystem" | "nexmark" | "kafka" | "upsert-kafka")
        )
    {
        return Err(SluiceError::NotSupported(format!(
            "'scan.parallelism' > 1 for the '{}' connector of table '{}' (only filesystem \
             sources, by file, nexmark sources, by event, and kafka sources, by partition, split)",
            connector.unwrap_or("?"),
            spec.table
        )));
    }
    Ok(n)
}

impl<'p> JobGraph<'p> {
    /// The graph of the plans `roots` (a query, or the sinks of a statement set) run at
    /// `parallelism` (`'parallelism.default'`).
    ///
    /// # Errors
    /// A root that is a bare source (nothing to run), a bad `'scan.parallelism'`.
    pub fn build(roots: &[&'p PlanNode], parallelism: usize) -> Result<Self> {
        let mut b = Builder {
            sources: Vec::new(),
            operators: Vec::new(),
            source_keys: Vec::new(),
        };
        let mut root_ids = Vec::new();
        for root in roots {
            match b.visit(root)? {
                Upstream::Operator(id) => root_ids.push(id),
                Upstream::Source(_) => {
                    return Err(SluiceError::Internal(
                        "a plan root must be an operator, not a bare source".into(),
                    ))
                }
            }
        }
        let mut graph = JobGraph {
            sources: b.sources,
            operators: b.operators,
            stages: Vec::new(),
            roots: root_ids,
        };
        graph.assign_stages(parallelism);
        Ok(graph)
    }

    /// Every consumer `(operator, input index)` of each upstream.
    fn consumers(&self) -> BTreeMap<Upstream, Vec<(OperatorId, usize)>> {
        let mut m: BTreeMap<Upstream, Vec<(OperatorId, usize)>> = BTreeMap::new();
        for (id, op) in self.operators.iter().enumerate() {
            for (i, u) in op.inputs.iter().enumerate() {
                m.entry(*u).or_default().push((id, i));
            }
        }
        m
    }

    fn assign_stages(&mut self, parallelism: usize) {
        let consumers = self.consumers();
        let any_keyed = self.operators.iter().any(|o| o.keys.is_some());
        let staged = parallelism > 1 && any_keyed;
        for g in 0..self.sources.len() {
            self.sources[g].stage = self.stages.len();
            self.stages.push(Stage {
                kind: StageKind::Source(g),
                operators: Vec::new(),
                parallelism: self.sources[g].parallelism,
                inputs: Vec::new(),
                consumers: Vec::new(),
            });
        }
        for id in 0..self.operators.len() {
            let op = &self.operators[id];
            let keyed = op.keys.is_some();
            // Sinks and the result run in operator stages (they take part in checkpoints).
            let root = !consumers.contains_key(&Upstream::Operator(id));
            let upstream_stage = |u: &Upstream| match u {
                Upstream::Source(g) => self.sources[*g].stage,
                Upstream::Operator(o) => self.operators[*o].stage,
            };
            // Chain onto the input's stage when nothing forces a new one.
            if let [u] = op.inputs[..] {
                let s = upstream_stage(&u);
                let fan_out = consumers.get(&u).is_some_and(|c| c.len() > 1);
                let chains = !fan_out
                    && match self.stages[s].kind {
                        StageKind::Source(_) => !keyed && !root,
                        // A keyed operator never runs unpartitioned on several subtasks.
                        StageKind::Operators => {
                            !(keyed && (staged || self.stages[s].parallelism > 1))
                        }
                    };
                if chains {
                    self.operators[id].stage = s;
                    self.stages[s].operators.push(id);
                    continue;
                }
            }
            // A new stage, fed by every input: a keyed operator's subtasks behind a hash
            // exchange, else one subtask (a merge). (Not one subtask per source subtask: a
            // source subtask with no input finishes at once, and a finished subtask stops
            // the job's checkpoints.)
            let partitioned = |k: &Vec<RoutingKeys>| staged && !k[0].exprs.is_empty();
            let stage_parallelism = match &op.keys {
                Some(k) if partitioned(k) => parallelism,
                _ => 1,
            };
            let new = self.stages.len();
            let inputs: Vec<StageInput> = op
                .inputs
                .iter()
                .enumerate()
                .map(|(i, u)| {
                    let from = upstream_stage(u);
                    let exchange = match &op.keys {
                        Some(k) if partitioned(k) => Exchange::Hash(k[i].clone()),
                        _ => Exchange::Single,
                    };
                    StageInput {
                        from,
                        exchange,
                        input: i,
                    }
                })
                .collect();
            for edge in &inputs {
                let consumers = &mut self.stages[edge.from].consumers;
                if !consumers.contains(&new) {
                    consumers.push(new);
                }
            }
            self.stages.push(Stage {
                kind: StageKind::Operators,
                operators: vec![id],
                parallelism: stage_parallelism,
                inputs,
                consumers: Vec::new(),
            });
            self.operators[id].stage = new;
        }
    }

    /// The operator subtasks of all operator stages (they snapshot state and ack
    /// checkpoints), numbered stage by stage: the number of stage `s`'s subtask 0.
    pub fn first_operator_subtask(&self, stage: usize) -> usize {
        self.stages[..stage]
            .iter()
            .filter(|s| s.kind == StageKind::Operators)
            .map(|s| s.parallelism)
            .sum()
    }

    /// Operator subtasks in all.
    pub fn operator_subtasks(&self) -> usize {
        self.first_operator_subtask(self.stages.len())
    }

    /// Source subtasks in all.
    pub fn source_subtasks(&self) -> usize {
        self.sources.iter().map(|g| g.parallelism).sum()
    }
}

struct Builder<'p> {
    sources: Vec<SourceGroup<'p>>,
    operators: Vec<GraphOperator<'p>>,
    /// Each group's identity (the scan's spec, columns and time attribute, whatever the
    /// alias): equal scans are one group.
    source_keys: Vec<String>,
}

impl<'p> Builder<'p> {
    fn visit(&mut self, node: &'p PlanNode) -> Result<Upstream> {
        if let OperatorSpec::Source(spec) = &node.spec {
            // Not the node's schema qualifiers: `FROM t a JOIN t b` reads `t` once; nor
            // what each scan reads of it: the group reads the union.
            let unpruned = SourceSpec {
                read_schema: None,
                ..spec.clone()
            };
            let key = format!(
                "{unpruned:?} {:?} {:?}",
                node.schema.as_arrow(),
                node.rowtime
            );
            if let Some(g) = self.source_keys.iter().position(|k| *k == key) {
                let group = &mut self.sources[g].spec;
                group.read_schema =
                    union_read_schema(&group.read_schema, &spec.read_schema, &spec.physical_schema);
                return Ok(Upstream::Source(g));
            }
            let first_subtask = self.sources.iter().map(|g| g.parallelism).sum();
            self.sources.push(SourceGroup {
                node,
                spec: spec.clone(),
                parallelism: source_parallelism(spec)?,
                first_subtask,
                stage: 0,
            });
            self.source_keys.push(key);
            return Ok(Upstream::Source(self.sources.len() - 1));
        }
        let inputs = node
            .inputs
            .iter()
            .map(|i| self.visit(i))
            .collect::<Result<Vec<_>>>()?;
        self.operators.push(GraphOperator {
            node,
            inputs,
            keys: routing_keys(node),
            stage: 0,
        });
        Ok(Upstream::Operator(self.operators.len() - 1))
    }
}

/// What two scans of one table read together (`None`: every column), in the order of
/// the table's physical columns `all`.
fn union_read_schema(
    a: &Option<DFSchemaRef>,
    b: &Option<DFSchemaRef>,
    all: &DFSchema,
) -> Option<DFSchemaRef> {
    let (Some(a), Some(b)) = (a, b) else {
        return None;
    };
    let qualifier = a.iter().next().and_then(|(q, _)| q.cloned());
    let fields = union_fields(a.fields(), b.fields(), all.fields())
        .iter()
        .map(|f| (qualifier.clone(), Arc::clone(f)))
        .collect();
    DFSchema::new_with_metadata(fields, a.metadata().clone())
        .ok()
        .map(Arc::new)
}

/// The fields either of two narrowings of `all` has, in the order of `all`; a `ROW` read
/// by both has the fields either reads.
fn union_fields(a: &Fields, b: &Fields, all: &Fields) -> Fields {
    all.iter()
        .filter_map(|f| match (a.find(f.name()), b.find(f.name())) {
            (Some((_, x)), Some((_, y))) => {
                Some(match (x.data_type(), y.data_type(), f.data_type()) {
                    (DataType::Struct(fx), DataType::Struct(fy), DataType::Struct(whole))
                        if fx != fy =>
                    {
                        Arc::new(
                            Field::new(
                                x.name(),
                                DataType::Struct(union_fields(fx, fy, whole)),
                                x.is_nullable(),
                            )
                            .with_metadata(x.metadata().clone()),
                        )
                    }
                    _ => Arc::clone(x),
                })
            }
            (Some((_, x)), None) => Some(Arc::clone(x)),
            (None, Some((_, y))) => Some(Arc::clone(y)),
            (None, None) => None,
        })
        .collect()
}
