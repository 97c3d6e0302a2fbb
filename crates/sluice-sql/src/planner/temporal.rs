//! Temporal joins: `probe JOIN versioned FOR SYSTEM_TIME AS OF probe.t ON ...` (Flink SQL
//! "Joins > Temporal Joins").
//!
//! The parser lifts `table FOR SYSTEM_TIME AS OF expr` out of the query
//! ([`crate::parser::TemporalRef`]); a placeholder table stands for it, resolved to the
//! table's schema. A join whose right input is such a placeholder (under aliases and
//! projections) is planned here as an event-time temporal join
//! ([`sluice_common::plan::TemporalJoinTimes`]):
//! - `expr` must be the left input's event-time attribute, or a processing-time one: then
//!   it is a lookup join ([`sluice_common::plan::LookupJoinSpec`]) against a `filesystem`
//!   table; the left input must be append-only; the join `INNER` or `LEFT`.
//! - The right input must be a versioned table: a table with a `PRIMARY KEY` and a
//!   `WATERMARK`, under projections that keep the key and the time, or a deduplicating
//!   view keeping the last row per key by event time (`ROW_NUMBER() OVER (PARTITION BY k
//!   ORDER BY t DESC) = 1` over an append-only input). For such a view the rows under the
//!   deduplication are the versions: the view as of time `t` holds, per key, the row
//!   with the largest time at or before `t`, which is the version valid at `t` (Flink
//!   plans the deduplication and joins its changelog; over rows in time order the two
//!   agree, and rows out of order get the SQL answer here). Of two rows of a key with the
//!   same time the join takes the later arrival (as Flink's temporal join), where the
//!   view itself keeps the earlier one (Sluice's deduplication ties).
//! - The join's equalities must cover the primary key (Flink: "Temporal table's primary
//!   key must be included in the equivalence condition"); they are the keys, every other
//!   condition is checked on the version valid at the probe's time (the SQL meaning of
//!   `AS OF`: the table as of that time, then the join condition). So conditions are not
//!   pushed below the join while a query has a temporal reference.

use std::sync::Arc;

use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion_common::{Column, ScalarValue};
use datafusion_expr::logical_plan::{Join, LogicalPlan};
use datafusion_expr::utils::conjunction;
use datafusion_expr::{Expr, SortExpr};
use sluice_common::plan::{JoinKind, LookupJoinSpec, OperatorSpec, PlanNode, TemporalJoinTimes};
use sluice_common::{not_supported, plan_err, Result};

use super::{joins, reschema, Planned, Planner};
use crate::parser::TemporalRef;

/// The temporal reference a join's right input is, if it is one: a placeholder scan under
/// aliases and projections.
pub(super) fn temporal_ref<'a>(
    planner: &'a Planner,
    plan: &LogicalPlan,
) -> Option<&'a TemporalRef> {
    match plan {
        LogicalPlan::TableScan(scan) => planner.catalog.temporal.get(scan.table_name.table()),
        LogicalPlan::SubqueryAlias(a) => temporal_ref(planner, &a.input),
        LogicalPlan::Projection(p) => temporal_ref(planner, &p.input),
        _ => None,
    }
}

/// Refuses a `FOR SYSTEM_TIME AS OF` reference anywhere but as the right input of a join.
///
/// # Errors
/// Such a reference, with its location.
pub(super) fn check_placement(planner: &Planner, plan: &LogicalPlan) -> Result<()> {
    let mut allowed = Vec::new();
    let mut scans = Vec::new();
    let _ = plan.apply(|p| {
        match p {
            LogicalPlan::Join(j) => {
                if let Some(r) = temporal_ref(planner, &j.right) {
                    allowed.push(r.placeholder.clone());
                }
            }
            LogicalPlan::TableScan(scan) => {
                if let Some(r) = planner.catalog.temporal.get(scan.table_name.table()) {
                    scans.push(r.clone());
                }
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    });
    for r in scans {
        if !allowed.contains(&r.placeholder) {
            return not_supported!(
                "'{} FOR SYSTEM_TIME AS OF' at Line: {}, Column: {} other than as the right \
                 input of a JOIN (a temporal join: FROM probe JOIN {} FOR SYSTEM_TIME AS OF \
                 probe.time_attribute ON ...)",
                r.table,
                r.location.line,
                r.location.column,
                r.table
            );
        }
    }
    Ok(())
}

impl Planner {
    /// A temporal join (see the module docs).
    pub(super) fn lower_temporal_join(&self, j: &Join, tref: &TemporalRef) -> Result<Planned> {
        let at = format!(
            " (FOR SYSTEM_TIME AS OF at Line: {}, Column: {})",
            tref.location.line, tref.location.column
        );
        let kind = match j.join_type {
            datafusion_common::JoinType::Inner => JoinKind::Inner,
            datafusion_common::JoinType::Left => JoinKind::Left,
            other => {
                return not_supported!(
                    "a temporal join as a {other} join{at}: use JOIN or LEFT JOIN"
                )
            }
        };
        let left = reschema(self.lower(&j.left)?, Arc::clone(j.left.schema()));
        let as_of = self.plan_expr(&tref.as_of, j.left.schema())?;
        let left_time = match &as_of {
            Expr::Column(c) => j.left.schema().index_of_column(c).ok(),
            _ => None,
        };
        let Some(left_time) = left_time else {
            return plan_err!(
                "FOR SYSTEM_TIME AS OF {as_of}{at}: name a time attribute of the join's left \
                 input"
            );
        };
        if sluice_common::types::is_proctime(j.left.schema().field(left_time)) {
            return self.lower_lookup_join(j, tref, kind, left, &at);
        }
        if left.node.is_updating() {
            return not_supported!(
                "a temporal join whose left input is updating (a changelog){at}: the left \
                 input must be append-only"
            );
        }
        if j.null_equality == datafusion_common::NullEquality::NullEqualsNull {
            return not_supported!(
                "IS NOT DISTINCT FROM in a temporal join{at}: a versioned table's primary key \
                 is never NULL; compare with ="
            );
        }
        if left.node.rowtime != Some(left_time) {
            return plan_err!(
                "FOR SYSTEM_TIME AS OF {as_of}{at}: {as_of} is not the event-time attribute \
                 of the join's left input (a column with a WATERMARK, kept as a time \
                 attribute)"
            );
        }
        let right = reschema(self.lower(&j.right)?, Arc::clone(j.right.schema()));
        let (right_node, primary_key) = self.versioned(right.node, &tref.table, &at)?;
        let Some(right_time) = right_node.rowtime else {
            return plan_err!(
                "'{}' is not a versioned table{at}: an event-time temporal join needs an \
                 event-time attribute on it (WATERMARK FOR ...)",
                tref.table
            );
        };
        // A TIMESTAMP and a TIMESTAMP_LTZ attribute count time differently (wall clock and
        // instant): Flink refuses the pair.
        let (lt, rt) = (
            j.left.schema().field(left_time).data_type(),
            right_node.schema.field(right_time).data_type(),
        );
        let ltz = |t: &datafusion_common::arrow::datatypes::DataType| {
            matches!(
                t,
                datafusion_common::arrow::datatypes::DataType::Timestamp(_, Some(_))
            )
        };
        if ltz(lt) != ltz(rt) {
            return plan_err!(
                "an event-time temporal join needs the same time attribute type on both \
                 sides{at}: the left input's is {}, the versioned table's {} (CAST one in a \
                 view, with its WATERMARK)",
                sluice_common::types::flink_type_name(lt),
                sluice_common::types::flink_type_name(rt)
            );
        }
        let mut spec = joins::join_spec(j, None, false)?;
        // The primary key's equalities are the keys; any other equality is a condition
        // on the version.
        let mut left_keys = vec![None; primary_key.len()];
        let mut right_keys = vec![None; primary_key.len()];
        let mut residual: Vec<Expr> = spec.residual.take().into_iter().collect();
        for (l, r) in spec.left_keys.drain(..).zip(spec.right_keys.drain(..)) {
            let column = match uncast(&r) {
                Expr::Column(c) => j.right.schema().index_of_column(c).ok(),
                _ => None,
            };
            match column.and_then(|c| primary_key.iter().position(|&k| k == c)) {
                Some(k) if right_keys[k].is_none() => {
                    left_keys[k] = Some(l);
                    right_keys[k] = Some(r);
                }
                _ => residual.push(l.eq(r)),
            }
        }
        if right_keys.iter().any(|k| k.is_none()) {
            let names: Vec<&String> = primary_key
                .iter()
                .map(|&k| j.right.schema().field(k).name())
                .collect();
            return plan_err!(
                "the primary key of the versioned table '{}' ({}) must be in the join's \
                 equality conditions{at} (ON probe.x = {}.{} ...)",
                tref.table,
                names
                    .iter()
                    .map(|n| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                j.right
                    .schema()
                    .qualified_field(primary_key[0])
                    .0
                    .map(|q| q.to_string())
                    .unwrap_or_else(|| tref.table.clone()),
                names[0]
            );
        }
        spec.kind = kind;
        spec.left_keys = left_keys.into_iter().flatten().collect();
        spec.right_keys = right_keys.into_iter().flatten().collect();
        spec.null_equal = false;
        spec.residual = conjunction(residual);
        spec.interval = None;
        spec.temporal = Some(TemporalJoinTimes {
            left_time,
            right_time,
        });
        Ok(Planned {
            node: PlanNode {
                spec: OperatorSpec::Join(Box::new(spec)),
                schema: Arc::clone(&j.schema),
                // The probe's time attribute: each row leaves when the watermark passes it.
                rowtime: Some(left_time),
                inputs: vec![left.node, right_node],
            },
            window: None,
        })
    }

    /// A lookup join (`FOR SYSTEM_TIME AS OF` a processing-time attribute): the right
    /// input must be a `filesystem` table itself (Flink: a table whose connector can be
    /// looked up), joined by at least one equality.
    fn lower_lookup_join(
        &self,
        j: &Join,
        tref: &TemporalRef,
        kind: JoinKind,
        left: Planned,
        at: &str,
    ) -> Result<Planned> {
        if left.node.is_updating() {
            return not_supported!(
                "a lookup join whose left input is updating (a changelog){at}: the left input \
                 must be append-only"
            );
        }
        let right = reschema(self.lower(&j.right)?, Arc::clone(j.right.schema()));
        if matches!(right.node.spec, OperatorSpec::ChangelogNormalize { .. }) {
            return not_supported!(
                "a lookup join against '{}'{at}, a change-data-capture table: look up a 'csv' \
                 or 'json' table, or join it FOR SYSTEM_TIME AS OF an event-time attribute",
                tref.table
            );
        }
        let OperatorSpec::Source(source) = right.node.spec else {
            return not_supported!(
                "a processing-time temporal join against '{}'{at}: only a table can be looked \
                 up (a 'filesystem' table), not a view",
                tref.table
            );
        };
        let connector = source.options.get("connector").cloned().unwrap_or_default();
        if connector != "filesystem" {
            return not_supported!(
                "a processing-time temporal join against '{}'{at}: its connector '{connector}' \
                 cannot be looked up (only 'filesystem' tables can; Flink: a lookup source)",
                tref.table
            );
        }
        if source.is_changelog() {
            return not_supported!(
                "a lookup join against '{}'{at}, a change-data-capture table: look up a 'csv' \
                 or 'json' table, or join it FOR SYSTEM_TIME AS OF an event-time attribute",
                tref.table
            );
        }
        let spec = joins::join_spec(j, None, false)?;
        if spec.null_equal {
            return not_supported!(
                "IS NOT DISTINCT FROM in a lookup join{at}: NULL keys match nothing there; \
                 compare with ="
            );
        }
        if spec.left_keys.is_empty() {
            return plan_err!(
                "a lookup join against '{}'{at} needs an equality between the left input and \
                 the table (ON probe.k = {}.k)",
                tref.table,
                tref.table
            );
        }
        Ok(Planned {
            node: PlanNode {
                spec: OperatorSpec::LookupJoin(Box::new(LookupJoinSpec {
                    kind,
                    left_keys: spec.left_keys,
                    right_keys: spec.right_keys,
                    residual: spec.residual,
                    pair_schema: spec.pair_schema,
                    table: source,
                    table_schema: Arc::clone(&right.node.schema),
                })),
                schema: Arc::clone(&j.schema),
                // The probe's columns come first, its time attributes with them.
                rowtime: left.node.rowtime,
                inputs: vec![left.node],
            },
            window: None,
        })
    }

    /// A versioned input and its primary key columns (see the module docs): the node
    /// itself, or the input of a deduplication keeping the last row per key.
    fn versioned(&self, node: PlanNode, table: &str, at: &str) -> Result<(PlanNode, Vec<usize>)> {
        let not_versioned = |why: &str| {
            plan_err!(
                "'{table}' is not a versioned table{at}: {why} (a versioned table has a \
                 PRIMARY KEY (...) NOT ENFORCED and a WATERMARK, or is a view keeping the \
                 last row per key: ROW_NUMBER() OVER (PARTITION BY key ORDER BY time DESC) = 1)"
            )
        };
        match &node.spec {
            OperatorSpec::Source(source) => {
                let def = self.catalog.tables.get(&source.table);
                let key = def.map(|d| d.primary_key.clone()).unwrap_or_default();
                if key.is_empty() {
                    return not_versioned("it has no PRIMARY KEY");
                }
                let schema = node.schema.as_arrow();
                let key = key
                    .iter()
                    .map(|k| schema.index_of(k))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                Ok((node, key))
            }
            OperatorSpec::Project { exprs } => {
                let exprs = exprs.clone();
                let mut node = node;
                let input = node.inputs.remove(0);
                let (input, key) = self.versioned(input, table, at)?;
                let mut out = Vec::new();
                for k in key {
                    let column = Column::from(input.schema.qualified_field(k));
                    let found = exprs
                        .iter()
                        .position(|e| matches!(super::unalias(e), Expr::Column(c) if *c == column));
                    match found {
                        Some(p) => out.push(p),
                        None => return not_versioned("its primary key is not selected"),
                    }
                }
                // A deduplication under it kept no time attribute; its input's is the
                // versions' time.
                if node.rowtime.is_none() {
                    node.rowtime = input.rowtime.and_then(|t| {
                        let column = Column::from(input.schema.qualified_field(t));
                        exprs.iter().position(
                            |e| matches!(super::unalias(e), Expr::Column(c) if *c == column),
                        )
                    });
                }
                node.inputs.push(input);
                Ok((node, out))
            }
            OperatorSpec::Rank(rank) => {
                let input = node.input();
                let keeps_last = rank.upper == 1
                    && rank.lower == 1
                    && rank.window.is_none()
                    && !rank.by_arrival
                    && matches!(rank.order_by.as_slice(), [SortExpr { expr: Expr::Column(c), asc: false, .. }]
                        if input.rowtime.is_some_and(|t| input.schema.index_of_column(c).ok() == Some(t)));
                if !keeps_last || input.is_updating() {
                    return not_versioned(
                        "a Top-N or deduplication other than the last row per key by event \
                         time over an append-only input",
                    );
                }
                let mut key = Vec::new();
                for p in &rank.partition_by {
                    match p {
                        Expr::Column(c) => key.push(input.schema.index_of_column(c)?),
                        _ => return not_versioned("its PARTITION BY is not columns"),
                    }
                }
                if key.is_empty() {
                    return not_versioned("the deduplication has no PARTITION BY");
                }
                let rank_column = rank.rank_column;
                let mut node = node;
                let input = node.inputs.remove(0);
                if !rank_column {
                    return Ok((reschema_node(input, node.schema), key));
                }
                // Every version is the first row of its key at its time: rank 1.
                let mut exprs: Vec<Expr> = (0..input.schema.fields().len())
                    .map(|i| Expr::Column(Column::from(input.schema.qualified_field(i))))
                    .collect();
                let n = node.schema.fields().len();
                exprs.push(
                    Expr::Literal(ScalarValue::Int64(Some(1)), None).alias_qualified(
                        node.schema.qualified_field(n - 1).0.cloned(),
                        node.schema.field(n - 1).name(),
                    ),
                );
                let rowtime = input.rowtime;
                Ok((
                    PlanNode {
                        spec: OperatorSpec::Project { exprs },
                        schema: node.schema,
                        rowtime,
                        inputs: vec![input],
                    },
                    key,
                ))
            }
            // Repeated change events set the same version again: the versions are the
            // changelog's, not the normalized one's (whose `-U` would be a `-D`).
            OperatorSpec::ChangelogNormalize { .. } => {
                let mut node = node;
                let input = reschema_node(node.inputs.remove(0), node.schema);
                self.versioned(input, table, at)
            }
            OperatorSpec::Filter { .. } => {
                not_versioned("a filter over it would hide versions (filter after the join)")
            }
            _ => not_versioned("it is not a table with a primary key or a deduplicating view"),
        }
    }
}

/// `node` under another schema of the same columns (the names a view gives them).
fn reschema_node(mut node: PlanNode, schema: datafusion_common::DFSchemaRef) -> PlanNode {
    node.schema = schema;
    node
}

/// The expression under a cast.
fn uncast(e: &Expr) -> &Expr {
    match e {
        Expr::Cast(c) => &c.expr,
        Expr::TryCast(c) => &c.expr,
        other => other,
    }
}
