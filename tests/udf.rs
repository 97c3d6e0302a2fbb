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

/// Flink's documentation example (SQL "Table Functions"): `split_words(s)` emits a row
/// `(word STRING, length INT)` per space-separated word of `s`; none for '' or NULL.
/// `rows` counts the rows it is called with.
fn split_words(rows: Arc<std::sync::atomic::AtomicUsize>) -> sluice::datafusion_expr::ScalarUDF {
    use sluice::arrow::array::{Int32Builder, ListBuilder, StringBuilder, StructBuilder};
    use sluice::arrow::datatypes::{Field, Fields};
    let fields = Fields::from(vec![
        Field::new("word", DataType::Utf8, true),
        Field::new("length", DataType::Int32, true),
    ]);
    let row = DataType::Struct(fields.clone());
    create_udf(
        "split_words",
        vec![DataType::Utf8],
        DataType::List(Arc::new(Field::new_list_field(row.clone(), true))),
        Volatility::Immutable,
        Arc::new(move |args: &[ColumnarValue]| {
            let a = args[0].to_array(1)?;
            rows.fetch_add(a.len(), std::sync::atomic::Ordering::SeqCst);
            let mut out = ListBuilder::new(StructBuilder::from_fields(fields.clone(), a.len()))
                .with_field(Arc::new(Field::new_list_field(row.clone(), true)));
            for s in a.as_string::<i32>().iter() {
                if let Some(s) = s {
                    for w in s.split(' ').filter(|w| !w.is_empty()) {
                        let rows = out.values();
                        rows.field_builder::<StringBuilder>(0)
                            .unwrap()
                            .append_value(w);
                        rows.field_builder::<Int32Builder>(1)
                            .unwrap()
                            .append_value(w.len() as i32);
                        rows.append(true);
                    }
                }
                out.append(s.is_some());
            }
            Ok(ColumnarValue::Array(Arc::new(out.finish())))
        }),
    )
}

/// `range_to(n)`: the BIGINTs 1..=n, an atomic result (one column, `f0`).
fn range_to() -> sluice::datafusion_expr::ScalarUDF {
    use sluice::arrow::array::{Int64Builder, ListBuilder};
    use sluice::arrow::datatypes::Field;
    create_udf(
        "range_to",
        vec![DataType::Int64],
        DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true))),
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let a = args[0].to_array(1)?;
            let mut out = ListBuilder::new(Int64Builder::new());
            for n in a.as_primitive::<Int64Type>().iter() {
                for i in 1..=n.unwrap_or(0) {
                    out.values().append_value(i);
                }
                out.append(n.is_some());
            }
            Ok(ColumnarValue::Array(Arc::new(out.finish())))
        }),
    )
}

/// An engine with the table functions bound; its `SplitFunction` counts into `rows`.
fn table_engine_counting(rows: Arc<std::sync::atomic::AtomicUsize>) -> Engine {
    let mut e = engine();
    e.register_udtf("com.example.SplitFunction", split_words(rows));
    e.register_udtf("com.example.RangeTo", range_to());
    e.register_udtf("com.example.NotATable", twice());
    e.sql("CREATE FUNCTION SplitFunction AS 'com.example.SplitFunction'")
        .unwrap();
    e.sql("CREATE FUNCTION range_to AS 'com.example.RangeTo'")
        .unwrap();
    e
}

fn table_engine() -> Engine {
    table_engine_counting(Arc::default())
}

/// Every row of `batches` as strings, sorted.
fn rows(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = batches
        .iter()
        .flat_map(|b| (0..b.num_rows()).map(move |i| sluice::format::row_values(b, i).unwrap()))
        .collect();
    out.sort();
    out
}

fn strings(rows: &[&[&str]]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|v| v.to_string()).collect())
        .collect();
    out.sort();
    out
}

const WORDS: &str =
    "(VALUES (1, 'hello world'), (2, 'a'), (3, ''), (4, CAST(NULL AS STRING))) AS v(id, myField)";

#[test]
fn a_table_function_emits_rows_per_input_row_as_flink_documents() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut e = table_engine_counting(Arc::clone(&calls));
    // Flink SQL "Table Functions": the columns take the result's field names.
    let got = e
        .collect(&format!(
            "SELECT id, word, length FROM {WORDS}, LATERAL TABLE(SplitFunction(myField))"
        ))
        .unwrap();
    assert_eq!(
        rows(&got),
        strings(&[&["1", "hello", "5"], &["1", "world", "5"], &["2", "a", "1"]])
    );
    // Once per input row, not once per column it gives.
    let counted = calls.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        counted, 4,
        "{counted} rows passed to the function for 4 input rows"
    );
    // Without an outer table too: one call for the one row of `TABLE(f('...'))`.
    let got = e
        .collect("SELECT word, length FROM TABLE(SplitFunction('a bb'))")
        .unwrap();
    assert_eq!(rows(&got), strings(&[&["a", "1"], &["bb", "2"]]));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 4 + 1);

    // Renamed columns; LEFT JOIN ... ON TRUE keeps rows it emits nothing for.
    let got = e
        .collect(&format!(
            "SELECT id, newWord, newLength FROM {WORDS} \
             LEFT JOIN LATERAL TABLE(SplitFunction(myField)) AS T(newWord, newLength) ON TRUE"
        ))
        .unwrap();
    assert_eq!(
        rows(&got),
        strings(&[
            &["1", "hello", "5"],
            &["1", "world", "5"],
            &["2", "a", "1"],
            &["3", "", ""],
            &["4", "", ""],
        ])
    );
    // Those are NULLs (row_values prints NULL as nothing).
    assert_eq!(ints(&got, 2).iter().filter(|v| v.is_none()).count(), 2);
}

#[test]
fn a_table_function_of_one_column_and_without_lateral() {
    let mut e = table_engine();
    let got = e
        .collect(
            "SELECT n, f0 FROM (VALUES (CAST(2 AS BIGINT)), (CAST(0 AS BIGINT))) AS v(n), \
             LATERAL TABLE(range_to(n))",
        )
        .unwrap();
    assert_eq!(rows(&got), strings(&[&["2", "1"], &["2", "2"]]));
    // A quoted name is the name.
    let got = e
        .collect(&format!(
            "SELECT id, word FROM {WORDS}, LATERAL TABLE(\"SplitFunction\"(myField)) WHERE id = 2"
        ))
        .unwrap();
    assert_eq!(rows(&got), strings(&[&["2", "a"]]));
    let got = e
        .collect("SELECT x * 10 AS y FROM TABLE(range_to(3)) AS t(x)")
        .unwrap();
    assert_eq!(rows(&got), strings(&[&["10"], &["20"], &["30"]]));
    // Aggregated downstream, by a column it gives.
    let got = e
        .collect(&format!(
            "SELECT length, COUNT(*) AS c FROM {WORDS}, LATERAL TABLE(SplitFunction(myField)) \
             GROUP BY length"
        ))
        .unwrap();
    let table = sluice::format::fold_changelog(&got).unwrap().unwrap();
    assert_eq!(rows(&[table]), strings(&[&["1", "1"], &["5", "2"]]));
}

#[test]
fn table_function_mistakes_are_clear_errors() {
    let mut e = table_engine();
    // Calcite's degree error when the alias names fewer columns than the rows have.
    let err = e
        .collect(&format!(
            "SELECT * FROM {WORDS}, LATERAL TABLE(SplitFunction(myField)) AS T(w)"
        ))
        .unwrap_err()
        .to_string();
    assert!(err.contains("same degree"), "{err}");
    // A function registered as a table function must return an ARRAY of its rows.
    e.sql("CREATE FUNCTION not_a_table AS 'com.example.NotATable'")
        .unwrap();
    let err = e
        .collect("SELECT * FROM (VALUES (1)) AS v(x), LATERAL TABLE(not_a_table(x))")
        .unwrap_err()
        .to_string();
    assert!(err.contains("not the ARRAY of the rows it emits"), "{err}");
    // `TABLE(f(...))` without LATERAL: an unknown name is no table function either.
    let err = e
        .collect("SELECT * FROM TABLE(nosuch(1)) AS T(x)")
        .unwrap_err()
        .to_string();
    assert!(err.contains("'nosuch' is not a table function"), "{err}");
    // A scalar function (or an unknown name) is no table function.
    for f in ["UPPER", "nosuch"] {
        let err = e
            .collect(&format!(
                "SELECT * FROM {WORDS}, LATERAL TABLE({f}(myField)) AS T(w)"
            ))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("'{f}' is not a table function")),
            "{err}"
        );
    }
}

#[test]
fn a_table_function_over_a_stream_keeps_its_event_time() {
    let mut e = table_engine();
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt/data/clicks.csv");
    e.sql(&format!(
        "CREATE TABLE clicks (uid STRING, url STRING, amount INT, price DOUBLE, ts TIMESTAMP(3), \
         WATERMARK FOR ts AS ts) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
        data.display()
    ))
    .unwrap();
    // Two words per click with a uid (CONCAT with a NULL is NULL: no words); the clicks
    // at 10:00:08 and 10:00:18 arrive after the watermark passed them and are dropped by
    // the window (by hand from tests/slt/data/clicks.csv).
    e.sql(
        "CREATE VIEW words AS SELECT ts, word FROM clicks, \
         LATERAL TABLE(SplitFunction(CONCAT(uid, ' ', url)))",
    )
    .unwrap();
    let got = e
        .collect(
            "SELECT window_start, COUNT(*) AS words FROM TABLE(TUMBLE(TABLE words, \
             DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end",
        )
        .unwrap();
    assert_eq!(
        rows(&got),
        strings(&[
            &["2024-01-01 10:00:00", "4"],
            &["2024-01-01 10:00:10", "6"],
            &["2024-01-01 10:00:20", "2"],
        ])
    );
}
