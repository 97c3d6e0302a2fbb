//! User-defined functions (issue 18): Rust functions registered on the `Engine` and bound
//! by `CREATE FUNCTION name AS 'identifier'`. Expected values by hand.

use std::sync::Arc;

use datafusion_common::{Result, ScalarValue};
use sluice::arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch};
use sluice::arrow::datatypes::{DataType, Int64Type};
use sluice::datafusion_expr::{create_udaf, create_udf, Accumulator, ColumnarValue, Volatility};
use sluice::{Engine, EngineConfig, StatementResult};

/// `twice(x) = 2 * x` over BIGINT.
fn twice() -> sluice::datafusion_expr::ScalarUDF {
    create_udf(
        "twice",
        vec![DataType::Int64],
        DataType::Int64,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let a = args[0].to_array(1)?;
            let out: Int64Array = a
                .as_primitive::<Int64Type>()
                .iter()
                .map(|v| v.map(|v| v * 2))
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out)))
        }),
    )
}

/// `product(x)`: the product of the non-NULL values (BIGINT).
#[derive(Debug)]
struct Product(i64);

impl Accumulator for Product {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for v in values[0].as_primitive::<Int64Type>().iter().flatten() {
            self.0 *= v;
        }
        Ok(())
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(Some(self.0)))
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Int64(Some(self.0))])
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update_batch(states)
    }
}

fn engine() -> Engine {
    let mut engine = Engine::new(EngineConfig::default());
    engine.register_udf("com.example.Twice", twice());
    engine.register_udaf(
        "com.example.Product",
        create_udaf(
            "product",
            vec![DataType::Int64],
            Arc::new(DataType::Int64),
            Volatility::Immutable,
            Arc::new(|_| Ok(Box::new(Product(1)))),
            Arc::new(vec![DataType::Int64]),
        ),
    );
    engine
}

fn ints(batches: &[RecordBatch], column: usize) -> Vec<Option<i64>> {
    batches
        .iter()
        .flat_map(|b| {
            let c = datafusion_common::arrow::compute::cast(b.column(column), &DataType::Int64)
                .unwrap();
            let c = c.as_primitive::<Int64Type>().clone();
            (0..c.len())
                .map(move |i| (!c.is_null(i)).then(|| c.value(i)))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn a_bound_scalar_function_runs_in_a_query() {
    let mut e = engine();
    e.sql("CREATE FUNCTION twice AS 'com.example.Twice' LANGUAGE JAVA")
        .unwrap();
    let rows = e
        .collect("SELECT twice(x) AS t, TWICE(x + 1) AS u FROM (VALUES (1), (-4), (CAST(NULL AS INT))) AS v(x)")
        .unwrap();
    assert_eq!(ints(&rows, 0), vec![Some(2), Some(-8), None]);
    assert_eq!(ints(&rows, 1), vec![Some(4), Some(-6), None]);
}

#[test]
fn a_bound_aggregate_function_runs_in_a_group_by() {
    let mut e = engine();
    e.sql("CREATE TEMPORARY FUNCTION product AS 'com.example.Product'")
        .unwrap();
    let rows = e
        .collect("SELECT k, product(x) AS p FROM (VALUES ('a', 2), ('b', 5), ('a', 3), ('a', 7)) AS v(k, x) GROUP BY k")
        .unwrap();
    // An updating result: fold it to its final table.
    let table = sluice::format::fold_changelog(&rows).unwrap().unwrap();
    let keys: Vec<String> = (0..table.num_rows())
        .map(|i| sluice::format::row_values(&table, i).unwrap()[0].clone())
        .collect();
    let products = ints(&[table], 1);
    let mut got: Vec<(String, Option<i64>)> = keys.into_iter().zip(products).collect();
    got.sort();
    assert_eq!(got, vec![("a".into(), Some(42)), ("b".into(), Some(5))]);
}

#[test]
fn names_are_bound_shown_shadowed_and_dropped() {
    let mut e = engine();
    // Unknown identifier: the error names the API and what is registered.
    let err = match e.sql("CREATE FUNCTION f AS 'com.example.Missing'") {
        Err(err) => err.to_string(),
        Ok(_) => panic!("an unknown identifier must be refused"),
    };
    assert!(err.contains("Engine::register_udf"), "{err}");
    assert!(err.contains("'com.example.Twice'"), "{err}");
    // Unbound: an unknown function, as before.
    assert!(e.collect("SELECT twice(1)").is_err());
    e.sql("CREATE FUNCTION twice AS 'com.example.Twice'")
        .unwrap();
    assert!(e
        .sql("CREATE FUNCTION twice AS 'com.example.Twice'")
        .is_err());
    e.sql("CREATE FUNCTION IF NOT EXISTS twice AS 'com.example.Twice'")
        .unwrap();
    match e.sql("SHOW FUNCTIONS").unwrap() {
        StatementResult::Info(b) => {
            let names: Vec<String> = (0..b.num_rows())
                .map(|i| sluice::format::row_values(&b, i).unwrap()[0].clone())
                .collect();
            assert!(names.contains(&"TWICE".to_string()));
        }
        _ => panic!("SHOW FUNCTIONS shows a table"),
    }
    // A catalog function does not shadow a built-in; a SYSTEM one does.
    e.sql("CREATE FUNCTION abs AS 'com.example.Twice'").unwrap();
    assert_eq!(
        ints(&e.collect("SELECT ABS(-3)").unwrap(), 0),
        vec![Some(3)]
    );
    e.sql("DROP FUNCTION abs").unwrap();
    e.sql("CREATE TEMPORARY SYSTEM FUNCTION abs AS 'com.example.Twice'")
        .unwrap();
    assert_eq!(
        ints(&e.collect("SELECT ABS(-3)").unwrap(), 0),
        vec![Some(-6)]
    );
    e.sql("DROP TEMPORARY SYSTEM FUNCTION abs").unwrap();
    assert_eq!(
        ints(&e.collect("SELECT ABS(-3)").unwrap(), 0),
        vec![Some(3)]
    );
    e.sql("DROP FUNCTION twice").unwrap();
    assert!(e.sql("DROP FUNCTION twice").is_err());
    e.sql("DROP FUNCTION IF EXISTS twice").unwrap();
    assert!(e.collect("SELECT twice(1)").is_err());
}
