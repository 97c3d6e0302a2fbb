//! Column pruning, after lowering: which columns, and which fields of `ROW` columns, the
//! consumers of each node read (Calcite's project pruning; Flink's projection pushdown
//! into sources, `SupportsProjectionPushDown` with nested fields).
//!
//! Needs flow from the root down. The root's columns are all read. A projection reads what
//! its read expressions name and drops the expressions nobody reads; a filter passes its
//! needs on, plus its predicate's, and drops what its input dropped (over an input that
//! cannot drop a column itself, such as a scan, a projection of the read columns is put
//! below it, so the filter copies only those); a Top-N whose rank
//! number nobody reads drops it (Flink's Top-N without rank number: only rows entering
//! and leaving the range are emitted, not the rank changes of the rows in it) and, over
//! an append-only input, reads of it what its consumers, its `PARTITION BY` and its
//! `ORDER BY` read (over an updating input, every column); a source
//! keeps its columns but records the physical columns and `ROW` fields it must decode
//! (`SourceSpec::read_schema`). An aggregate (updating or windowed) reads what its keys,
//! its calls and its window columns name; a window assignment and a join pass their
//! consumers' needs on, plus what they read themselves (keys, condition, time and window
//! columns), and drop what their inputs dropped. Where a join's or a Top-N's input cannot
//! drop an unread column itself (a scan, a filter over one), a projection is put above
//! it, so the operator's state keeps only the columns read above it. Rows that differed
//! only in a dropped column become equal rows there, which both operators hold as copies,
//! so the output is the same multiset of rows. Below any other operator every
//! column is read whole.
//!
//! An expression reads a `ROW` column's field `f` only when it reaches the column through
//! `get_field(column, 'f')` (`r.f`, `r['f']`); any other use reads the whole value.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion_common::arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion_common::{DFSchema, DFSchemaRef};
use datafusion_expr::Expr;
use sluice_common::plan::{JoinKind, JoinSpec, OperatorSpec, PlanNode, SourceSpec, WindowInput};

/// How much of a value its consumers read.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Use {
    /// All of it.
    All,
    /// Only these fields of a `ROW`, each as much as its own use says.
    Fields(BTreeMap<String, Use>),
}

impl Use {
    fn merge(&mut self, other: Use) {
        match (self, other) {
            (Use::All, _) => {}
            (this, Use::All) => *this = Use::All,
            (Use::Fields(have), Use::Fields(more)) => {
                for (name, used) in more {
                    match have.get_mut(&name) {
                        Some(u) => u.merge(used),
                        None => {
                            have.insert(name, used);
                        }
                    }
                }
            }
        }
    }
}

/// Per column of a node: what its consumers read of it (`None`: nothing).
pub(super) type Needs = Vec<Option<Use>>;

/// Every column of a `width`-column node read whole.
pub(super) fn all_needed(width: usize) -> Needs {
    vec![Some(Use::All); width]
}

fn need(needs: &mut Needs, column: usize, used: Use) {
    match &mut needs[column] {
        Some(u) => u.merge(used),
        slot @ None => *slot = Some(used),
    }
}

/// Adds to `needs` (one per column of `schema`) what `expr` reads when its value is used
/// as `used` says.
fn expr_needs(expr: &Expr, used: Use, schema: &DFSchema, needs: &mut Needs) {
    match expr {
        Expr::Column(c) => {
            if let Ok(i) = schema.index_of_column(c) {
                need(needs, i, used);
            }
        }
        Expr::Alias(a) => expr_needs(&a.expr, used, schema, needs),
        Expr::ScalarFunction(f) if f.func.name() == "get_field" => match f.args.as_slice() {
            [row, Expr::Literal(name, _)] if name.try_as_str().flatten().is_some() => {
                let name = name.try_as_str().flatten().unwrap_or_default().to_string();
                let fields = Use::Fields(BTreeMap::from([(name, used)]));
                expr_needs(row, fields, schema, needs);
            }
            _ => children_needs(expr, schema, needs),
        },
        _ => children_needs(expr, schema, needs),
    }
}

/// Every sub-expression of `expr` read whole.
fn children_needs(expr: &Expr, schema: &DFSchema, needs: &mut Needs) {
    let _ = expr.apply_children(|child| {
        expr_needs(child, Use::All, schema, needs);
        Ok(TreeNodeRecursion::Continue)
    });
}

/// Prunes `node` and the nodes below it, given what its consumers read (`needed`, one per
/// column). Returns which of `node`'s columns stay (`None`: all).
pub(super) fn prune_columns(node: &mut PlanNode, needed: &[Option<Use>]) -> Option<Vec<bool>> {
    let width = node.inputs.first().map_or(0, |i| i.schema.fields().len());
    match &mut node.spec {
        OperatorSpec::Project { exprs } => {
            let mut keep: Vec<bool> = (0..exprs.len())
                .map(|i| needed.get(i).is_none_or(Option::is_some))
                .collect();
            // A projection of nothing would lose its row count.
            if !keep.contains(&true) && !keep.is_empty() {
                keep[0] = true;
            }
            let mut needs = vec![None; width];
            for (i, e) in exprs.iter().enumerate().filter(|(i, _)| keep[*i]) {
                let used = needed.get(i).cloned().flatten().unwrap_or(Use::All);
                expr_needs(e, used, &node.inputs[0].schema, &mut needs);
            }
            prune_columns(&mut node.inputs[0], &needs);
            if keep.iter().all(|k| *k) {
                return None;
            }
            let mut i = 0;
            exprs.retain(|_| {
                i += 1;
                keep[i - 1]
            });
            keep_columns(node, &keep);
            Some(keep)
        }
        OperatorSpec::Filter { predicate } => {
            let mut needs = needed.to_vec();
            needs.resize(width, Some(Use::All));
            expr_needs(predicate, Use::All, &node.inputs[0].schema, &mut needs);
            // Unread columns go before the filter copies its rows.
            let keep = prune_held_input(&mut node.inputs[0], &needs)?;
            keep_columns(node, &keep);
            Some(keep)
        }
        OperatorSpec::Rank(spec) => {
            // The output: the input's columns, then the rank number when shown. Over an
            // updating input every column stays: a retraction takes away the latest held
            // row equal to it, and columns nobody reads still tell tied rows apart (which
            // copy goes decides the order of the rest), and an upsert key they hold lets
            // the Top-N run update-fast.
            let mut needs = if node.inputs[0].is_updating() {
                all_needed(width)
            } else {
                padded(needed, width)
            };
            let input_schema = &node.inputs[0].schema;
            for e in &spec.partition_by {
                expr_needs(e, Use::All, input_schema, &mut needs);
            }
            for s in &spec.order_by {
                expr_needs(&s.expr, Use::All, input_schema, &mut needs);
            }
            if let Some(w) = &spec.window {
                need(&mut needs, w.end_column, Use::All);
            }
            let kept = prune_held_input(&mut node.inputs[0], &needs);
            let drop_rank = spec.rank_column && needed.get(width).is_some_and(Option::is_none);
            if kept.is_none() && !drop_rank {
                return None;
            }
            let mut keep = kept.unwrap_or_else(|| vec![true; width]);
            if let Some(w) = &mut spec.window {
                w.end_column = remap(w.end_column, &keep);
            }
            if spec.rank_column {
                keep.push(!drop_rank);
                spec.rank_column = !drop_rank;
            }
            keep_columns(node, &keep);
            Some(keep)
        }
        OperatorSpec::Source(spec) => {
            spec.read_schema = read_schema(spec, &node.schema, needed);
            None
        }
        OperatorSpec::GroupAggregate { keys, aggregates } => {
            let mut needs = vec![None; width];
            for e in keys.iter().chain(aggregates.iter()) {
                expr_needs(e, Use::All, &node.inputs[0].schema, &mut needs);
            }
            prune_columns(&mut node.inputs[0], &needs);
            None
        }
        OperatorSpec::WindowAggregate(spec) => {
            let mut needs = vec![None; width];
            match spec.windows {
                WindowInput::Assign { time_column } => need(&mut needs, time_column, Use::All),
                WindowInput::Columns { start, end } => {
                    need(&mut needs, start, Use::All);
                    need(&mut needs, end, Use::All);
                }
            }
            // With `Assign`, the expression schema is the input's columns, then the window
            // bounds the aggregate appends.
            let mut expr_needs_all = vec![None; spec.expr_schema.fields().len()];
            for e in spec.keys.iter().chain(spec.aggregates.iter()) {
                expr_needs(e, Use::All, &spec.expr_schema, &mut expr_needs_all);
            }
            for (i, used) in expr_needs_all.into_iter().enumerate().take(width) {
                if let Some(used) = used {
                    need(&mut needs, i, used);
                }
            }
            let keep = prune_columns(&mut node.inputs[0], &needs)?;
            spec.windows = match spec.windows {
                WindowInput::Assign { time_column } => WindowInput::Assign {
                    time_column: remap(time_column, &keep),
                },
                WindowInput::Columns { start, end } => WindowInput::Columns {
                    start: remap(start, &keep),
                    end: remap(end, &keep),
                },
            };
            if matches!(spec.windows, WindowInput::Assign { .. }) {
                let mut expr_keep = keep;
                expr_keep.resize(spec.expr_schema.fields().len(), true);
                spec.expr_schema = without_columns(&spec.expr_schema, &expr_keep);
            } else {
                spec.expr_schema = Arc::clone(&node.inputs[0].schema);
            }
            None
        }
        OperatorSpec::WindowAssign { time_column, .. } => {
            // Output: the input's columns, then window_start, window_end, window_time.
            let mut needs = padded(needed, node.schema.fields().len());
            needs.truncate(width);
            need(&mut needs, *time_column, Use::All);
            let keep = prune_columns(&mut node.inputs[0], &needs)?;
            *time_column = remap(*time_column, &keep);
            let mut out_keep = keep;
            out_keep.resize(node.schema.fields().len(), true);
            keep_columns(node, &out_keep);
            Some(out_keep)
        }
        OperatorSpec::Join(spec) => {
            prune_join(spec, node_parts(&mut node.inputs), needed).map(|keep| {
                keep_columns(node, &keep);
                keep
            })
        }
        _ => {
            for input in &mut node.inputs {
                let needs = all_needed(input.schema.fields().len());
                prune_columns(input, &needs);
            }
            None
        }
    }
}

/// The `[left, right]` inputs of a join.
fn node_parts(inputs: &mut [PlanNode]) -> [&mut PlanNode; 2] {
    let [left, right] = inputs else {
        unreachable!("a join has two inputs")
    };
    [left, right]
}

/// Prunes a regular, interval, window or temporal join's inputs to what its consumers,
/// its keys, its residual condition and its time and window columns read. Returns which
/// output columns stay (the left input's kept columns, then the right's for a join that
/// outputs both), `None` when all do. Rows that differed only in a dropped column become
/// copies of one row in the join's state, which counts copies, so the output is the same
/// multiset of rows.
fn prune_join(
    spec: &mut JoinSpec,
    [left, right]: [&mut PlanNode; 2],
    needed: &[Option<Use>],
) -> Option<Vec<bool>> {
    let lw = left.schema.fields().len();
    let rw = right.schema.fields().len();
    // Semi and anti joins output the left columns only; a mark join the left columns and
    // its mark.
    let pairs_out = !matches!(
        spec.kind,
        JoinKind::LeftSemi | JoinKind::LeftAnti | JoinKind::LeftMark
    );
    let mut pair_needs = padded(needed, if pairs_out { lw + rw } else { lw });
    pair_needs.resize(lw + rw, None);
    if let Some(residual) = &spec.residual {
        expr_needs(residual, Use::All, &spec.pair_schema, &mut pair_needs);
    }
    let mut right_needs = pair_needs.split_off(lw);
    let mut left_needs = pair_needs;
    for e in &spec.left_keys {
        expr_needs(e, Use::All, &left.schema, &mut left_needs);
    }
    for e in &spec.right_keys {
        expr_needs(e, Use::All, &right.schema, &mut right_needs);
    }
    let mut times = Vec::new();
    if let Some(b) = &spec.interval {
        times.push((b.left_time, b.right_time));
    }
    if let Some(t) = &spec.temporal {
        times.push((t.left_time, t.right_time));
    }
    if let Some(w) = &spec.window {
        times.push((w.left_start, w.right_start));
        times.push((w.left_end, w.right_end));
    }
    for &(l, r) in &times {
        need(&mut left_needs, l, Use::All);
        need(&mut right_needs, r, Use::All);
    }
    let left_keep = prune_held_input(left, &left_needs);
    let right_keep = prune_held_input(right, &right_needs);
    if left_keep.is_none() && right_keep.is_none() {
        return None;
    }
    let left_keep = left_keep.unwrap_or_else(|| vec![true; lw]);
    let right_keep = right_keep.unwrap_or_else(|| vec![true; rw]);
    if let Some(b) = &mut spec.interval {
        b.left_time = remap(b.left_time, &left_keep);
        b.right_time = remap(b.right_time, &right_keep);
    }
    if let Some(t) = &mut spec.temporal {
        t.left_time = remap(t.left_time, &left_keep);
        t.right_time = remap(t.right_time, &right_keep);
    }
    if let Some(w) = &mut spec.window {
        w.left_start = remap(w.left_start, &left_keep);
        w.left_end = remap(w.left_end, &left_keep);
        w.right_start = remap(w.right_start, &right_keep);
        w.right_end = remap(w.right_end, &right_keep);
    }
    let pair_keep: Vec<bool> = left_keep.iter().chain(&right_keep).copied().collect();
    spec.pair_schema = without_columns(&spec.pair_schema, &pair_keep);
    let mut out_keep = pair_keep;
    if !pairs_out {
        out_keep.truncate(lw);
        if spec.kind == JoinKind::LeftMark {
            out_keep.push(true);
        }
    }
    Some(out_keep)
}

/// Prunes the input of an operator that holds its rows (a join, a Top-N) to the columns
/// `needs` reads (as [`prune_columns`]), then, when some column it still outputs is
/// unread, puts a `Project` of the read ones above it (at least one, so rows keep their
/// count), so the operator's state keeps only what is read. Returns which of the input's
/// original columns stay (`None`: all).
fn prune_held_input(node: &mut PlanNode, needs: &[Option<Use>]) -> Option<Vec<bool>> {
    let width = node.schema.fields().len();
    let pruned = prune_columns(node, needs);
    let kept = pruned.clone().unwrap_or_else(|| vec![true; width]);
    let mut read: Vec<bool> = (0..width)
        .filter(|i| kept[*i])
        .map(|i| needs.get(i).is_none_or(Option::is_some))
        .collect();
    if !read.contains(&true) {
        if let Some(first) = read.first_mut() {
            *first = true;
        }
    }
    if read.iter().all(|r| *r) {
        return pruned;
    }
    let exprs = (0..read.len())
        .filter(|i| read[*i])
        .map(|i| Expr::Column(node.schema.qualified_field(i).into()))
        .collect();
    let mut project = PlanNode {
        spec: OperatorSpec::Project { exprs },
        inputs: Vec::new(),
        schema: Arc::clone(&node.schema),
        rowtime: node.rowtime,
    };
    keep_columns(&mut project, &read);
    let input = std::mem::replace(node, project);
    node.inputs.push(input);
    let mut read = read.into_iter();
    Some(
        kept.iter()
            .map(|k| *k && read.next().unwrap_or(false))
            .collect(),
    )
}

/// `needed` with a column it does not mention read whole, `width` long.
fn padded(needed: &[Option<Use>], width: usize) -> Needs {
    let mut needs = needed.to_vec();
    needs.resize(width, Some(Use::All));
    needs
}

/// The index that column `index` of a node has once the columns where `keep` is false are
/// left out.
fn remap(index: usize, keep: &[bool]) -> usize {
    keep[..index].iter().filter(|k| **k).count()
}

/// The physical columns and fields a scan reads, when fewer than all and the connector
/// can skip the others (a `filesystem` table in the `json` or `csv` format, not
/// partitioned: JSON decodes only these; CSV still splits every field but converts only
/// these). The
/// time attribute and what the watermark reads, partition keys and `NOT NULL` columns and
/// fields (whose NULL is a data error) are always read. With
/// `'json.ignore-parse-errors'` every column is read, so which lines are skipped does not
/// depend on the query (nor on the other scans of the table it shares a source with).
fn read_schema(
    spec: &SourceSpec,
    output: &DFSchema,
    needed: &[Option<Use>],
) -> Option<DFSchemaRef> {
    let option = |name: &str| spec.options.get(name).map(String::as_str);
    let format = option("format").unwrap_or_default();
    let by_name = option("connector") == Some("filesystem")
        && matches!(format, "json" | "csv")
        && spec.partition_keys.is_empty()
        && !option(&format!("{format}.ignore-parse-errors"))
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        && !spec.physical_schema.fields().is_empty();
    if !by_name {
        return None;
    }
    let mut out_needs = needed.to_vec();
    out_needs.resize(output.fields().len(), Some(Use::All));
    if let Some(wm) = &spec.watermark {
        need(&mut out_needs, wm.rowtime, Use::All);
        for c in wm.expr.column_refs() {
            if let Some(i) = output.fields().iter().position(|f| f.name() == &c.name) {
                need(&mut out_needs, i, Use::All);
            }
        }
    }
    let physical = &spec.physical_schema;
    let mut needs = vec![None; physical.fields().len()];
    for (i, used) in out_needs.into_iter().enumerate() {
        if let (Some(used), Some(e)) = (used, spec.columns.get(i)) {
            expr_needs(e, used, physical, &mut needs);
        }
    }
    let mut narrowed = false;
    let mut fields = Vec::new();
    for (i, (qualifier, field)) in physical.iter().enumerate() {
        let used = if !field.is_nullable() || spec.partition_keys.contains(field.name()) {
            Some(Use::All)
        } else if needs[i].is_none() && has_not_null_field(field) {
            // Read for its NOT NULL fields only.
            Some(Use::Fields(BTreeMap::new()))
        } else {
            needs[i].take()
        };
        match used.and_then(|u| narrow_field(field, &u)) {
            Some(f) => {
                narrowed |= !Arc::ptr_eq(&f, field);
                fields.push((qualifier.cloned(), f));
            }
            None => narrowed = true,
        }
    }
    // Reading nothing would lose the row count: read the first column.
    if fields.is_empty() {
        let (qualifier, field) = physical.qualified_field(0);
        fields.push((qualifier.cloned(), Arc::clone(field)));
    }
    if !narrowed {
        return None;
    }
    DFSchema::new_with_metadata(fields, physical.metadata().clone())
        .ok()
        .map(Arc::new)
}

/// `field` with the `ROW` fields `used` does not read left out (`NOT NULL` ones are read);
/// `None` when the field itself is not read.
fn narrow_field(field: &FieldRef, used: &Use) -> Option<FieldRef> {
    let (Use::Fields(read), DataType::Struct(children)) = (used, field.data_type()) else {
        return Some(Arc::clone(field));
    };
    let mut changed = false;
    let kept: Vec<FieldRef> = children
        .iter()
        .filter_map(|child| {
            let narrowed = match read.get(child.name()) {
                _ if !child.is_nullable() => Some(Arc::clone(child)),
                Some(u) => narrow_field(child, u),
                None if has_not_null_field(child) => {
                    narrow_field(child, &Use::Fields(BTreeMap::new()))
                }
                None => None,
            };
            changed |= narrowed.as_ref().is_none_or(|n| !Arc::ptr_eq(n, child));
            narrowed
        })
        .collect();
    if !changed {
        return Some(Arc::clone(field));
    }
    // A field read only as a ROW of nothing still says whether the ROW is NULL: keep one.
    let kept = if kept.is_empty() {
        vec![Arc::clone(&children[0])]
    } else {
        kept
    };
    Some(Arc::new(
        Field::new(
            field.name(),
            DataType::Struct(Fields::from(kept)),
            field.is_nullable(),
        )
        .with_metadata(field.metadata().clone()),
    ))
}

/// Whether `field` is a `ROW` with a `NOT NULL` field at some depth (a value lacking it
/// is a data error, so it is read even when nothing else of the `ROW` is).
fn has_not_null_field(field: &Field) -> bool {
    match field.data_type() {
        DataType::Struct(children) => children
            .iter()
            .any(|c| !c.is_nullable() || has_not_null_field(c)),
        _ => false,
    }
}

/// Leaves out `node`'s columns where `keep` is false: its schema, and its time attribute's
/// index (none if it went).
fn keep_columns(node: &mut PlanNode, keep: &[bool]) {
    node.rowtime = node
        .rowtime
        .filter(|r| keep[*r])
        .map(|r| keep[..r].iter().filter(|k| **k).count());
    node.schema = without_columns(&node.schema, keep);
}

/// `schema` with the columns where `keep` is false left out.
fn without_columns(schema: &DFSchemaRef, keep: &[bool]) -> DFSchemaRef {
    let fields = (0..schema.fields().len())
        .filter(|i| keep[*i])
        .map(|i| {
            let (q, f) = schema.qualified_field(i);
            (q.cloned(), Arc::clone(f))
        })
        .collect();
    match DFSchema::new_with_metadata(fields, schema.metadata().clone()) {
        Ok(s) => Arc::new(s),
        Err(_) => Arc::clone(schema),
    }
}
