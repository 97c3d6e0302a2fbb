//! Helpers shared by the test binaries: the sqllogictest adapter and result comparison.
#![allow(dead_code)]

use std::path::PathBuf;

use sluice::arrow::array::{Array, RecordBatch};
use sluice::arrow::datatypes::DataType;
use sluice::{drain, Engine, EngineConfig, StatementResult};
use sqllogictest::{DBOutput, DefaultColumnType};

/// An error from the engine, as the slt runner sees it (its message is matched by
/// `statement error <regex>`).
#[derive(Debug)]
pub struct DbError(pub String);

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DbError {}

/// One slt file's session: a fresh engine resolving paths against the file's directory.
pub struct SluiceDb {
    engine: Engine,
}

impl SluiceDb {
    pub fn new(dir: PathBuf) -> Self {
        SluiceDb {
            engine: Engine::new(EngineConfig {
                working_dir: Some(dir),
                // Small batches exercise batch boundaries in every test.
                batch_size: 3,
                ..Default::default()
            }),
        }
    }
}

fn column_type(dt: &DataType) -> DefaultColumnType {
    if dt.is_integer() {
        DefaultColumnType::Integer
    } else if dt.is_floating() || matches!(dt, DataType::Decimal128(_, _)) {
        DefaultColumnType::FloatingPoint
    } else {
        DefaultColumnType::Text
    }
}

/// Rows in slt conventions: NULL as `NULL`, the empty string as `(empty)`.
pub fn slt_rows(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            let values = sluice::format::row_values(b, r).expect("formattable");
            rows.push(
                values
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| {
                        if b.column(i).is_null(r) {
                            "NULL".to_string()
                        } else if v.is_empty() {
                            "(empty)".to_string()
                        } else {
                            v
                        }
                    })
                    .collect(),
            );
        }
    }
    rows
}

impl sqllogictest::DB for SluiceDb {
    type Error = DbError;
    type ColumnType = DefaultColumnType;

    fn run(&mut self, sql: &str) -> Result<DBOutput<Self::ColumnType>, Self::Error> {
        let err = |e: sluice::SluiceError| DbError(e.to_string());
        let statements = sluice::parse_script(sql).map_err(err)?;
        let mut output = DBOutput::StatementComplete(0);
        for stmt in &statements {
            output = match self.engine.execute(stmt).map_err(err)? {
                StatementResult::Done(_) => DBOutput::StatementComplete(0),
                StatementResult::Info(batch) => DBOutput::Rows {
                    types: batch
                        .schema()
                        .fields()
                        .iter()
                        .map(|f| column_type(f.data_type()))
                        .collect(),
                    rows: slt_rows(&[batch]),
                },
                StatementResult::Query(job) => {
                    let updating = job.updating;
                    let skip = usize::from(updating);
                    let types = job
                        .schema
                        .fields()
                        .iter()
                        .skip(skip)
                        .map(|f| column_type(f.data_type()))
                        .collect();
                    let mut batches = drain(job).map_err(err)?;
                    if updating {
                        // Only the final table counts: fold the changelog.
                        batches = sluice::format::fold_changelog(&batches)
                            .map_err(err)?
                            .into_iter()
                            .collect();
                    }
                    DBOutput::Rows {
                        types,
                        rows: slt_rows(&batches),
                    }
                }
                StatementResult::Insert(job) => {
                    drain(job).map_err(err)?;
                    DBOutput::StatementComplete(0)
                }
            };
        }
        Ok(output)
    }

    fn engine_name(&self) -> &str {
        "sluice"
    }
}

/// Batches as CSV text with a header, in `sluice run --format csv` conventions.
pub fn rows_as_csv(batches: &[RecordBatch]) -> String {
    let mut out = String::new();
    if let Some(b) = batches.first() {
        let names: Vec<String> = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        out.push_str(&names.join(","));
        out.push('\n');
    }
    for b in batches {
        for r in 0..b.num_rows() {
            out.push_str(
                &sluice::format::row_values(b, r)
                    .expect("formattable")
                    .join(","),
            );
            out.push('\n');
        }
    }
    out
}

fn normalize_field(v: &str) -> String {
    // Timestamps compare by value: `.000` may be omitted.
    match v.strip_suffix(".000") {
        Some(t) if t.len() == 19 && t.as_bytes()[10] == b' ' => t.to_string(),
        _ => v.to_string(),
    }
}

fn fields_equal(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
        _ => false,
    }
}

fn parse_rows(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = lines
        .next()
        .map(|h| h.split(',').map(|s| s.trim().to_string()).collect())
        .unwrap_or_default();
    let mut rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(normalize_field).collect())
        .collect();
    rows.sort();
    (header, rows)
}

/// Compares two CSV texts (header + rows) as multisets of rows; numbers compare with a
/// relative tolerance of 1e-9, timestamps by value. Both sides must have a header
/// unless the actual result is empty and the expected has no rows.
pub fn compare_csv_multiset(expected: &str, actual: &str) -> Result<(), String> {
    let (eh, er) = parse_rows(expected);
    let (ah, ar) = parse_rows(actual);
    if !ar.is_empty() && eh != ah {
        return Err(format!(
            "header differs:\n expected {eh:?}\n actual   {ah:?}"
        ));
    }
    let same = er.len() == ar.len()
        && er
            .iter()
            .zip(&ar)
            .all(|(x, y)| x.len() == y.len() && x.iter().zip(y).all(|(a, b)| fields_equal(a, b)));
    if same {
        Ok(())
    } else {
        Err(format!(
            "rows differ (sorted):\n--- expected ({} rows)\n{}\n--- actual ({} rows)\n{}",
            er.len(),
            er.iter()
                .map(|r| r.join(","))
                .collect::<Vec<_>>()
                .join("\n"),
            ar.len(),
            ar.iter()
                .map(|r| r.join(","))
                .collect::<Vec<_>>()
                .join("\n")
        ))
    }
}
