//! `ROW` field access: NULL for a NULL row, and `CASE` over narrow batches.
//!
//! DataFusion's `get_field` on a `ROW` column returns the field's child array as it is,
//! without the row's own NULLs; a child may hold a value under a NULL row (a `CASE WHEN c
//! THEN r END` nulls the row and keeps its children), so `(NULL row).f` gave that value.
//! SQL (and Flink) give NULL: [`RowField`] replaces every such access (`row_fields`) and
//! adds the row's NULLs to the field's.
//!
//! DataFusion evaluates `CASE WHEN c1 THEN a WHEN c2 THEN b ELSE d END` branch by branch,
//! each over the rows still undecided, copied (`filter_record_batch`) with every column the
//! `CASE` reads. A branch that reads a field of a `ROW` column (`bid.dateTime`) makes it
//! read the whole `ROW` column, so each branch copies every field of it, strings included:
//! Nexmark's computed `dateTime` (a `CASE` over `person.dateTime`, `auction.dateTime` and
//! `bid.dateTime`) copied the events' `ROW`s twice per batch. [`hoist_case_fields`] wraps
//! such a `CASE` in [`HoistedFields`]: the fields it reads (field accesses over a column:
//! arrays already in the batch, taken without copying) and the columns it reads otherwise
//! become the columns of a narrow batch, and the `CASE`, rewritten to read those, runs
//! over it. Same rows, same values: only what is copied changes.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion_common::arrow::array::{Array, AsArray, BooleanArray};
use datafusion_common::arrow::compute::nullif;
use datafusion_common::arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion_common::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion_common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion_expr::ColumnarValue;
use datafusion_physical_expr::expressions::{CaseExpr, Column, LambdaVariable, Literal};
use datafusion_physical_expr::{PhysicalExpr, ScalarFunctionExpr};

/// Display, equality and hash of a rewritten expression: those of the `original` DataFusion
/// expression it stands for (the rewrite changes how it runs, not what it is).
macro_rules! shown_and_compared_as_original {
    ($t:ty) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.original, f)
            }
        }

        impl PartialEq for $t {
            fn eq(&self, other: &Self) -> bool {
                self.original.as_ref() == other.original.as_ref()
            }
        }

        impl Eq for $t {}

        impl Hash for $t {
            fn hash<H: Hasher>(&self, state: &mut H) {
                self.original.as_ref().hash(state);
            }
        }
    };
}

/// Wraps every `CASE` in `expr` that reads a [`RowField`] of a column in a
/// [`HoistedFields`] (see the module docs); other expressions are returned as they are.
///
/// # Errors
/// None in practice (the rewrite's closure does not fail).
pub(super) fn hoist_case_fields(
    expr: Arc<dyn PhysicalExpr>,
) -> datafusion_common::Result<Arc<dyn PhysicalExpr>> {
    Ok(expr
        .transform_down(|e| {
            if e.downcast_ref::<CaseExpr>().is_none() || !reads_a_field(&e) || has_lambda(&e) {
                return Ok(Transformed::no(e));
            }
            let hoisted = HoistedFields::new(e)?;
            Ok(Transformed::new(
                Arc::new(hoisted) as Arc<dyn PhysicalExpr>,
                true,
                TreeNodeRecursion::Jump,
            ))
        })?
        .data)
}

/// Whether `e` is a [`RowField`] of a column or of another such access.
fn is_field_access(e: &Arc<dyn PhysicalExpr>) -> bool {
    e.downcast_ref::<RowField>()
        .is_some_and(|f| f.row.downcast_ref::<Column>().is_some() || is_field_access(&f.row))
}

/// Whether `e` reads a lambda's variable (whose slots the narrow batch does not keep).
fn has_lambda(e: &Arc<dyn PhysicalExpr>) -> bool {
    e.exists(|n| Ok(n.downcast_ref::<LambdaVariable>().is_some()))
        .expect("the closure does not fail")
}

fn reads_a_field(e: &Arc<dyn PhysicalExpr>) -> bool {
    let mut found = false;
    e.apply(|n| {
        found = is_field_access(n);
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })
    .expect("the closure does not fail");
    found
}

/// An expression evaluated over a narrow batch of `inputs` (see the module docs).
#[derive(Debug)]
pub struct HoistedFields {
    /// The columns of the narrow batch: field accesses and columns of the input batch.
    inputs: Vec<Arc<dyn PhysicalExpr>>,
    /// The expression, reading the narrow batch.
    inner: Arc<dyn PhysicalExpr>,
    /// The expression as it was, for display.
    original: Arc<dyn PhysicalExpr>,
}

impl HoistedFields {
    fn new(original: Arc<dyn PhysicalExpr>) -> datafusion_common::Result<Self> {
        let mut inputs: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let inner = Arc::clone(&original)
            .transform_down(|e| {
                if !is_field_access(&e) && e.downcast_ref::<Column>().is_none() {
                    return Ok(Transformed::no(e));
                }
                let i = match inputs.iter().position(|x| x == &e) {
                    Some(i) => i,
                    None => {
                        inputs.push(Arc::clone(&e));
                        inputs.len() - 1
                    }
                };
                Ok(Transformed::new(
                    Arc::new(Column::new(&format!("#{i}"), i)) as Arc<dyn PhysicalExpr>,
                    true,
                    TreeNodeRecursion::Jump,
                ))
            })?
            .data;
        Ok(HoistedFields {
            inputs,
            inner,
            original,
        })
    }
}

shown_and_compared_as_original!(HoistedFields);

impl PhysicalExpr for HoistedFields {
    fn return_field(&self, input_schema: &Schema) -> datafusion_common::Result<FieldRef> {
        self.original.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> datafusion_common::Result<ColumnarValue> {
        let rows = batch.num_rows();
        let columns = self
            .inputs
            .iter()
            .map(|e| e.evaluate(batch)?.into_array(rows))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        // Column `i` is `inputs[i]`, named `#i`, typed as its array is (a batch's types may
        // differ from the plan's in names or nullability of nested fields).
        let fields: Vec<Field> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| Field::new(format!("#{i}"), c.data_type().clone(), true))
            .collect();
        let narrow = RecordBatch::try_new_with_options(
            Arc::new(Schema::new(fields)),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )?;
        self.inner.evaluate(&narrow)
    }

    /// The original expression's children: it is what is evaluated, over fewer copies.
    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        self.original.children()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> datafusion_common::Result<Arc<dyn PhysicalExpr>> {
        // Rebuilt from the original with its new children (the schema is not known here,
        // so the result is the plain expression).
        Arc::clone(&self.original).with_new_children(children)
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.original.fmt_sql(f)
    }
}

/// Replaces every `get_field(row, 'f', ...)` of a `ROW` in `expr` with a [`RowField`];
/// `MAP` lookups (also `get_field`) stay as they are.
///
/// # Errors
/// A type `input_schema` cannot give (as lowering the expression would have failed).
pub(super) fn row_fields(
    expr: Arc<dyn PhysicalExpr>,
    input_schema: &Schema,
) -> datafusion_common::Result<Arc<dyn PhysicalExpr>> {
    Ok(expr
        .transform_up(|e| {
            let Some(f) = e.downcast_ref::<ScalarFunctionExpr>() else {
                return Ok(Transformed::no(e));
            };
            let args = f.args();
            if f.name() != "get_field" || args.len() < 2 {
                return Ok(Transformed::no(e));
            }
            let names: Option<Vec<String>> = args[1..]
                .iter()
                .map(|a| {
                    let v = a.downcast_ref::<Literal>()?.value();
                    v.try_as_str().flatten().map(str::to_string)
                })
                .collect();
            // Every step of the path a ROW (a MAP on the way is a lookup).
            let Some(names) = names.filter(|names| {
                let mut t = args[0].data_type(input_schema).ok();
                names.iter().all(|n| match t.take() {
                    Some(DataType::Struct(fields)) => {
                        t = fields.find(n).map(|(_, f)| f.data_type().clone());
                        true
                    }
                    _ => false,
                })
            }) else {
                return Ok(Transformed::no(e));
            };
            let row = Arc::clone(&args[0]);
            Ok(Transformed::yes(Arc::new(RowField {
                row,
                names,
                original: e,
            }) as Arc<dyn PhysicalExpr>))
        })?
        .data)
}

/// A field of a `ROW` (`row.n1.n2...`), NULL where the row (or a `ROW` on the way) is
/// NULL: SQL's field access (Flink docs, "Value Access Functions": `tableName.compositeType.field`).
#[derive(Debug)]
pub struct RowField {
    /// The `ROW` value.
    row: Arc<dyn PhysicalExpr>,
    /// The field's name, then a field of that, and so on.
    names: Vec<String>,
    /// DataFusion's `get_field` it replaces (display, types, scalar rows).
    original: Arc<dyn PhysicalExpr>,
}

shown_and_compared_as_original!(RowField);

impl PhysicalExpr for RowField {
    fn return_field(&self, input_schema: &Schema) -> datafusion_common::Result<FieldRef> {
        self.original.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> datafusion_common::Result<ColumnarValue> {
        let ColumnarValue::Array(mut value) = self.row.evaluate(batch)? else {
            // A constant ROW: DataFusion's scalar path (a NULL scalar row has no fields).
            return self.original.evaluate(batch);
        };
        for name in &self.names {
            let row = value.as_struct_opt().ok_or_else(|| {
                datafusion_common::DataFusionError::Execution(format!(
                    "field access '{name}' of a {} value",
                    value.data_type()
                ))
            })?;
            let Some(child) = row.column_by_name(name) else {
                return datafusion_common::exec_err!("Field {name} not found in struct");
            };
            value = match row.nulls() {
                // Arrow's nullif: NULL where the row is (a sliced row's offset kept).
                Some(parent) if parent.null_count() > 0 => {
                    nullif(child.as_ref(), &BooleanArray::new(!parent.inner(), None))?
                }
                _ => Arc::clone(child),
            };
        }
        Ok(ColumnarValue::Array(value))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.row]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> datafusion_common::Result<Arc<dyn PhysicalExpr>> {
        let row = children.into_iter().next().ok_or_else(|| {
            datafusion_common::DataFusionError::Internal("a field access has one child".into())
        })?;
        let mut args: Vec<Arc<dyn PhysicalExpr>> =
            self.original.children().into_iter().cloned().collect();
        args[0] = Arc::clone(&row);
        Ok(Arc::new(RowField {
            row,
            names: self.names.clone(),
            original: Arc::clone(&self.original).with_new_children(args)?,
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.original.fmt_sql(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::array::{
        Array, ArrayRef, AsArray, Int32Array, StringArray, StructArray, TimestampMillisecondArray,
    };
    use datafusion_common::arrow::buffer::NullBuffer;
    use datafusion_common::arrow::datatypes::{Fields, TimeUnit};
    use datafusion_common::config::ConfigOptions;
    use datafusion_common::ScalarValue;
    use datafusion_expr::Operator;
    use datafusion_physical_expr::expressions::{binary, lit};

    fn field(of: Arc<dyn PhysicalExpr>, name: &str, schema: &Schema) -> Arc<dyn PhysicalExpr> {
        let args = vec![of, lit(ScalarValue::from(name))];
        Arc::new(
            ScalarFunctionExpr::try_new(
                datafusion_functions::core::get_field(),
                args,
                schema,
                Arc::new(ConfigOptions::default()),
            )
            .unwrap(),
        )
    }

    /// Nexmark's `dateTime`: `CASE WHEN kind = 0 THEN p.t WHEN kind = 1 THEN a.t ELSE b.t
    /// END`, each `ROW` with a string beside its time, NULL on the rows of other kinds.
    #[test]
    fn a_case_over_row_fields_reads_a_narrow_batch_and_gives_the_same_rows() {
        let row = |times: Vec<Option<i64>>, texts: Vec<Option<&str>>, valid: Vec<bool>| {
            let fields = Fields::from(vec![
                Field::new("t", DataType::Timestamp(TimeUnit::Millisecond, None), true),
                Field::new("s", DataType::Utf8, true),
            ]);
            let columns: Vec<ArrayRef> = vec![
                Arc::new(TimestampMillisecondArray::from(times)),
                Arc::new(StringArray::from(texts)),
            ];
            Arc::new(StructArray::new(
                fields,
                columns,
                Some(NullBuffer::from(valid)),
            )) as ArrayRef
        };
        // Rows: a person, an auction, a bid, a bid whose time is NULL, a row of kind 1
        // whose auction is NULL.
        let kind: ArrayRef = Arc::new(Int32Array::from(vec![0, 1, 2, 2, 1]));
        let p = row(
            vec![Some(10), None, None, None, None],
            vec![Some("pp"), None, None, None, None],
            vec![true, false, false, false, false],
        );
        let a = row(
            vec![None, Some(20), None, None, Some(99)],
            vec![None, Some("aa"), None, None, None],
            vec![false, true, false, false, false],
        );
        let b = row(
            vec![None, None, Some(30), None, None],
            vec![None, None, Some("bbbbbbbb"), Some("b"), None],
            vec![false, false, true, true, false],
        );
        let batch =
            RecordBatch::try_from_iter(vec![("kind", kind), ("p", p), ("a", a), ("b", b)]).unwrap();
        let schema = batch.schema();
        let col = |name: &str| -> Arc<dyn PhysicalExpr> {
            Arc::new(Column::new_with_schema(name, &schema).unwrap())
        };
        let is = |v: i32| binary(col("kind"), Operator::Eq, lit(v), &schema).unwrap();
        let case: Arc<dyn PhysicalExpr> = Arc::new(
            CaseExpr::try_new(
                None,
                vec![
                    (is(0), field(col("p"), "t", &schema)),
                    (is(1), field(col("a"), "t", &schema)),
                ],
                Some(field(col("b"), "t", &schema)),
            )
            .unwrap(),
        );
        let case = row_fields(case, &schema).unwrap();
        let hoisted = hoist_case_fields(Arc::clone(&case)).unwrap();
        let h = hoisted
            .downcast_ref::<HoistedFields>()
            .expect("the CASE is hoisted");
        // The narrow batch: kind and the three time fields, no string.
        let names: Vec<String> = h.inputs.iter().map(|e| e.to_string()).collect();
        assert_eq!(h.inputs.len(), 4, "{names:?}");
        assert!(h.inputs.iter().all(|e| !matches!(
            e.data_type(&schema).unwrap(),
            DataType::Utf8 | DataType::Struct(_)
        )));
        let got = hoisted.evaluate(&batch).unwrap().into_array(5).unwrap();
        let got =
            got.as_primitive::<datafusion_common::arrow::datatypes::TimestampMillisecondType>();
        // By hand: each row's own kind's time; the NULL auction's field is NULL (its
        // child holds 99 under a NULL row: DataFusion's get_field alone gives 99).
        let want = [Some(10), Some(20), Some(30), None, None];
        let got: Vec<Option<i64>> = (0..5)
            .map(|i| got.is_valid(i).then(|| got.value(i)))
            .collect();
        assert_eq!(got, want);
        assert_eq!(hoisted.to_string(), case.to_string());
        // A CASE reading no field, and a field read outside any CASE, stay as they are.
        let plain: Arc<dyn PhysicalExpr> =
            Arc::new(CaseExpr::try_new(None, vec![(is(0), col("kind"))], None).unwrap());
        let kept = hoist_case_fields(Arc::clone(&plain)).unwrap();
        assert!(kept.downcast_ref::<CaseExpr>().is_some());
        let bare = row_fields(field(col("b"), "s", &schema), &schema).unwrap();
        let kept = hoist_case_fields(bare).unwrap();
        assert!(kept.downcast_ref::<RowField>().is_some());
    }

    /// A field of a NULL row is NULL whatever the row's child holds, through a `ROW` of
    /// `ROW`s too (the kind of bug: `CASE WHEN c THEN r END` nulls `r`, not its fields).
    #[test]
    fn a_field_of_a_null_row_is_null() {
        // Rows 0..20 repeat (both rows there, the inner row NULL, the outer row NULL);
        // the batch is a slice from row 9 (a source cuts batches at watermarks), so the
        // NULLs start within a byte of the validity bitmap.
        let pattern = |i: usize| i % 3;
        let inner_fields = Fields::from(vec![Field::new("x", DataType::Int32, true)]);
        let inner = StructArray::new(
            inner_fields.clone(),
            vec![Arc::new(Int32Array::from_iter(
                (0..20).map(|i| (i != 4).then_some(i as i32)),
            )) as ArrayRef],
            Some(NullBuffer::from_iter((0..20).map(|i| pattern(i) != 1))),
        );
        let outer = StructArray::new(
            Fields::from(vec![Field::new("in", DataType::Struct(inner_fields), true)]),
            vec![Arc::new(inner) as ArrayRef],
            Some(NullBuffer::from_iter((0..20).map(|i| pattern(i) != 2))),
        );
        let whole = RecordBatch::try_from_iter(vec![("r", Arc::new(outer) as ArrayRef)]).unwrap();
        let batch = whole.slice(9, 7);
        let schema = batch.schema();
        let r: Arc<dyn PhysicalExpr> = Arc::new(Column::new_with_schema("r", &schema).unwrap());
        let x = field(field(r, "in", &schema), "x", &schema);
        let x = row_fields(x, &schema).unwrap();
        assert!(x.downcast_ref::<RowField>().is_some());
        let got = x.evaluate(&batch).unwrap().into_array(7).unwrap();
        let got = got.as_primitive::<datafusion_common::arrow::datatypes::Int32Type>();
        // By hand, rows 9..16: 9 % 3 = 0 keeps 9; 10 inner NULL; 11 outer NULL; 12 keeps
        // 12; 13 inner NULL; 14 outer NULL; 15 keeps 15.
        let got: Vec<Option<i32>> = (0..7)
            .map(|i| got.is_valid(i).then(|| got.value(i)))
            .collect();
        assert_eq!(got, [Some(9), None, None, Some(12), None, None, Some(15)]);
    }
}
