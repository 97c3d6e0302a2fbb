//! An updating aggregate (without grouping sets, whose `Expand` computes the keys)
//! reads columns: its computed grouping keys, call arguments,
//! `FILTER (WHERE ...)` predicates and `WITHIN GROUP` orderings are evaluated by a
//! projection below it, each distinct expression once. Calcite plans every aggregate
//! this way (an aggregate's inputs are field references): Flink's plan for Nexmark q16
//! shows `Calc(select=[channel, DATE_FORMAT(dateTime, 'yyyy-MM-dd') AS $f1, ...])` under
//! `GroupAggregate(groupBy=[channel, $f1], ...)`.
//!
//! The projection is stateless, so it runs before the keyed exchange, on the source's
//! side; the keyed operator and its routing keys then read plain columns. The new
//! columns are named `$f<i>`, `i` their index in the projection's output (Flink's
//! naming); the input's columns pass through in place, so indices into the input (its
//! event-time attribute) stay valid, and column pruning drops those nobody reads.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion_common::arrow::datatypes::Field;
use datafusion_common::{Column, DFSchema, Result, TableReference};
use datafusion_expr::expr::AggregateFunction;
use datafusion_expr::{Expr, ExprSchemable};
use sluice_common::plan::{OperatorSpec, PlanNode};

use super::unalias;

/// An updating aggregate's keys and calls over `input`, rewritten to read columns of a
/// projection put on top of `input` when any of them computes something: returns the
/// new input, keys and calls (the same ones, and `input` itself, when all read columns
/// or literals already).
///
/// # Errors
/// An expression whose type cannot be derived over `input`'s schema (not expected once
/// the logical plan type-checked).
pub(super) fn project_inputs(
    input: PlanNode,
    keys: &[Expr],
    aggregates: &[Expr],
) -> Result<(PlanNode, Vec<Expr>, Vec<Expr>)> {
    let in_schema = Arc::clone(&input.schema);
    let width = in_schema.fields().len();
    let mut computed = Computed {
        width,
        names: in_schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect(),
        exprs: Vec::new(),
        index: HashMap::new(),
    };
    let keys: Vec<Expr> = keys.iter().map(|k| computed.column_for(k)).collect();
    let aggregates = aggregates
        .iter()
        .map(|a| computed.call_reading_columns(a))
        .collect::<Vec<_>>();
    if computed.exprs.is_empty() {
        return Ok((input, keys, aggregates));
    }
    let mut fields: Vec<(Option<TableReference>, Arc<Field>)> = in_schema
        .iter()
        .map(|(q, f)| (q.cloned(), Arc::clone(f)))
        .collect();
    let mut exprs: Vec<Expr> = (0..width)
        .map(|i| Expr::Column(Column::from(in_schema.qualified_field(i))))
        .collect();
    for (e, name) in std::mem::take(&mut computed.exprs) {
        let (_, field) = e.to_field(&in_schema)?;
        fields.push((None, Arc::new(field.as_ref().clone().with_name(&name))));
        exprs.push(e.alias(name));
    }
    let schema = DFSchema::new_with_metadata(fields, in_schema.metadata().clone())?;
    let project = PlanNode {
        spec: OperatorSpec::Project { exprs },
        schema: Arc::new(schema),
        rowtime: input.rowtime,
        inputs: vec![input],
    };
    Ok((project, keys, aggregates))
}

/// The expressions computed by the projection, each with its column's name.
struct Computed {
    /// The input's width: the first computed column's index.
    width: usize,
    /// The names already taken (the input's columns and the computed ones).
    names: Vec<String>,
    /// Each distinct computed expression (unaliased) and its column's name.
    exprs: Vec<(Expr, String)>,
    /// Where each expression is in `exprs`.
    index: HashMap<Expr, usize>,
}

impl Computed {
    /// `e` when it is a column, or reads none (a constant, such as a percentile's
    /// fraction or a separator, which some calls require as such); otherwise the column
    /// computing it.
    fn column_for(&mut self, e: &Expr) -> Expr {
        let inner = unalias(e);
        if matches!(inner, Expr::Column(_)) || inner.column_refs().is_empty() {
            return e.clone();
        }
        // A volatile expression (RAND()) is computed once per call, never shared.
        let shared = if inner.is_volatile() {
            None
        } else {
            self.index.get(inner).copied()
        };
        let i = match shared {
            Some(i) => i,
            None => {
                let i = self.exprs.len();
                let mut name = format!("$f{}", self.width + i);
                while self.names.contains(&name) {
                    name.insert(0, '$');
                }
                self.names.push(name.clone());
                self.exprs.push((inner.clone(), name));
                self.index.insert(inner.clone(), i);
                i
            }
        };
        Expr::Column(Column::new_unqualified(self.exprs[i].1.clone()))
    }

    /// An aggregate call (possibly aliased) with its arguments, filter and ordering read
    /// from columns (and without its alias when any of them changed).
    fn call_reading_columns(&mut self, a: &Expr) -> Expr {
        match a {
            // The output's name is the aggregate's schema's; an alias naming the call
            // as written would only mislead once the call reads `$f` columns.
            Expr::Alias(alias) => {
                let inner = self.call_reading_columns(&alias.expr);
                if inner == *alias.expr {
                    a.clone()
                } else {
                    inner
                }
            }
            Expr::AggregateFunction(f) => {
                let mut params = f.params.clone();
                params.args = params.args.iter().map(|e| self.column_for(e)).collect();
                params.filter = params.filter.map(|e| Box::new(self.column_for(&e)));
                for sort in &mut params.order_by {
                    sort.expr = self.column_for(&sort.expr);
                }
                Expr::AggregateFunction(AggregateFunction {
                    func: Arc::clone(&f.func),
                    params,
                })
            }
            other => other.clone(),
        }
    }
}
