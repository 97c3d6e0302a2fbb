//! Column pruning, after lowering: which columns, and which fields of `ROW` columns, the
//! consumers of each node read (Calcite's project pruning; Flink's projection pushdown
//! into sources, `SupportsProjectionPushDown` with nested fields).
//!
//! Needs flow from the root down. The root's columns are all read. A projection reads what
//! its read expressions name and drops the expressions nobody reads; a filter passes its
//! needs on, plus its predicate's, and drops what its input dropped; a Top-N whose rank
//! number nobody reads drops it (Flink's Top-N without rank number: only rows entering
//! and leaving the range are emitted, not the rank changes of the rows in it); a source
//! keeps its columns but records the physical columns and `ROW` fields it must decode
//! (`SourceSpec::read_schema`). Below any other operator every column is read whole.
//!
//! An expression reads a `ROW` column's field `f` only when it reaches the column through
//! `get_field(column, 'f')` (`r.f`, `r['f']`); any other use reads the whole value.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion_common::arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion_common::{DFSchema, DFSchemaRef};
use datafusion_expr::Expr;
use sluice_common::plan::{OperatorSpec, PlanNode, SourceSpec};

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
            let keep = prune_columns(&mut node.inputs[0], &needs)?;
            keep_columns(node, &keep);
            Some(keep)
        }
        OperatorSpec::Rank(spec) => {
            prune_columns(&mut node.inputs[0], &all_needed(width));
            if !(spec.rank_column && matches!(needed.last(), Some(None))) {
                return None;
            }
            spec.rank_column = false;
            let n = node.schema.fields().len();
            let keep: Vec<bool> = (0..n).map(|i| i + 1 < n).collect();
            keep_columns(node, &keep);
            Some(keep)
        }
        OperatorSpec::Source(spec) => {
            spec.read_schema = read_schema(spec, &node.schema, needed);
            None
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

/// The physical columns and fields a scan reads, when fewer than all and the connector
/// reads by name (a `filesystem` table in the `json` format, not partitioned). The
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
    let by_name = option("connector") == Some("filesystem")
        && option("format") == Some("json")
        && spec.partition_keys.is_empty()
        && !option("json.ignore-parse-errors").is_some_and(|v| v.eq_ignore_ascii_case("true"))
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
