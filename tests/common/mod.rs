//! Helpers shared by the test binaries: the sqllogictest adapter and result comparison.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

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
    /// Recovery mode: the seed of the random checkpoints and failures injected into every
    /// job (see [`recovery_settings`]).
    recovery: Option<u64>,
    jobs: u64,
}

impl SluiceDb {
    pub fn new(dir: PathBuf) -> Self {
        Self::with_recovery(dir, None)
    }

    /// A session whose every job checkpoints at random rows and fails at random points,
    /// from `seed`; only committed output counts (exactly-once through the two-phase
    /// result output).
    pub fn with_recovery(dir: PathBuf, recovery: Option<u64>) -> Self {
        let mut engine = Engine::new(EngineConfig {
            working_dir: Some(dir),
            // Small batches exercise batch boundaries in every test.
            batch_size: 3,
            ..Default::default()
        });
        // As the `sluice` binary does (Nexmark q14's count_char).
        sluice::nexmark::register_udfs(&mut engine);
        SluiceDb {
            engine,
            recovery,
            jobs: 0,
        }
    }
}

/// xorshift64*, for reproducible random test settings.
pub fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// Settings that make a job checkpoint after random rows (within the first 40) and fail
/// at 1-3 random points (source reads, state updates, barriers, uploads, between manifest
/// and commit, between pre-commit and commit, before the final commit), restarting at
/// random parallelism, exactly-once.
pub fn recovery_settings(seed: u64) -> Vec<(&'static str, String)> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut range = |lo: u64, hi: u64| lo + xorshift(&mut state) % (hi - lo + 1);
    let mut rows: Vec<u64> = (0..range(1, 6)).map(|_| range(1, 40)).collect();
    rows.sort_unstable();
    rows.dedup();
    let checkpoints = rows.len() as u64;
    let mut points = Vec::new();
    for _ in 0..range(1, 3) {
        let id = range(1, checkpoints + 1);
        points.push(match range(0, 6) {
            0 => format!("source-after-row:{}", range(1, 40)),
            1 => format!("operator-after-update:{}", range(1, 15)),
            2 => format!("barrier:{id}"),
            3 => format!("upload:{id}"),
            4 => format!("after-manifest:{id}"),
            5 => format!("sink-after-precommit:{id}"),
            _ => "before-final-commit".to_string(),
        });
    }
    let restart_parallelism: Vec<String> = (0..3).map(|_| range(1, 3).to_string()).collect();
    static STORE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let store = STORE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    vec![
        (
            "execution.checkpointing.dir",
            format!("memory://slt-recovery-{}-{store}", std::process::id()),
        ),
        ("execution.checkpointing.mode", "EXACTLY_ONCE".into()),
        (
            "sluice.test.checkpoint-after-rows",
            rows.iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(","),
        ),
        ("sluice.test.failpoints", points.join(",")),
        (
            "sluice.test.restart-parallelism",
            restart_parallelism.join(","),
        ),
        ("restart-strategy.fixed-delay.attempts", "20".into()),
        ("restart-strategy.fixed-delay.delay", "0 ms".into()),
    ]
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
            let is_job = matches!(
                stmt.statement,
                sluice::Statement::Query(_)
                    | sluice::Statement::Insert { .. }
                    | sluice::Statement::StatementSet(_)
                    | sluice::Statement::EndStatementSet
            );
            let mut injected = Vec::new();
            if let (Some(seed), true) = (self.recovery, is_job) {
                self.jobs += 1;
                for (k, v) in recovery_settings(seed * 1000 + self.jobs) {
                    self.engine.set(k, &v).map_err(err)?;
                    injected.push(k);
                }
            }
            let result = self.engine.execute(stmt).map_err(err);
            // The injected settings apply to this job only (SET lists must not show them).
            for k in injected {
                let reset = sluice::parse_script(&format!("RESET '{k}'")).map_err(err)?;
                self.engine.execute(&reset[0]).map_err(err)?;
            }
            output = match result? {
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

/// The files under `dir` (recursively, sorted by path) whose extension is `ext` (no dot).
pub fn files_under(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files_under(&p, ext, out);
        } else if p.extension().is_some_and(|e| e == ext) {
            out.push(p);
        }
    }
}

/// xorshift64: the no-panic tests' reproducible random numbers (seed it odd).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n` (0 for `n` = 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Sorted lines of the visible files of `dir` (none while it does not exist): what a
/// filesystem sink has committed.
pub fn committed_lines(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return lines;
    };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with('.') {
            lines.extend(
                std::fs::read_to_string(e.path())
                    .unwrap()
                    .lines()
                    .map(String::from),
            );
        }
    }
    lines.sort();
    lines
}

/// The 1-second tumbling windows of ids 1..=`last` at event time id * 10 ms, as
/// `window_start,count,sum` sorted: window w holds ids 100w..100w+99 (window 0 from 1,
/// the last one up to `last`); counts and sums by formula.
pub fn second_windows_of_ids(last: i64) -> Vec<String> {
    let mut windows: Vec<String> = (0..=last / 100)
        .map(|w| {
            let (lo, hi) = ((w * 100).max(1), (w * 100 + 99).min(last));
            let n = hi - lo + 1;
            format!(
                "{},{n},{}",
                sluice::format_timestamp_ms(w * 1000),
                (lo + hi) * n / 2
            )
        })
        .collect();
    windows.sort();
    windows
}
