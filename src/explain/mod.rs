//! EXPLAIN: the job graph (`sluice_runtime::graph`) as indented text or Graphviz DOT, with
//! each operator's parallelism, how its input is partitioned, and its state. Both read the
//! same graph the runtime launches, so EXPLAIN shows what runs.

use sluice_common::plan::{GroupOutput, OperatorSpec, OverCall, OverFrame, PlanNode};
use sluice_common::Result;
use sluice_runtime::graph::{Exchange, JobGraph, StageKind, Upstream};

mod sql;
mod text;

/// How a plan would run, for EXPLAIN: the session's parallelism and key groups.
#[derive(Debug, Clone)]
pub struct ExplainContext {
    /// `'parallelism.default'`.
    pub parallelism: usize,
    /// `'pipeline.max-parallelism'` (key groups).
    pub max_parallelism: u32,
    /// `'table.exec.state.ttl'` as written, if set.
    pub state_ttl: Option<String>,
}

/// One node (a source or an operator) of the graph as EXPLAIN shows it.
struct ExplainedNode {
    /// What it does (operator name and arguments).
    label: String,
    /// Subtasks.
    parallelism: usize,
    /// Its inputs: the node each comes from and how it is partitioned (`forward`,
    /// `hash[keys]`, `single`, `merge` of several subtasks into one).
    inputs: Vec<(usize, String)>,
    /// Its state: kind and key.
    state: Option<String>,
}

/// The graph's nodes (sources first, then operators in topological order) and its roots.
fn explained(graph: &JobGraph, ctx: &ExplainContext) -> (Vec<ExplainedNode>, Vec<usize>) {
    let sources = graph.sources.len();
    let node_of = |u: &Upstream| match u {
        Upstream::Source(g) => *g,
        Upstream::Operator(o) => sources + o,
    };
    let mut nodes: Vec<ExplainedNode> = graph
        .sources
        .iter()
        .map(|g| ExplainedNode {
            label: source_label(&g.spec),
            parallelism: g.parallelism,
            inputs: Vec::new(),
            state: None,
        })
        .collect();
    for (id, op) in graph.operators.iter().enumerate() {
        let stage = &graph.stages[op.stage];
        let starts_stage = stage.kind == StageKind::Operators && stage.operators[0] == id;
        let inputs = op
            .inputs
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let partitioning = match stage.inputs.iter().find(|e| e.input == i) {
                    Some(edge) if starts_stage => match &edge.exchange {
                        Exchange::Single if op.keys.is_some() => "single".to_string(),
                        Exchange::Single if graph.stages[edge.from].parallelism > 1 => {
                            "merge".to_string()
                        }
                        Exchange::Single => "forward".to_string(),
                        hash => hash.describe(&|e| clean(&sql::sql(e))),
                    },
                    _ => "forward".to_string(),
                };
                (node_of(u), partitioning)
            })
            .collect();
        let keys: Option<Vec<Vec<String>>> = op.keys.as_ref().map(|per_input| {
            per_input
                .iter()
                .map(|k| k.exprs.iter().map(|e| clean(&sql::sql(e))).collect())
                .collect()
        });
        nodes.push(ExplainedNode {
            label: label(op.node),
            parallelism: stage.parallelism,
            inputs,
            state: state(op.node, keys.as_deref(), ctx),
        });
    }
    let roots = graph.roots.iter().map(|r| sources + r).collect();
    (nodes, roots)
}

/// What state an operator keeps, keyed how (`keys`: per input).
fn state(node: &PlanNode, keys: Option<&[Vec<String>]>, ctx: &ExplainContext) -> Option<String> {
    let keyed = |k: Option<&Vec<String>>| match k {
        Some(k) if !k.is_empty() => format!("keyed by [{}]", k.join(", ")),
        _ => "one global key".to_string(),
    };
    let key_text = keyed(keys.and_then(|k| k.first()));
    let ttl = ctx
        .state_ttl
        .as_ref()
        .map(|t| format!(", ttl {t}"))
        .unwrap_or_default();
    let state = match &node.spec {
        OperatorSpec::WindowAggregate(a)
            if matches!(
                a.window.kind,
                sluice_common::plan::WindowKind::Session { .. }
            ) =>
        {
            format!("session rows and timers, {key_text}")
        }
        OperatorSpec::WindowAggregate(a) if a.window.processing_time => format!(
            "window accumulators, fired by a processing-time timer at each window's end - 1 \
             ms (depends on the clock: a replay after a failure is not the same run), \
             {key_text}"
        ),
        OperatorSpec::WindowAggregate(_) => format!("window accumulators, {key_text}"),
        OperatorSpec::GroupAggregate { .. } => format!("accumulators, {key_text}{ttl}"),
        OperatorSpec::ChangelogNormalize { .. } => {
            format!("the last row per primary key, {key_text}")
        }
        OperatorSpec::MatchRecognize(_) => {
            format!("buffered rows and partial matches, {key_text}")
        }
        OperatorSpec::OverAggregate(o) => {
            let frame = match o.frame {
                OverFrame::Rows { preceding: Some(n) } => format!("the last {n} rows"),
                OverFrame::Range {
                    preceding_ms: Some(ms),
                } => format!("the rows of the last {ms} ms"),
                _ => "accumulators".to_string(),
            };
            if o.processing_time {
                format!("{frame} per partition (rows in arrival order), {key_text}")
            } else {
                format!("rows waiting for the watermark and {frame} per partition, {key_text}")
            }
        }
        OperatorSpec::Sort(_) => "rows waiting for the watermark, one global key".to_string(),
        OperatorSpec::Limit { .. } => "the count of rows seen, one global key".to_string(),
        OperatorSpec::Rank(r) if ttl.is_empty() && r.update_fast_key(node.input()).is_some() => {
            format!(
                "the rows ranked <= {} per partition (updates only move a row up: the input's \
                 COUNT(*) grows), {key_text}",
                r.upper
            )
        }
        OperatorSpec::Rank(_) if node.input().is_updating() => format!(
            "every live row per partition (updating input), {key_text}{}",
            if ttl.is_empty() {
                ", kept until retracted (no 'table.exec.state.ttl')".to_string()
            } else {
                ttl.clone()
            }
        ),
        OperatorSpec::Rank(r) if r.window.is_some() => format!(
            "the rows ranked <= {} per window and partition, dropped when the window fires, \
             {key_text}",
            r.upper
        ),
        OperatorSpec::Rank(r) => {
            format!("the rows ranked <= {} per partition, {key_text}", r.upper)
        }
        OperatorSpec::Join(j) if j.temporal.is_some() => format!(
            "probe rows {} until the watermark passes their time; versions {}, from the last \
             one at or before the watermark on (older ones dropped)",
            keyed(keys.and_then(|k| k.first())),
            keyed(keys.and_then(|k| k.get(1)))
        ),
        OperatorSpec::Join(j) if j.window.is_some() => format!(
            "rows of each window, left {}, right {}, joined and dropped when the window fires",
            keyed(keys.and_then(|k| k.first())),
            keyed(keys.and_then(|k| k.get(1)))
        ),
        OperatorSpec::Join(j) if j.interval.is_some() => {
            let b = j.interval.expect("an interval join");
            format!(
                "left rows {}, right rows {}, each dropped when the watermark passes its last \
                 partner time (left: time {:+} ms, right: time {:+} ms; outer rows without a \
                 partner are emitted padded then); output watermark held back {} ms",
                keyed(keys.and_then(|k| k.first())),
                keyed(keys.and_then(|k| k.get(1))),
                b.upper_ms,
                -b.lower_ms,
                b.upper_ms.max(-b.lower_ms).max(0) + 1
            )
        }
        OperatorSpec::Join(j) if j.null_aware => {
            fn keys<E: ToString>(k: &[E]) -> String {
                k.iter()
                    .map(|e| clean(&e.to_string()))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
            format!(
                "left rows keyed by [{}], right rows keyed by [{}], in one subtask (NOT IN \
                 compares a NULL key with every key), {}",
                keys(&j.left_keys),
                keys(&j.right_keys),
                ctx.state_ttl
                    .as_ref()
                    .map(|t| format!("ttl {t}"))
                    .unwrap_or_else(|| "kept until retracted (no 'table.exec.state.ttl')".into())
            )
        }
        OperatorSpec::Join(_) => {
            let ttl = ctx
                .state_ttl
                .as_ref()
                .map(|t| format!("ttl {t}"))
                .unwrap_or_else(|| "kept until retracted (no 'table.exec.state.ttl')".into());
            format!(
                "left rows {}, right rows {}, {ttl}",
                keyed(keys.and_then(|k| k.first())),
                keyed(keys.and_then(|k| k.get(1)))
            )
        }
        OperatorSpec::Source(_)
        | OperatorSpec::Filter { .. }
        | OperatorSpec::Project { .. }
        | OperatorSpec::Unnest { .. }
        | OperatorSpec::Expand { .. }
        | OperatorSpec::WindowAssign { .. }
        | OperatorSpec::LookupJoin(_)
        | OperatorSpec::Union
        | OperatorSpec::Sink(_) => return None,
    };
    Some(format!("{state}, {} key groups", ctx.max_parallelism))
}

/// The physical operator graph of `plans` (a query, or a statement set's `INSERT`s: one
/// job) as indented text, each root first and its inputs below it,
/// indented (as Flink prints plans): each operator with its parallelism, how its input is
/// partitioned (`forward`, `hash[keys]` into key groups, `single`, `merge` of source
/// subtasks), and its state. A source read by two branches shows under each.
///
/// # Errors
/// A plan the runtime cannot lay out (a bad `'scan.parallelism'`).
pub fn explain(plans: &[PlanNode], ctx: &ExplainContext) -> Result<String> {
    let roots: Vec<&PlanNode> = plans.iter().collect();
    let graph = JobGraph::build(&roots, ctx.parallelism)?;
    let (nodes, roots) = explained(&graph, ctx);
    let mut out = String::new();
    fn print(nodes: &[ExplainedNode], n: usize, depth: usize, out: &mut String) {
        let node = &nodes[n];
        out.push_str(&"  ".repeat(depth));
        out.push_str(&node.label);
        out.push_str(&format!(" [parallelism={}", node.parallelism));
        if !node.inputs.is_empty() {
            let inputs: Vec<&str> = node.inputs.iter().map(|(_, p)| p.as_str()).collect();
            out.push_str(&format!(", input={}", inputs.join(", ")));
        }
        if let Some(s) = &node.state {
            out.push_str(&format!(", state={s}"));
        }
        out.push_str("]\n");
        for (from, _) in &node.inputs {
            print(nodes, *from, depth + 1, out);
        }
    }
    for root in roots {
        print(&nodes, root, 0, &mut out);
    }
    Ok(out)
}

/// The physical operator graph of `plans` as a Graphviz digraph (`dot -Tpng`): one box per source and
/// operator (label, parallelism, state), edges from each input to its consumer labelled
/// with the input partitioning; every branch drawn, a shared source once.
///
/// # Errors
/// A plan the runtime cannot lay out (a bad `'scan.parallelism'`).
pub fn explain_dot(plans: &[PlanNode], ctx: &ExplainContext) -> Result<String> {
    let roots: Vec<&PlanNode> = plans.iter().collect();
    let graph = JobGraph::build(&roots, ctx.parallelism)?;
    let (nodes, _) = explained(&graph, ctx);
    // A line break (from `wrap`) becomes DOT's `\n`.
    let escape = |s: &str| {
        s.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    };
    let mut out = String::from(
        "digraph plan {\n  rankdir=BT;\n  node [shape=box, fontname=\"monospace\"];\n",
    );
    for (i, n) in nodes.iter().enumerate() {
        let mut label = format!(
            "{}\\nparallelism={}",
            escape(&wrap(&n.label)),
            n.parallelism
        );
        if let Some(s) = &n.state {
            label.push_str(&format!("\\nstate: {}", escape(&wrap(s))));
        }
        out.push_str(&format!("  n{i} [label=\"{label}\"];\n"));
    }
    for (i, n) in nodes.iter().enumerate() {
        for (from, partitioning) in &n.inputs {
            out.push_str(&format!(
                "  n{from} -> n{i} [label=\"{}\"];\n",
                escape(partitioning)
            ));
        }
    }
    out.push_str("}\n");
    Ok(out)
}

/// `text` broken into lines of about 72 characters after a ", ", so that a picture of the
/// graph stays narrow.
fn wrap(text: &str) -> String {
    const WIDTH: usize = 72;
    let mut out = String::new();
    let mut line = 0;
    for (k, part) in text.split(", ").enumerate() {
        if k > 0 {
            if line + part.len() + 2 > WIDTH {
                out.push_str(",\n");
                line = 0;
            } else {
                out.push_str(", ");
                line += 2;
            }
        }
        out.push_str(part);
        line += part.len();
    }
    out
}

/// A source's line: its table, connector, watermark and, when it decodes fewer than all
/// its physical columns, the columns and `ROW` fields it reads (`reads=[a, r.f]`).
fn source_label(s: &sluice_common::plan::SourceSpec) -> String {
    let wm = s
        .watermark
        .as_ref()
        .map(|w| format!(", watermark=[{}]", w.text))
        .unwrap_or_else(|| ", no watermark".to_string());
    let reads = s
        .read_schema
        .as_ref()
        .map(|r| {
            let mut names = Vec::new();
            for f in r.fields() {
                field_paths(f, "", &mut names);
            }
            format!(", reads=[{}]", names.join(", "))
        })
        .unwrap_or_default();
    format!(
        "Source: table={}, connector={}{wm}{reads}",
        s.table,
        s.options
            .get("connector")
            .map(|s| s.as_str())
            .unwrap_or("?")
    )
}

/// `prefix.field`, or its leaf fields when it is a `ROW` (`r.a`, `r.b`).
fn field_paths(
    field: &datafusion_common::arrow::datatypes::Field,
    prefix: &str,
    out: &mut Vec<String>,
) {
    let path = format!("{prefix}{}", field.name());
    match field.data_type() {
        datafusion_common::arrow::datatypes::DataType::Struct(children) => {
            for c in children {
                field_paths(c, &format!("{path}."), out);
            }
        }
        _ => out.push(path),
    }
}

/// The operator's name and arguments.
fn label(node: &PlanNode) -> String {
    let line = match &node.spec {
        OperatorSpec::Source(s) => source_label(s),
        OperatorSpec::Filter { predicate } => format!("Filter: {}", sql::sql(predicate)),
        OperatorSpec::Project { exprs } => format!(
            "Project: {}",
            exprs.iter().map(sql::sql).collect::<Vec<_>>().join(", ")
        ),
        OperatorSpec::Expand { projections } => {
            format!("Expand: {} grouping sets", projections.len())
        }
        OperatorSpec::Unnest { lists, nulls } => {
            let input = node.input().schema.as_arrow();
            let names: Vec<&str> = lists
                .iter()
                .map(|&i| input.field(i).name().as_str())
                .collect();
            let nulls = match nulls {
                sluice_common::plan::UnnestNulls::Drop => "",
                sluice_common::plan::UnnestNulls::Preserve => ", NULL array kept",
                sluice_common::plan::UnnestNulls::PreserveEmpty => ", NULL or empty array kept",
            };
            format!("Unnest: {}{nulls}", names.join(", "))
        }
        OperatorSpec::WindowAssign { window, .. } => format!("WindowAssign: {window}"),
        OperatorSpec::Union => format!("Union: all, {} inputs", node.inputs.len()),
        OperatorSpec::ChangelogNormalize { key } => format!(
            "ChangelogNormalize: key=[{}] (repeated change events dropped)",
            key.iter()
                .map(|&k| node.input().schema.field(k).name().clone())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        OperatorSpec::LookupJoin(l) => {
            let on: Vec<String> = l
                .left_keys
                .iter()
                .zip(&l.right_keys)
                .map(|(a, b)| format!("{} = {}", sql::sql(a), sql::sql(b)))
                .collect();
            let residual = l
                .residual
                .as_ref()
                .map(|r| format!(", residual=[{}]", sql::sql(r)))
                .unwrap_or_default();
            let cache = l
                .table
                .options
                .get("lookup.cache")
                .map(|c| c.to_ascii_uppercase())
                .unwrap_or_else(|| "NONE".into());
            format!(
                "LookupJoin: {}, table={}, on=[{}]{residual}, lookup.cache={cache} (processing \
                 time: each row looks the table up when it arrives; a replay after a failure \
                 is not the same run)",
                l.kind.sql(),
                l.table.table,
                on.join(", ")
            )
        }
        OperatorSpec::Join(j) => {
            let on: Vec<String> = j
                .left_keys
                .iter()
                .zip(&j.right_keys)
                .map(|(l, r)| {
                    let op = if j.null_equal {
                        "IS NOT DISTINCT FROM"
                    } else {
                        "="
                    };
                    format!("{} {op} {}", sql::sql(l), sql::sql(r))
                })
                .collect();
            let residual = j
                .residual
                .as_ref()
                .map(|r| format!(", residual=[{}]", sql::sql(r)))
                .unwrap_or_default();
            let null_aware = if j.null_aware {
                " (null-aware: NOT IN, a NULL key matches every key)"
            } else {
                ""
            };
            match &j.interval {
                _ if j.temporal.is_some() => {
                    let t = j.temporal.expect("a temporal join");
                    let name = |i: usize| {
                        let (q, f) = j.pair_schema.qualified_field(i);
                        match q {
                            Some(q) => format!("{q}.{}", f.name()),
                            None => f.name().clone(),
                        }
                    };
                    let right = name(
                        j.pair_schema.fields().len() - node.inputs[1].schema.fields().len()
                            + t.right_time,
                    );
                    format!(
                        "TemporalJoin: {}, on=[{}], FOR SYSTEM_TIME AS OF {} (versions from \
                         {right}){residual}",
                        j.kind.sql(),
                        on.join(", "),
                        name(t.left_time)
                    )
                }
                _ if j.window.is_some() => {
                    let w = j.window.expect("a window join");
                    format!(
                        "WindowJoin: {}, {}, on=[{}]{null_aware}{residual}",
                        j.kind.sql(),
                        w.window,
                        on.join(", ")
                    )
                }
                Some(b) => {
                    let name = |i: usize| {
                        let (q, f) = j.pair_schema.qualified_field(i);
                        match q {
                            Some(q) => format!("{q}.{}", f.name()),
                            None => f.name().clone(),
                        }
                    };
                    let left = name(b.left_time);
                    let right = name(
                        j.pair_schema.fields().len() - node.inputs[1].schema.fields().len()
                            + b.right_time,
                    );
                    format!(
                        "IntervalJoin: {}, on=[{}], {left} {:+} ms <= {right} <= {left} {:+} ms{residual}",
                        j.kind.sql(),
                        on.join(", "),
                        b.lower_ms,
                        b.upper_ms
                    )
                }
                None => {
                    format!(
                        "Join: {}, on=[{}]{null_aware}{residual}",
                        j.kind.sql(),
                        on.join(", ")
                    )
                }
            }
        }
        OperatorSpec::WindowAggregate(a) => {
            let groups: Vec<String> = a
                .group_outputs
                .iter()
                .map(|g| match g {
                    GroupOutput::WindowStart => "window_start".to_string(),
                    GroupOutput::WindowEnd => "window_end".to_string(),
                    GroupOutput::WindowTime => "window_time".to_string(),
                    GroupOutput::Key(k) => sql::sql(&a.keys[*k]),
                })
                .collect();
            let assign = match a.windows {
                sluice_common::plan::WindowInput::Assign { .. } => " (windows assigned here)",
                sluice_common::plan::WindowInput::Columns { .. } => "",
            };
            format!(
                "WindowAggregate: {}{assign}, groupBy=[{}], aggregates=[{}]",
                a.window,
                groups.join(", "),
                a.aggregates
                    .iter()
                    .map(sql::sql)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
        OperatorSpec::GroupAggregate { keys, aggregates } => format!(
            "GroupAggregate: groupBy=[{}], aggregates=[{}], changelog output",
            keys.iter().map(sql::sql).collect::<Vec<_>>().join(", "),
            aggregates
                .iter()
                .map(sql::sql)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        OperatorSpec::OverAggregate(o) => format!(
            "OverAggregate: partitionBy=[{}], orderBy=[{}], {}, calls=[{}]",
            exprs(&o.partition_by),
            node.input().schema.field(o.time_column).name(),
            match o.frame {
                OverFrame::Rows { preceding: None } => "ROWS UNBOUNDED PRECEDING".to_string(),
                OverFrame::Rows { preceding: Some(n) } => format!("ROWS {n} PRECEDING"),
                OverFrame::Range { preceding_ms: None } => "RANGE UNBOUNDED PRECEDING".to_string(),
                OverFrame::Range {
                    preceding_ms: Some(ms),
                } => format!("RANGE {ms} ms PRECEDING"),
            },
            o.calls
                .iter()
                .map(|c| match c {
                    OverCall::Aggregate(e) => sql::sql(e),
                    OverCall::Lag { value, offset, .. } => {
                        format!("LAG({}, {offset})", sql::sql(value))
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
        OperatorSpec::Sort(sort) => format!(
            "Sort: orderBy=[{}], released by the watermark",
            exprs(&sort.order_by)
        ),
        OperatorSpec::Limit { offset, fetch } => {
            format!("Limit: offset={offset}, fetch={fetch}")
        }
        OperatorSpec::Rank(r) => {
            let order = r
                .order_by
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            let window = if r.window.is_some() { "Window" } else { "" };
            let output = if r.window.is_some() {
                "append-only output, at window end"
            } else if r.keeps_first_arrivals() {
                "append-only output"
            } else {
                "changelog output"
            };
            if r.is_deduplication(node.input()) {
                let keep = if r.order_by[0].asc { "first" } else { "last" };
                format!(
                    "{window}Deduplicate: keep {keep} row, partitionBy=[{}], orderBy=[{order}], {output}",
                    exprs(&r.partition_by)
                )
            } else {
                format!(
                    "{window}Rank: {}() in [{}, {}], partitionBy=[{}], orderBy=[{order}]{}, {output}",
                    r.function.sql(),
                    r.lower,
                    r.upper,
                    exprs(&r.partition_by),
                    if r.rank_column { ", with rank column" } else { "" }
                )
            }
        }
        OperatorSpec::MatchRecognize(m) => format!(
            "MatchRecognize: pattern=({}){}, skip={:?}, {}, measures=[{}]",
            m.pattern,
            m.within_ms
                .map(|w| format!(" within {w} ms"))
                .unwrap_or_default(),
            m.skip,
            if m.all_rows {
                "all rows per match"
            } else {
                "one row per match"
            },
            m.measures
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        OperatorSpec::Sink(s) => format!(
            "Sink: table={}, connector={}",
            s.table,
            s.options
                .get("connector")
                .map(|s| s.as_str())
                .unwrap_or("?")
        ),
    };
    clean(&line)
}

/// Expressions, comma-separated.
fn exprs<E: ToString>(list: &[E]) -> String {
    list.iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Drops the placeholder qualifiers of lifted window calls (internal names) and makes
/// expressions read as SQL ([`text::tidy`]).
fn clean(text: &str) -> String {
    let mut line = text.to_string();
    while let Some(p) = line.find("__sluice_tvf_") {
        let end = line[p..].find('.').map(|d| p + d + 1).unwrap_or(line.len());
        line.replace_range(p..end, "");
    }
    text::tidy(&line)
}
