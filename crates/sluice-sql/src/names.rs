//! Flink's (Calcite's) names for the columns of a query: a select item without `AS` that is
//! not a column reference is named `EXPR$<n>`, `n` being its position in the select list
//! with every `*` expanded (Calcite's `SqlValidatorUtil.deriveAlias`); a column reference
//! keeps the column's name, and a field access `r.f` (`person.id` on a `ROW` column) is
//! named after its last field (`id`), as Calcite names any identifier. DataFusion names
//! such items after their text (`count(*)`, `t.a + Int64(1)`), and refuses two items with
//! one text (`SELECT t.*, CAST(price AS DECIMAL(10, 2)) FROM t`: the CAST is named `price`
//! too). A name an earlier output column already has gets Calcite's first free suffix
//! (`dateTime`, `dateTime0`: [`final_names`]).
//!
//! [`name_select_items`] runs on the parsed query, before DataFusion's planner: an item
//! before any `*` gets its final name; one after a `*` (whose width is not known yet) a
//! placeholder, `EXPR$__<k>`, which [`final_names`] turns into `EXPR$<position>` in the
//! query's output once the `*`s are expanded.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion_common::arrow::datatypes::Field;
use datafusion_common::{Column, DFSchema, DFSchemaRef, Result};
use datafusion_expr::{Expr, LogicalPlan, LogicalPlanBuilder};
use datafusion_sql::sqlparser::ast::{self, Ident, SelectItem, SetExpr, VisitMut, VisitorMut};

/// Prefix of a placeholder name (an unnamed item after a `*`).
const PLACEHOLDER: &str = "EXPR$__";

struct Namer;

/// Whether Calcite names the item after itself: a column reference, possibly parenthesized.
fn is_column(e: &ast::Expr) -> bool {
    match e {
        ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_) => true,
        ast::Expr::Nested(inner) => is_column(inner),
        _ => false,
    }
}

/// The names by which the `FROM` clause's relations are referenced (their aliases, or
/// their tables' last name parts), lower-cased.
fn relation_names(from: &[ast::TableWithJoins]) -> Vec<String> {
    fn name_of(factor: &ast::TableFactor) -> Option<String> {
        match factor {
            ast::TableFactor::Table { alias: Some(a), .. }
            | ast::TableFactor::Derived { alias: Some(a), .. }
            | ast::TableFactor::TableFunction { alias: Some(a), .. }
            | ast::TableFactor::UNNEST { alias: Some(a), .. }
            | ast::TableFactor::Function { alias: Some(a), .. } => Some(a.name.value.clone()),
            ast::TableFactor::Table { name, .. } => name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(|i| i.value.clone()),
            _ => None,
        }
    }
    let mut names = Vec::new();
    for t in from {
        names.extend(name_of(&t.relation));
        for j in &t.joins {
            names.extend(name_of(&j.relation));
        }
    }
    names.iter().map(|n| n.to_lowercase()).collect()
}

/// The field a select item `a.b[.c]` reads when it is a field access into a `ROW` column
/// rather than a column of a relation named `a`: its last part.
fn field_access_name(e: &ast::Expr, relations: &[String]) -> Option<String> {
    let ast::Expr::CompoundIdentifier(parts) = e else {
        return None;
    };
    let first_is_relation = relations.contains(&parts.first()?.value.to_lowercase());
    (parts.len() >= 3 || !first_is_relation).then(|| parts.last().map(|p| p.value.clone()))?
}

fn name_items(body: &mut SetExpr) {
    match body {
        SetExpr::Select(select) => {
            let relations = relation_names(&select.from);
            let mut after_wildcard = false;
            // The names of the items so far (a field access's alias must not repeat one:
            // DataFusion refuses two equal aliases; Calcite adds its suffix).
            let mut used: Vec<String> = Vec::new();
            for (k, item) in select.projection.iter_mut().enumerate() {
                if let SelectItem::UnnamedExpr(e) = item {
                    if let Some(field) = field_access_name(e, &relations) {
                        let name = if used.contains(&field) {
                            (0..)
                                .map(|j| format!("{field}{j}"))
                                .find(|c| !used.contains(c))
                                .expect("a free suffix")
                        } else {
                            field
                        };
                        used.push(name.clone());
                        *item = SelectItem::ExprWithAlias {
                            expr: e.clone(),
                            alias: Ident::with_quote('"', name),
                        };
                        continue;
                    }
                }
                match &*item {
                    SelectItem::ExprWithAlias { alias, .. } => used.push(alias.value.clone()),
                    SelectItem::UnnamedExpr(ast::Expr::Identifier(i)) => used.push(i.value.clone()),
                    SelectItem::UnnamedExpr(ast::Expr::CompoundIdentifier(parts)) => {
                        used.extend(parts.last().map(|p| p.value.clone()))
                    }
                    _ => {}
                }
                match item {
                    SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                        after_wildcard = true
                    }
                    SelectItem::UnnamedExpr(e) if !is_column(e) => {
                        let name = if after_wildcard {
                            format!("{PLACEHOLDER}{k}")
                        } else {
                            format!("EXPR${k}")
                        };
                        *item = SelectItem::ExprWithAlias {
                            expr: e.clone(),
                            alias: Ident::with_quote('"', name),
                        };
                    }
                    _ => {}
                }
            }
        }
        SetExpr::SetOperation { left, right, .. } => {
            name_items(left);
            name_items(right);
        }
        _ => {}
    }
}

impl VisitorMut for Namer {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<()> {
        name_items(&mut query.body);
        ControlFlow::Continue(())
    }
}

/// Names the unnamed select items of `query` and of every query nested in it.
pub(crate) fn name_select_items(query: &mut ast::Query) {
    let _ = query.visit(&mut Namer);
}

/// A query's output schema with each placeholder name made `EXPR$<position>`, and each
/// name an earlier column already has made unique by the first free suffix `0`, `1`, ...
/// (`SELECT B.dateTime, A.dateTime` gives `dateTime`, `dateTime0`: Calcite's
/// `SqlValidatorUtil.uniquify`, case-sensitive as Flink's names are).
///
/// # Errors
/// None in practice (the schema is rebuilt with the same qualifiers).
pub(crate) fn final_names(schema: &DFSchemaRef) -> Result<DFSchemaRef> {
    let mut used = std::collections::HashSet::new();
    let mut changed = false;
    let mut fields = Vec::with_capacity(schema.fields().len());
    for (i, (qualifier, f)) in schema.iter().enumerate() {
        let mut name = if f.name().starts_with(PLACEHOLDER) {
            format!("EXPR${i}")
        } else {
            f.name().clone()
        };
        if used.contains(&name) {
            name = (0..)
                .map(|j| format!("{name}{j}"))
                .find(|candidate| !used.contains(candidate))
                .expect("a free suffix");
        }
        used.insert(name.clone());
        let field = if &name == f.name() {
            Arc::clone(f)
        } else {
            changed = true;
            Arc::new(Field::clone(f).with_name(name))
        };
        fields.push((qualifier.cloned(), field));
    }
    if !changed {
        return Ok(Arc::clone(schema));
    }
    let metadata = schema.as_arrow().metadata().clone();
    Ok(Arc::new(DFSchema::new_with_metadata(fields, metadata)?))
}

/// A view's plan whose output has its final names (a projection renaming placeholders),
/// so that queries over the view see `EXPR$<position>` as Flink's do.
///
/// # Errors
/// DataFusion's, building the projection.
pub(crate) fn with_final_names(plan: LogicalPlan) -> Result<LogicalPlan> {
    let schema = Arc::clone(plan.schema());
    let renamed = final_names(&schema)?;
    if Arc::ptr_eq(&schema, &renamed) {
        return Ok(plan);
    }
    let exprs: Vec<Expr> = schema
        .iter()
        .zip(renamed.fields())
        .map(|((qualifier, f), new)| {
            Expr::Column(Column::new(qualifier.cloned(), f.name())).alias(new.name())
        })
        .collect();
    LogicalPlanBuilder::from(plan).project(exprs)?.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::datatypes::DataType;
    use datafusion_common::TableReference;

    /// Flink 2.3 names `SELECT o.id, p.id, o.buyer.city, p.buyer.city, p.id AS id1 FROM
    /// orders AS o JOIN orders AS p ...` id, id0, city, city0, id1.
    #[test]
    fn repeated_names_get_calcites_suffixes() {
        let field = |q: &str, n: &str| {
            (
                Some(TableReference::bare(q)),
                Arc::new(Field::new(n, DataType::Int32, true)),
            )
        };
        let schema = Arc::new(
            DFSchema::new_with_metadata(
                vec![
                    field("o", "id"),
                    field("p", "id"),
                    field("o", "city"),
                    field("p", "city"),
                    field("p", "id1"),
                    field("q", "id"),
                ],
                Default::default(),
            )
            .unwrap(),
        );
        let names: Vec<String> = final_names(&schema)
            .unwrap()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["id", "id0", "city", "city0", "id1", "id2"]);
    }
}
