//! Recovery: the shared recovery scenarios (cases 028 and 030, `scenario.md`), each
//! failure point through both exactly-once outputs (the query's result stream and the
//! two-phase-commit `filesystem` sink), restore at another parallelism, failed checkpoint
//! uploads, corrupt checkpoints, and `--from-checkpoint`-style restarts in a new engine.
//!
//! Expected rows are the cases' `expected.csv` (the failure-free result derived by hand).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use common::{compare_csv_multiset, rows_as_csv};
use sluice::arrow::array::RecordBatch;
use sluice::{Engine, EngineConfig, JobMetrics, StatementResult};

static UNIQUE: AtomicU64 = AtomicU64::new(0);

/// A fresh name for a `memory://` checkpoint store or a temporary directory.
fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        UNIQUE.fetch_add(1, Ordering::Relaxed)
    )
}

fn temp_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(prefix));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn case_dir(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    std::fs::read_dir(&root)
        .expect("tests/cases")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(name))
        .unwrap_or_else(|| panic!("case {name}"))
}

/// What a run committed, and how it ended.
struct Run {
    /// CSV with header (the result stream) or without (sink files).
    csv: String,
    error: Option<String>,
    metrics: std::sync::Arc<JobMetrics>,
}

/// `SET` statements for `settings`.
fn settings_sql(settings: &[(&str, String)]) -> String {
    settings
        .iter()
        .map(|(k, v)| format!("SET '{k}' = '{v}';\n"))
        .collect()
}

/// Runs `query.sql` of `dir` (its CREATE TABLEs, then its query) after `settings`, with
/// checkpoints in `store`. `sink`: write the query into a filesystem sink with these
/// columns instead of reading its result stream.
fn run(dir: &Path, settings: &[(&str, String)], sink: Option<(&str, &Path)>) -> Run {
    run_batches(dir, settings, sink, 2)
}

/// [`run`] with `batch_size` rows per source batch.
fn run_batches(
    dir: &Path,
    settings: &[(&str, String)],
    sink: Option<(&str, &Path)>,
    batch_size: usize,
) -> Run {
    let mut engine = Engine::new(EngineConfig {
        working_dir: Some(dir.to_path_buf()),
        batch_size,
        ..Default::default()
    });
    let mut sql = settings_sql(settings);
    let text = std::fs::read_to_string(dir.join("query.sql")).expect("query.sql");
    // The query is the last statement (it may hold subqueries).
    let text = text.trim_end().trim_end_matches(';');
    let (ddl, query) = text.rsplit_once(';').expect("DDL, then the query");
    sql.push_str(ddl);
    sql.push_str(";\n");
    let query = query.trim().to_string();
    if let Some((columns, out)) = sink {
        sql.push_str(&format!(
            "CREATE TABLE sink_out ({columns}) WITH ('connector' = 'filesystem', \
             'path' = '{}', 'format' = 'csv');\nINSERT INTO sink_out {query}",
            out.display()
        ));
    } else {
        sql.push_str(&query);
    }
    let statements = sluice::parse_script(&sql).expect("parses");
    let mut batches = Vec::new();
    let mut error = None;
    let mut metrics = None;
    for stmt in &statements {
        match engine.execute(stmt) {
            Ok(StatementResult::Query(mut job)) | Ok(StatementResult::Insert(mut job)) => {
                metrics = Some(std::sync::Arc::clone(&job.metrics));
                while let Some(b) = job.blocking_next() {
                    match b {
                        Ok(b) => batches.push(b),
                        Err(e) => error = Some(e.to_string()),
                    }
                }
                job.join();
            }
            Ok(_) => {}
            Err(e) => panic!("statement failed: {e}"),
        }
    }
    let csv = match sink {
        None => rows_as_csv(&batches),
        Some((_, out)) => committed_files(out),
    };
    Run {
        csv,
        error,
        metrics: metrics.expect("a job ran"),
    }
}

/// The sorted rows a run without failures or checkpoints commits into a filesystem sink
/// with columns `sink`.
fn failure_free(dir: &Path, sink: &str) -> Vec<String> {
    let out = temp_dir("ref");
    let reference = run(dir, &[], Some((sink, out.as_path())));
    assert_eq!(reference.error, None, "the failure-free run succeeds");
    data_rows(&reference.csv, false)
}

/// The visible files of a sink directory, concatenated (hidden in-progress and pending
/// files do not count).
fn committed_files(dir: &Path) -> String {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.sort();
    let mut out = String::new();
    for p in names {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if !name.starts_with('.') {
            out.push_str(&std::fs::read_to_string(&p).expect("part file"));
        }
    }
    out
}

fn base_settings(store: &str) -> Vec<(&'static str, String)> {
    vec![
        ("execution.checkpointing.dir", format!("memory://{store}")),
        ("execution.checkpointing.mode", "EXACTLY_ONCE".into()),
        ("restart-strategy.fixed-delay.delay", "0 ms".into()),
        ("restart-strategy.fixed-delay.attempts", "5".into()),
    ]
}

/// One failure point of a scenario: checkpoints after `rows`, the failpoints, and what
/// must hold after recovery.
struct Point {
    name: &'static str,
    checkpoint_after_rows: &'static str,
    failpoints: &'static str,
    restarts: u64,
    /// The checkpoint the last restart restored (1 = the first one taken).
    restored: u64,
}

/// Runs every failure point of a case through the result stream and the filesystem sink.
fn check_case(case: &str, sink_columns: &str, points: &[Point]) {
    let dir = case_dir(case);
    let expected = std::fs::read_to_string(dir.join("expected.csv")).expect("expected.csv");
    let (header, rows) = expected.split_once('\n').expect("header");
    let mut failures = Vec::new();
    for p in points {
        for use_sink in [false, true] {
            let mut settings = base_settings(&unique("chk"));
            if !p.checkpoint_after_rows.is_empty() {
                settings.push((
                    "sluice.test.checkpoint-after-rows",
                    p.checkpoint_after_rows.into(),
                ));
            }
            if !p.failpoints.is_empty() {
                settings.push(("sluice.test.failpoints", p.failpoints.into()));
            }
            let out = temp_dir("sink");
            let r = run(
                &dir,
                &settings,
                use_sink.then_some((sink_columns, out.as_path())),
            );
            let label = format!(
                "{case} / {} / {}",
                p.name,
                if use_sink {
                    "filesystem sink"
                } else {
                    "result stream"
                }
            );
            let actual = if use_sink {
                format!("{header}\n{}", r.csv)
            } else {
                r.csv.clone()
            };
            if let Some(e) = &r.error {
                failures.push(format!("{label}: the job failed: {e}"));
                continue;
            }
            if let Err(e) = compare_csv_multiset(&format!("{header}\n{rows}"), &actual) {
                failures.push(format!("{label}: {e}"));
            }
            let restarts = JobMetrics::get(&r.metrics.restarts);
            if restarts != p.restarts {
                failures.push(format!(
                    "{label}: {restarts} restarts, expected {}",
                    p.restarts
                ));
            }
            let restored = r.metrics.restored_checkpoint_id.load(Ordering::Relaxed);
            if restored != p.restored {
                failures.push(format!(
                    "{label}: the last restart restored checkpoint {restored}, expected {}",
                    p.restored
                ));
            }
            let _ = std::fs::remove_dir_all(&out);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn case_028_watermark_and_offsets_exactly_once() {
    check_case(
        "028",
        "window_start TIMESTAMP(3), window_end TIMESTAMP(3), cnt BIGINT, v_sum BIGINT",
        &[
            Point {
                name: "failure-free with checkpoints",
                checkpoint_after_rows: "2,5,7",
                failpoints: "",
                restarts: 0,
                restored: 0,
            },
            // 1. Checkpoint after row 3 (window [:00,:10) emitted, watermark 10:00:10); kill
            // before row 4: row 4 (10:00:09) must still be late, [:00,:10) not re-emitted.
            Point {
                name: "point 1",
                checkpoint_after_rows: "3",
                failpoints: "source-after-row:3",
                restarts: 1,
                restored: 1,
            },
            // 2. Checkpoint after row 5, kill after row 8: rows 6-8 replayed from the offset
            // after row 5; [:10,:20) committed once.
            Point {
                name: "point 2",
                checkpoint_after_rows: "5",
                failpoints: "source-after-row:8",
                restarts: 1,
                restored: 1,
            },
            // 3. Kill during the checkpoint after row 6 (its barrier reached the operator,
            // which fails): restart from the checkpoint after row 5.
            Point {
                name: "point 3",
                checkpoint_after_rows: "5,6",
                failpoints: "barrier:2",
                restarts: 1,
                restored: 1,
            },
            // 4. Kill after the last row, before the end-of-input flush is committed.
            Point {
                name: "point 4",
                checkpoint_after_rows: "5",
                failpoints: "before-final-commit",
                restarts: 1,
                restored: 1,
            },
            // 5. Point 2 twice in a row: the second restart still starts from the
            // checkpoint after row 5, not from scratch.
            Point {
                name: "point 5",
                checkpoint_after_rows: "5",
                failpoints: "source-after-row:8x2",
                restarts: 2,
                restored: 1,
            },
            // More kinds of failure at the same place: after the state update of the
            // batch holding row 8, and between the manifest and the commit.
            Point {
                name: "after a state update, before output",
                checkpoint_after_rows: "5",
                failpoints: "operator-after-update:4",
                restarts: 1,
                restored: 1,
            },
            Point {
                name: "between manifest and commit",
                checkpoint_after_rows: "5,8",
                failpoints: "after-manifest:2",
                restarts: 1,
                restored: 2,
            },
            Point {
                name: "between pre-commit and commit in the sink",
                checkpoint_after_rows: "5,8",
                failpoints: "sink-after-precommit:2",
                restarts: 1,
                restored: 1,
            },
            // Checkpoint 2's upload fails; the job goes on, checkpoint 3 (after row 8)
            // succeeds and is the one restored.
            Point {
                name: "a failed upload fails only that checkpoint",
                checkpoint_after_rows: "3,5,8",
                failpoints: "upload:2,source-after-row:8",
                restarts: 1,
                restored: 3,
            },
        ],
    );
}

#[test]
fn case_030_session_merge_across_restore() {
    check_case(
        "030",
        "uid STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), cnt BIGINT",
        &[
            Point {
                name: "failure-free with checkpoints",
                checkpoint_after_rows: "1,4,5,6",
                failpoints: "",
                restarts: 0,
                restored: 0,
            },
            // 1 and 3. Checkpoint after row 5 (u1: two open sessions, u2: one); kill right
            // after it. Row 6 must merge the two restored u1 sessions; restored sessions
            // must still fire.
            Point {
                name: "points 1 and 3",
                checkpoint_after_rows: "5",
                failpoints: "source-after-row:5",
                restarts: 1,
                restored: 1,
            },
            // 2. Checkpoint after row 6, kill after row 7 (sessions fired by the watermark
            // 10:03:00, maybe written, not committed).
            Point {
                name: "point 2",
                checkpoint_after_rows: "6",
                failpoints: "source-after-row:7",
                restarts: 1,
                restored: 1,
            },
        ],
    );
}

/// MATCH_RECOGNIZE: a failure in the middle of a pattern (X's partial match A=11, B=12
/// and buffered rows in the checkpoint), restore, identical matches.
#[test]
fn case_016_match_recognize_fails_mid_pattern() {
    check_case(
        "016",
        "sym STRING, start_price INT, first_b INT, last_b INT, nb BIGINT, end_price INT, \
         end_ts TIMESTAMP(3)",
        &[
            Point {
                name: "failure-free with checkpoints",
                checkpoint_after_rows: "2,4,6,8",
                failpoints: "",
                restarts: 0,
                restored: 0,
            },
            // Checkpoint after row 6 (X 13 @04: A=11, B=12 released, 13 still buffered;
            // Y's A=30 B=5 partial match), kill after row 7.
            Point {
                name: "mid-pattern",
                checkpoint_after_rows: "6",
                failpoints: "source-after-row:7",
                restarts: 1,
                restored: 1,
            },
            // Killed again right after the restore's first checkpoint.
            Point {
                name: "twice",
                checkpoint_after_rows: "4,8",
                failpoints: "source-after-row:5,source-after-row:9",
                restarts: 2,
                restored: 2,
            },
        ],
    );
}

/// xorshift64*: the tests' reproducible random numbers.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

const INPUT_ROWS: u64 = 400;

/// A directory with `input.csv` (`k,v,ts`: 5 keys, timestamps rising 0-900 ms per row
/// with jumps back of up to 3 s, so some rows are late) and `query.sql` = `query`.
fn generated_case(query: &str) -> PathBuf {
    let dir = temp_dir("gen");
    let mut rng = Rng::new(42);
    let mut csv = String::from("k,v,ts\n");
    let mut t: i64 = 1_700_000_000_000;
    for _ in 0..INPUT_ROWS {
        t += rng.range(0, 900) as i64;
        let ts = if rng.range(0, 9) == 0 {
            t - rng.range(0, 3000) as i64
        } else {
            t
        };
        csv.push_str(&format!(
            "{},{},{}\n",
            rng.range(0, 4),
            rng.range(1, 100),
            sluice::format_timestamp_ms(ts)
        ));
    }
    std::fs::write(dir.join("input.csv"), csv).expect("input");
    let ddl = "CREATE TABLE events (k INT, v INT, ts TIMESTAMP(3), \
               WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ('connector' = 'filesystem', \
               'path' = 'input.csv', 'format' = 'csv', 'csv.header' = 'true');\n";
    std::fs::write(dir.join("query.sql"), format!("{ddl}{query}")).expect("query");
    dir
}

const TUMBLE_QUERY: &str = "SELECT k, window_start, COUNT(*) AS cnt, SUM(v) AS total \
    FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '5' SECOND)) \
    GROUP BY k, window_start, window_end";
const TUMBLE_SINK: &str = "k INT, window_start TIMESTAMP(3), cnt BIGINT, total BIGINT";
const SESSION_QUERY: &str = "SELECT k, window_start, window_end, COUNT(*) AS cnt \
    FROM TABLE(SESSION(TABLE events PARTITION BY k, DESCRIPTOR(ts), INTERVAL '2' SECOND)) \
    GROUP BY k, window_start, window_end";
const SESSION_SINK: &str = "k INT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), cnt BIGINT";
const GROUP_QUERY: &str = "SELECT k, COUNT(*) AS cnt, SUM(v) AS total, MAX(v) AS top \
    FROM events GROUP BY k";
/// COUNT(DISTINCT) over a changelog: keys often share a count, so a restored
/// accumulator must keep how many keys hold each value (DataFusion's sliding one keeps only
/// the values in its state).
const DISTINCT_OVER_CHANGELOG_QUERY: &str = "SELECT COUNT(DISTINCT cnt) AS counts, \
    COUNT(*) AS ks, MAX(cnt) AS top FROM (SELECT v, COUNT(*) AS cnt FROM events GROUP BY v)";
/// MATCH_RECOGNIZE with WITHIN and PREV (history-free conditions, vectorized).
const MR_QUERY: &str = "SELECT k, s, e, n FROM events MATCH_RECOGNIZE (PARTITION BY k \
    ORDER BY ts MEASURES FIRST(A.ts) AS s, LAST(C.ts) AS e, COUNT(B.*) AS n \
    PATTERN (A B+ C) WITHIN INTERVAL '8' SECOND \
    DEFINE A AS v > 50, B AS v <= PREV(v), C AS v > PREV(v))";
const MR_SINK: &str = "k INT, s TIMESTAMP(3), e TIMESTAMP(3), n BIGINT";
/// MATCH_RECOGNIZE whose condition reads another variable (evaluated per partial match),
/// overlapping matches, MATCH_NUMBER.
const MR_HISTORY_QUERY: &str = "SELECT k, a, b, m FROM events MATCH_RECOGNIZE (PARTITION BY k \
    ORDER BY ts MEASURES A.v AS a, LAST(B.v) AS b, MATCH_NUMBER() AS m \
    AFTER MATCH SKIP TO NEXT ROW PATTERN (A B{1,3}?) \
    DEFINE B AS B.v > A.v + 20)";

/// OVER windows: a bounded ROWS frame with LAG (rows waiting for the watermark, frame rows
/// and LAG rows in state) and the unbounded default frame (accumulator state).
const OVER_QUERY: &str = "SELECT k, v, ts, SUM(v) OVER w AS s, LAG(v) OVER w AS p FROM events \
    WINDOW w AS (PARTITION BY k ORDER BY ts ROWS BETWEEN 5 PRECEDING AND CURRENT ROW)";
const OVER_SINK: &str = "k INT, v INT, ts TIMESTAMP(3), s INT, p INT";
const OVER_UNBOUNDED_QUERY: &str = "SELECT k, v, COUNT(*) OVER w AS c, MAX(v) OVER w AS m \
    FROM events WINDOW w AS (PARTITION BY k ORDER BY ts)";
const OVER_UNBOUNDED_SINK: &str = "k INT, v INT, c BIGINT, m INT";
/// Top-N over an updating input (rows move between partitions as counts grow) and
/// keep-last deduplication (ties of equal times ranked by arrival).
const TOP_N_QUERY: &str = "SELECT * FROM (SELECT v, cnt, ROW_NUMBER() OVER (PARTITION BY cnt \
    ORDER BY v DESC) AS rn FROM (SELECT v, COUNT(*) AS cnt FROM events GROUP BY v)) WHERE rn <= 2";
/// Top-N over a growing count (update-fast: only the top rows are kept, `-U` rows passed
/// over; the order is total, so no tie depends on arrival).
const COUNT_TOP_N_QUERY: &str = "SELECT * FROM (SELECT g, k, c, ROW_NUMBER() OVER (PARTITION \
    BY g ORDER BY c DESC, k) AS rn FROM (SELECT k % 3 AS g, k, COUNT(*) AS c FROM events \
    GROUP BY k % 3, k)) WHERE rn <= 2";
/// A window Top-N: rows ranked per window, emitted when the window fires.
const WINDOW_TOP_N_QUERY: &str = "SELECT k, v, ws, rn FROM (SELECT k, v, window_start AS ws, \
    ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY v DESC) AS rn \
    FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '5' SECOND))) WHERE rn <= 2";
const WINDOW_TOP_N_SINK: &str = "k INT, v INT, ws TIMESTAMP(3), rn BIGINT";
const DEDUP_QUERY: &str = "SELECT k, v, ts FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k \
    ORDER BY ts DESC) AS rn FROM events) WHERE rn = 1";

/// Two keyed operators (two exchanges at parallelism > 1) over a window aggregate.
const AGG_OF_AGG_QUERY: &str = "SELECT cnt, COUNT(*) AS windows, MIN(total) AS low \
    FROM (SELECT k, window_start, COUNT(*) AS cnt, SUM(v) AS total \
    FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '5' SECOND)) \
    GROUP BY k, window_start, window_end) GROUP BY cnt";

/// A regular left join of the events with an updating aggregate of them (each key's
/// largest value over 90), then an updating aggregate over the join: join state on both
/// inputs, retractions through the join.
const JOIN_AGG_QUERY: &str =
    "SELECT a.k, COUNT(*) AS cnt, SUM(b.top) AS tops, COUNT(b.top) AS matched \
    FROM events a LEFT JOIN (SELECT k, MAX(v) AS top FROM events WHERE v > 90 GROUP BY k) b \
    ON a.k = b.k GROUP BY a.k";
/// An inner join of two append-only inputs (the events with themselves: the same key and
/// the next value): append-only, so it goes to the two-phase-commit file sink.
const APPEND_JOIN_QUERY: &str = "SELECT a.k, a.v, b.v AS bv, a.ts FROM events a JOIN events b \
    ON a.k = b.k AND a.v = b.v + 1";
const APPEND_JOIN_SINK: &str = "k INT, v INT, bv INT, ts TIMESTAMP(3)";
/// A FULL window join of the events' 5-second windows with themselves (large values with
/// small ones of the same key and window): rows buffered per window, joined and dropped
/// when the window fires; late rows dropped by the window table function first.
const WINDOW_JOIN_QUERY: &str = "CREATE VIEW wa AS SELECT * FROM TABLE(TUMBLE(TABLE events, \
    DESCRIPTOR(ts), INTERVAL '5' SECOND)) WHERE v > 50;\n\
    CREATE VIEW wb AS SELECT * FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), \
    INTERVAL '5' SECOND)) WHERE v < 20;\n\
    SELECT COALESCE(a.k, b.k) AS k, COALESCE(a.window_start, b.window_start) AS ws, a.v, b.v AS bv \
    FROM wa a FULL JOIN wb b ON a.k = b.k AND a.window_start = b.window_start \
    AND a.window_end = b.window_end";
const WINDOW_JOIN_SINK: &str = "k INT, ws TIMESTAMP(3), v INT, bv INT";
/// A LEFT interval join of the events with themselves (the same key, the other row 2 s
/// before to 1 s after, a smaller value): rows kept until the watermark passes their
/// bounds, unmatched ones padded then. Over a copy of the table with a 5 s watermark delay
/// (more than the input's disorder: no late row, so the result does not depend on how the
/// join's two inputs interleave).
const INTERVAL_JOIN_QUERY: &str = "CREATE TABLE ev5 (k INT, v INT, ts TIMESTAMP(3), \
    WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) WITH ('connector' = 'filesystem', \
    'path' = 'input.csv', 'format' = 'csv', 'csv.header' = 'true');\n\
    SELECT a.k, a.v, b.v AS bv, a.ts FROM ev5 a LEFT JOIN ev5 b ON a.k = b.k \
    AND b.ts BETWEEN a.ts - INTERVAL '2' SECOND AND a.ts + INTERVAL '1' SECOND AND a.v > b.v + 30";
/// A LEFT temporal join of the events with their own versions by key (each row joins the
/// key's latest row at or before its time, which may be itself), with a condition on the
/// version. The watermark 5 s behind leaves no row late (the disorder is at most 3 s), so
/// the result does not depend on how the two inputs of the join interleave.
const TEMPORAL_JOIN_QUERY: &str = "CREATE TABLE ev5k (k INT, v INT, ts TIMESTAMP(3), \
    WATERMARK FOR ts AS ts - INTERVAL '5' SECOND, PRIMARY KEY (k) NOT ENFORCED) \
    WITH ('connector' = 'filesystem', 'path' = 'input.csv', 'format' = 'csv', \
    'csv.header' = 'true');\n\
    SELECT a.k, a.v, b.v AS bv, a.ts FROM ev5k a LEFT JOIN ev5k FOR SYSTEM_TIME AS OF a.ts AS b \
    ON a.k = b.k AND a.v > b.v + 30";

/// Random failures: 1-3 failpoints of every kind, checkpoints every 5-40 rows.
fn random_failures(rng: &mut Rng) -> (String, String) {
    let every = rng.range(5, 40);
    let rows: Vec<String> = (1..INPUT_ROWS / every)
        .map(|i| (i * every + rng.range(0, 3)).to_string())
        .collect();
    let checkpoints = rows.len() as u64;
    let mut points = Vec::new();
    for _ in 0..rng.range(1, 3) {
        let id = rng.range(1, checkpoints.max(1) + 2);
        points.push(match rng.range(0, 6) {
            0 => format!("source-after-row:{}", rng.range(1, INPUT_ROWS)),
            1 => format!("operator-after-update:{}", rng.range(1, 200)),
            2 => format!("barrier:{id}"),
            3 => format!("upload:{id}"),
            4 => format!("after-manifest:{id}"),
            5 => format!("sink-after-precommit:{id}"),
            _ => "before-final-commit".to_string(),
        });
    }
    (rows.join(","), points.join(","))
}

fn data_rows(csv: &str, with_header: bool) -> Vec<String> {
    let mut rows: Vec<String> = csv
        .lines()
        .skip(usize::from(with_header))
        .filter(|l| !l.is_empty())
        .map(|l| l.to_string())
        .collect();
    rows.sort();
    rows
}

/// The folded final table of a changelog result (`op` first), sorted.
fn folded(csv: &str) -> Vec<String> {
    let mut table: std::collections::BTreeMap<String, i64> = Default::default();
    for line in csv.lines().skip(1).filter(|l| !l.is_empty()) {
        let (op, row) = line.split_once(',').expect("op column");
        let delta = if op == "-U" || op == "-D" { -1 } else { 1 };
        *table.entry(row.to_string()).or_default() += delta;
    }
    table
        .into_iter()
        .flat_map(|(r, n)| std::iter::repeat_n(r, n.max(0) as usize))
        .collect()
}

fn seeds(default: u64) -> u64 {
    std::env::var("SLUICE_RECOVERY_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn mode_settings(store: &str, mode: &str, rng: &mut Rng) -> Vec<(&'static str, String)> {
    let (rows, points) = random_failures(rng);
    let mut s = base_settings(store);
    s[1].1 = mode.to_string();
    s[3].1 = "30".into();
    s.push(("sluice.test.checkpoint-after-rows", rows));
    s.push(("sluice.test.failpoints", points));
    s.push(("parallelism.default", rng.range(1, 3).to_string()));
    s
}

/// Exactly-once with the two-phase-commit sink (and the result stream of an updating
/// aggregate): the committed output equals the failure-free output, for many seeds of
/// random checkpoints and failures at random points.
#[test]
fn randomized_failures_exactly_once() {
    let n = seeds(6);
    let cases = [
        (TUMBLE_QUERY, Some(TUMBLE_SINK)),
        (SESSION_QUERY, Some(SESSION_SINK)),
        (GROUP_QUERY, None),
        (AGG_OF_AGG_QUERY, None),
        (DISTINCT_OVER_CHANGELOG_QUERY, None),
        (MR_QUERY, Some(MR_SINK)),
        (MR_HISTORY_QUERY, None),
        (JOIN_AGG_QUERY, None),
        (APPEND_JOIN_QUERY, Some(APPEND_JOIN_SINK)),
        (INTERVAL_JOIN_QUERY, Some(APPEND_JOIN_SINK)),
        (WINDOW_JOIN_QUERY, Some(WINDOW_JOIN_SINK)),
        (TEMPORAL_JOIN_QUERY, Some(APPEND_JOIN_SINK)),
        (OVER_QUERY, Some(OVER_SINK)),
        (OVER_UNBOUNDED_QUERY, Some(OVER_UNBOUNDED_SINK)),
        (WINDOW_TOP_N_QUERY, Some(WINDOW_TOP_N_SINK)),
        (TOP_N_QUERY, None),
        (COUNT_TOP_N_QUERY, None),
        (DEDUP_QUERY, None),
    ];
    let mut failures = Vec::new();
    let mut restarts = 0;
    for (query, sink) in cases {
        let dir = generated_case(query);
        let reference_out = temp_dir("ref");
        let reference = run(&dir, &[], sink.map(|c| (c, reference_out.as_path())));
        assert!(reference.error.is_none(), "{:?}", reference.error);
        let expected = match sink {
            Some(_) => data_rows(&reference.csv, false),
            None => folded(&reference.csv),
        };
        assert!(!expected.is_empty(), "the reference has rows");
        for seed in 0..n {
            let mut rng = Rng::new(seed + 1000);
            let settings = mode_settings(&unique("rnd"), "EXACTLY_ONCE", &mut rng);
            let out = temp_dir("out");
            let r = run(&dir, &settings, sink.map(|c| (c, out.as_path())));
            restarts += JobMetrics::get(&r.metrics.restarts);
            let actual = match sink {
                Some(_) => data_rows(&r.csv, false),
                None => folded(&r.csv),
            };
            if r.error.is_some() || actual != expected {
                failures.push(format!(
                    "seed {seed} {settings:?}: error {:?}; {} rows, expected {}",
                    r.error,
                    actual.len(),
                    expected.len()
                ));
            }
            let _ = std::fs::remove_dir_all(&out);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(restarts > 0, "the random failures restarted the job");
}

/// At-least-once (no two-phase commit): every failure-free result row is in the output;
/// some seeds show duplicates.
#[test]
fn randomized_failures_at_least_once() {
    let n = seeds(6);
    let mut failures = Vec::new();
    for (query, sink) in [
        (TUMBLE_QUERY, TUMBLE_SINK),
        (APPEND_JOIN_QUERY, APPEND_JOIN_SINK),
        (INTERVAL_JOIN_QUERY, APPEND_JOIN_SINK),
        (WINDOW_JOIN_QUERY, WINDOW_JOIN_SINK),
        (TEMPORAL_JOIN_QUERY, APPEND_JOIN_SINK),
        (OVER_QUERY, OVER_SINK),
        (OVER_UNBOUNDED_QUERY, OVER_UNBOUNDED_SINK),
        (WINDOW_TOP_N_QUERY, WINDOW_TOP_N_SINK),
    ] {
        let dir = generated_case(query);
        let expected = failure_free(&dir, sink);
        let mut with_duplicates = 0;
        for seed in 0..n {
            let mut rng = Rng::new(seed + 2000);
            let settings = mode_settings(&unique("alo"), "AT_LEAST_ONCE", &mut rng);
            let out = temp_dir("out");
            let r = run(&dir, &settings, Some((sink, out.as_path())));
            let mut actual = data_rows(&r.csv, false);
            if actual.len() > expected.len() {
                with_duplicates += 1;
            }
            let mut missing = Vec::new();
            for row in &expected {
                match actual.iter().position(|a| a == row) {
                    Some(i) => {
                        actual.swap_remove(i);
                    }
                    None => missing.push(row.clone()),
                }
            }
            if r.error.is_some() || !missing.is_empty() {
                failures.push(format!(
                    "seed {seed} {settings:?}: error {:?}; missing {missing:?}",
                    r.error
                ));
            }
            let _ = std::fs::remove_dir_all(&out);
        }
        if with_duplicates == 0 {
            failures.push(format!(
                "{query}: at-least-once showed no duplicates for any seed"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// At-most-once: for every window and key, the counts over all emitted rows never exceed
/// the failure-free count; some seeds lose events.
#[test]
fn randomized_failures_at_most_once() {
    let n = seeds(6);
    let dir = generated_case(TUMBLE_QUERY);
    let reference_out = temp_dir("ref");
    let reference = run(&dir, &[], Some((TUMBLE_SINK, reference_out.as_path())));
    let counts = |csv: &str| {
        let mut m: std::collections::BTreeMap<String, i64> = Default::default();
        for line in csv.lines().filter(|l| !l.is_empty()) {
            let f: Vec<&str> = line.split(',').collect();
            *m.entry(format!("{},{}", f[0], f[1])).or_default() += f[2].parse::<i64>().unwrap();
        }
        m
    };
    let expected = counts(&reference.csv);
    let mut failures = Vec::new();
    let mut lossy = 0;
    for seed in 0..n {
        let mut rng = Rng::new(seed + 3000);
        let settings = mode_settings(&unique("amo"), "AT_MOST_ONCE", &mut rng);
        let out = temp_dir("out");
        let r = run(&dir, &settings, Some((TUMBLE_SINK, out.as_path())));
        let actual = counts(&r.csv);
        for (key, n) in &actual {
            if *n > expected.get(key).copied().unwrap_or(0) {
                failures.push(format!("seed {seed}: {key} counted {n} times"));
            }
        }
        if actual.values().sum::<i64>() < expected.values().sum::<i64>() {
            lossy += 1;
        }
        if let Some(e) = r.error {
            failures.push(format!("seed {seed}: {e}"));
        }
        let _ = std::fs::remove_dir_all(&out);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(lossy > 0, "at-most-once lost events for some seed");
}

/// At-most-once through a join into the file sink: no output row more often than in the
/// failure-free output; some seeds lose rows.
#[test]
fn randomized_failures_at_most_once_through_a_join() {
    let n = seeds(6);
    let dir = generated_case(APPEND_JOIN_QUERY);
    let expected = failure_free(&dir, APPEND_JOIN_SINK);
    let count = |rows: &[String]| {
        let mut m: BTreeMap<String, usize> = BTreeMap::new();
        for r in rows {
            *m.entry(r.clone()).or_default() += 1;
        }
        m
    };
    let expected_counts = count(&expected);
    let mut failures = Vec::new();
    let mut lossy = 0;
    for seed in 0..n {
        let mut rng = Rng::new(seed + 4000);
        let settings = mode_settings(&unique("amoj"), "AT_MOST_ONCE", &mut rng);
        let out = temp_dir("out");
        let r = run(&dir, &settings, Some((APPEND_JOIN_SINK, out.as_path())));
        let actual = data_rows(&r.csv, false);
        for (row, k) in count(&actual) {
            if k > expected_counts.get(&row).copied().unwrap_or(0) {
                failures.push(format!("seed {seed}: {row} emitted {k} times"));
            }
        }
        if actual.len() < expected.len() {
            lossy += 1;
        }
        if let Some(e) = r.error {
            failures.push(format!("seed {seed}: {e}"));
        }
        let _ = std::fs::remove_dir_all(&out);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(lossy > 0, "at-most-once lost rows for some seed");
}

/// Settings for a job that checkpoints after `rows` into `dir` and fails for good (no
/// restarts) at `fail`.
fn stop_after(
    dir: &Path,
    rows: &str,
    fail: &str,
    parallelism: usize,
) -> Vec<(&'static str, String)> {
    vec![
        ("execution.checkpointing.dir", dir.display().to_string()),
        ("sluice.test.checkpoint-after-rows", rows.into()),
        ("sluice.test.failpoints", fail.into()),
        ("restart-strategy.type", "none".into()),
        ("parallelism.default", parallelism.to_string()),
    ]
}

fn resume_from(dir: &Path, path: &str, parallelism: usize) -> Vec<(&'static str, String)> {
    vec![
        ("execution.checkpointing.dir", dir.display().to_string()),
        ("execution.checkpointing.interval", "1 h".into()),
        ("execution.state-recovery.path", path.into()),
        ("parallelism.default", parallelism.to_string()),
    ]
}

/// A job stopped by a failure resumes in a new engine from its latest checkpoint, at
/// another parallelism; the output committed by both runs together equals the
/// failure-free output.
#[test]
fn restore_at_another_parallelism() {
    for (query, sink) in [
        (TUMBLE_QUERY, TUMBLE_SINK),
        (SESSION_QUERY, SESSION_SINK),
        (MR_QUERY, MR_SINK),
        (APPEND_JOIN_QUERY, APPEND_JOIN_SINK),
        (INTERVAL_JOIN_QUERY, APPEND_JOIN_SINK),
        (WINDOW_JOIN_QUERY, WINDOW_JOIN_SINK),
        (TEMPORAL_JOIN_QUERY, APPEND_JOIN_SINK),
    ] {
        let dir = generated_case(query);
        let expected = failure_free(&dir, sink);
        for (first, second) in [(2, 3), (3, 1), (1, 2)] {
            let chk = temp_dir("chk");
            let out = temp_dir("out");
            // Batches of 64 rows: the checkpoint at row 250 falls inside one.
            let r1 = run_batches(
                &dir,
                &stop_after(&chk, "120,250", "source-after-row:300", first),
                Some((sink, out.as_path())),
                64,
            );
            assert!(r1.error.is_some(), "the first run fails at row 300");
            let r2 = run_batches(
                &dir,
                &resume_from(&chk, "latest", second),
                Some((sink, out.as_path())),
                64,
            );
            assert_eq!(r2.error, None);
            assert_eq!(
                r2.metrics.restored_checkpoint_id.load(Ordering::Relaxed),
                2,
                "{query}: parallelism {first} then {second}; first run: {:?}",
                r1.error
            );
            assert_eq!(
                data_rows(&r2.csv, false),
                expected,
                "{query}: parallelism {first} then {second}"
            );
            // Rows in: those after the checkpoint's offset (row 250), not the rows of a
            // batch read again to find it.
            assert_eq!(
                JobMetrics::get(&r2.metrics.rows_in),
                INPUT_ROWS - 250,
                "{query}"
            );
            let _ = std::fs::remove_dir_all(&chk);
            let _ = std::fs::remove_dir_all(&out);
        }
    }
}

/// Every aggregate kind of the updating aggregate's state (column-wise COUNT, SUM, AVG,
/// MIN, MAX, COUNT(DISTINCT) of numbers), over an append-only input and over a changelog.
const UPDATING_MIX_QUERY: &str = "SELECT k, COUNT(*) AS cnt, SUM(v) AS total, AVG(v) AS mean, \
    MIN(v) AS low, MAX(v) AS top, COUNT(DISTINCT v) AS vs FROM events GROUP BY k";
const UPDATING_OVER_CHANGELOG_QUERY: &str = "SELECT MOD(cnt, 3) AS m, COUNT(*) AS ks, \
    SUM(cnt) AS total, AVG(cnt) AS mean, MIN(v) AS low, MAX(cnt) AS top \
    FROM (SELECT v, COUNT(*) AS cnt FROM events GROUP BY v) GROUP BY MOD(cnt, 3)";

/// Updating results (updating aggregates, a Top-N over one, a deduplication; rows are
/// released when a checkpoint completes) stopped by a failure resume at another
/// parallelism: the rows released by both runs, folded, are the failure-free final table.
#[test]
fn updating_results_restore_at_another_parallelism() {
    for query in [
        UPDATING_MIX_QUERY,
        UPDATING_OVER_CHANGELOG_QUERY,
        DISTINCT_OVER_CHANGELOG_QUERY,
        JOIN_AGG_QUERY,
        TOP_N_QUERY,
        COUNT_TOP_N_QUERY,
        DEDUP_QUERY,
    ] {
        let dir = generated_case(query);
        let reference = run(&dir, &[], None);
        assert_eq!(reference.error, None);
        let expected = folded(&reference.csv);
        for (first, second) in [(2, 3), (3, 1), (1, 2)] {
            let chk = temp_dir("chk");
            let r1 = run_batches(
                &dir,
                &stop_after(&chk, "120,250", "source-after-row:300", first),
                None,
                64,
            );
            assert!(r1.error.is_some(), "the first run fails at row 300");
            assert!(
                !body(&r1.csv).is_empty(),
                "{query}: the first run released its checkpoints' rows"
            );
            let r2 = run_batches(&dir, &resume_from(&chk, "latest", second), None, 64);
            assert_eq!(r2.error, None);
            assert_eq!(
                r2.metrics.restored_checkpoint_id.load(Ordering::Relaxed),
                2,
                "{query}: parallelism {first} then {second}"
            );
            // One header line (the first run may have released nothing).
            let both = match r1.csv.is_empty() {
                true => r2.csv.clone(),
                false => format!("{}{}", r1.csv, body(&r2.csv)),
            };
            assert_eq!(
                folded(&both),
                expected,
                "{query}: parallelism {first} then {second}"
            );
            let _ = std::fs::remove_dir_all(&chk);
        }
    }
}

/// Every stateful operator (window, session, updating aggregate, MATCH_RECOGNIZE, join, OVER,
/// Top-N) writes its keyed state in the one layout of `state::snapshot`: `key_group`
/// (UInt32, below the max parallelism), then the key columns `key_0`... (here the key `k`, 0..=4), then
/// its own state columns; and each subtask holds only the key groups it owns.
#[test]
fn every_stateful_operator_snapshots_in_the_common_layout() {
    use sluice::arrow::array::{Array, AsArray};
    use sluice::arrow::datatypes::{DataType, Int32Type, UInt32Type};
    for (query, sink, state_column) in [
        (TUMBLE_QUERY, Some(TUMBLE_SINK), "window_start"),
        (SESSION_QUERY, Some(SESSION_SINK), "session_start"),
        (MR_QUERY, Some(MR_SINK), "kind"),
        (GROUP_QUERY, None, "rows"),
        (APPEND_JOIN_QUERY, Some(APPEND_JOIN_SINK), "input"),
        (TEMPORAL_JOIN_QUERY, Some(APPEND_JOIN_SINK), "trimmed"),
        (OVER_QUERY, Some(OVER_SINK), "kind"),
        (DEDUP_QUERY, None, "seq"),
    ] {
        let dir = generated_case(query);
        let chk = temp_dir("chk");
        let out = temp_dir("out");
        let mut settings = stop_after(&chk, "200", "source-after-row:300", 2);
        settings.push(("pipeline.max-parallelism", "16".into()));
        let r = run(&dir, &settings, sink.map(|s| (s, out.as_path())));
        assert!(r.error.is_some(), "{query}: the run fails at row 300");
        let job = job_dir(&chk);
        let files: Vec<PathBuf> = std::fs::read_dir(job.join("chk-1"))
            .expect("checkpoint 1")
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                let name = p.file_name().unwrap().to_string_lossy();
                name.starts_with("op-") && name.ends_with(".arrow")
            })
            .collect();
        assert!(!files.is_empty(), "{query}: no state file");
        let mut rows = 0;
        let mut groups_of_subtask: Vec<std::collections::BTreeSet<u32>> = Vec::new();
        for file in &files {
            let bytes = std::fs::read(file).unwrap();
            let reader =
                sluice::arrow::ipc::reader::StreamReader::try_new(bytes.as_slice(), None).unwrap();
            let mut groups = std::collections::BTreeSet::new();
            for batch in reader {
                let batch = batch.unwrap();
                let schema = batch.schema();
                let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                assert_eq!(&names[..2], &["key_group", "key_0"], "{query}: {names:?}");
                assert_eq!(schema.field(0).data_type(), &DataType::UInt32);
                assert!(names.contains(&state_column), "{query}: {names:?}");
                for g in batch.column(0).as_primitive::<UInt32Type>().values() {
                    assert!(*g < 16, "{query}: key group {g}");
                    groups.insert(*g);
                }
                let keys = batch.column(1).as_primitive::<Int32Type>();
                assert_eq!(keys.null_count(), 0, "{query}");
                assert!(keys.values().iter().all(|k| (0..=4).contains(k)), "{query}");
                rows += batch.num_rows();
            }
            groups_of_subtask.push(groups);
        }
        assert!(rows > 0, "{query}: empty state at row 200");
        for (i, a) in groups_of_subtask.iter().enumerate() {
            for b in &groups_of_subtask[i + 1..] {
                assert!(a.is_disjoint(b), "{query}: two subtasks hold one key group");
            }
        }
        let _ = std::fs::remove_dir_all(&chk);
        let _ = std::fs::remove_dir_all(&out);
    }
}

/// The visible part files of a sink directory and their contents.
fn visible_files(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy().to_string();
            (!name.starts_with('.')).then(|| (name, std::fs::read_to_string(&p).unwrap()))
        })
        .collect()
}

/// A new run of a query (no `--from-checkpoint`) starts a new lineage: it never removes
/// the committed output of earlier runs into the same directory, even when it fails. A
/// run resumed from its checkpoint rewinds only its own lineage's output.
#[test]
fn a_new_run_keeps_the_output_of_earlier_runs() {
    let dir = generated_case(TUMBLE_QUERY);
    let expected = failure_free(&dir, TUMBLE_SINK);
    let chk = temp_dir("chk");
    let out = temp_dir("out");
    let first = run(
        &dir,
        &stop_after(&chk, "100,200", "", 1),
        Some((TUMBLE_SINK, out.as_path())),
    );
    assert_eq!(first.error, None);
    let first_files = visible_files(&out);
    let first_rows: Vec<String> =
        data_rows(&first_files.values().cloned().collect::<String>(), false);
    assert_eq!(first_rows, expected);
    // A second, failing run of the same query into the same directory.
    let second = run(
        &dir,
        &stop_after(&chk, "100,200", "source-after-row:300", 1),
        Some((TUMBLE_SINK, out.as_path())),
    );
    assert!(second.error.is_some());
    let after_second = visible_files(&out);
    for (name, text) in &first_files {
        assert_eq!(
            after_second.get(name),
            Some(text),
            "{name} of the first run"
        );
    }
    // Resumed from the second run's checkpoint: the second lineage completes, and the
    // first run's files are still all there.
    let third = run(
        &dir,
        &resume_from(&chk, "latest", 2),
        Some((TUMBLE_SINK, out.as_path())),
    );
    assert_eq!(third.error, None);
    let all = visible_files(&out);
    for (name, text) in &first_files {
        assert_eq!(all.get(name), Some(text), "{name} of the first run");
    }
    let resumed: String = all
        .iter()
        .filter(|(name, _)| !first_files.contains_key(*name))
        .map(|(_, text)| text.clone())
        .collect();
    assert_eq!(
        data_rows(&resumed, false),
        expected,
        "second run + its resume"
    );
    let _ = std::fs::remove_dir_all(&chk);
    let _ = std::fs::remove_dir_all(&out);
}

/// A query's result stream under exactly-once holds rows until the checkpoint after
/// them completes. When the process stops after the checkpoint's manifest is written but
/// before its rows were released, the run that resumes from it releases them first: what
/// both runs delivered is the failure-free result (window rows; for an updating query,
/// the folded changelog).
#[test]
fn held_result_rows_survive_a_stop_between_manifest_and_release() {
    for (query, updating) in [
        (TUMBLE_QUERY, false),
        (GROUP_QUERY, true),
        (MR_QUERY, false),
    ] {
        let dir = generated_case(query);
        let reference = run(&dir, &[], None);
        assert_eq!(reference.error, None);
        let chk = temp_dir("chk");
        let first = run(
            &dir,
            &stop_after(&chk, "100,200", "after-manifest:2", 1),
            None,
        );
        assert!(first.error.is_some(), "{query}: stops after manifest 2");
        let second = run(&dir, &resume_from(&chk, "latest", 2), None);
        assert_eq!(second.error, None);
        assert_eq!(
            second
                .metrics
                .restored_checkpoint_id
                .load(Ordering::Relaxed),
            2,
            "{query}"
        );
        let both = format!("{}{}", first.csv, body(&second.csv));
        if updating {
            assert_eq!(folded(&both), folded(&reference.csv), "{query}");
        } else {
            assert_eq!(
                data_rows(&both, true),
                data_rows(&reference.csv, true),
                "{query}"
            );
        }
        // Resumed again from the same checkpoint, whose rows were released: they do not
        // come again (what this run delivers is what the second delivered after them).
        let chk2 = job_dir(&chk).join("chk-2").display().to_string();
        let third = run(&dir, &resume_from(&chk, &chk2, 1), None);
        assert_eq!(third.error, None);
        let mut rest = data_rows(&second.csv, true);
        for row in data_rows(&third.csv, true) {
            let at = rest.iter().position(|r| *r == row);
            assert!(
                at.is_some(),
                "{query}: {row} was not delivered after the checkpoint"
            );
            rest.remove(at.unwrap());
        }
        assert!(
            !rest.is_empty(),
            "{query}: no rows were held at checkpoint 2"
        );
        let _ = std::fs::remove_dir_all(&chk);
    }
}

/// A failure in the last steps of a job (after the final checkpoint's manifest, before
/// its commit; between two of its commits) restarts the job like any
/// other failure: the restart restores the final checkpoint, commits what it holds and
/// replays nothing, so the sink holds each row once. When the final checkpoint cannot be
/// written, nothing is committed: the restart restores the last periodic one (2) and
/// replays the end.
#[test]
fn a_failure_after_the_final_manifest_restarts_and_commits_once() {
    let dir = generated_case(TUMBLE_QUERY);
    let expected = failure_free(&dir, TUMBLE_SINK);
    for (points, parallelism, restored) in [
        ("after-manifest:3", 1, 3),
        ("mid-commit:3", 2, 3),
        ("upload:3", 2, 2),
    ] {
        let mut settings = base_settings(&unique("final"));
        settings.push(("parallelism.default", parallelism.to_string()));
        settings.push(("sluice.test.checkpoint-after-rows", "100,200".into()));
        settings.push(("sluice.test.failpoints", points.into()));
        let out = temp_dir("final");
        let r = run(&dir, &settings, Some((TUMBLE_SINK, out.as_path())));
        assert_eq!(r.error, None, "{points}");
        assert_eq!(data_rows(&r.csv, false), expected, "{points}");
        assert_eq!(JobMetrics::get(&r.metrics.restarts), 1, "{points}");
        assert_eq!(
            r.metrics.restored_checkpoint_id.load(Ordering::Relaxed),
            restored,
            "{points}: the checkpoint the restart restored"
        );
        let _ = std::fs::remove_dir_all(&out);
    }
}

/// The error that starting `query` (after `settings`, with the tables of `dir`) fails with.
fn start_error(dir: &Path, settings: &[(&str, String)], query: &str) -> String {
    let mut engine = Engine::new(EngineConfig {
        working_dir: Some(dir.to_path_buf()),
        ..Default::default()
    });
    let mut sql = settings_sql(settings);
    let text = std::fs::read_to_string(dir.join("query.sql")).expect("query.sql");
    let (ddl, _) = text.rsplit_once("SELECT").expect("a SELECT");
    sql.push_str(ddl);
    sql.push_str(query);
    let mut error = None;
    for stmt in sluice::parse_script(&sql).expect("parses") {
        if let Err(e) = engine.execute(&stmt) {
            error = Some(e.to_string());
        }
    }
    error.expect("the query does not start")
}

/// Resuming another query from a checkpoint fails before reading a row, and says why:
/// by `latest` (each query has its own directory) and by an explicit path.
#[test]
fn another_querys_checkpoint_is_refused_clearly() {
    let dir = generated_case(TUMBLE_QUERY);
    let chk = temp_dir("chk");
    let r = run(
        &dir,
        &stop_after(&chk, "100,200", "source-after-row:300", 1),
        None,
    );
    assert!(r.error.is_some());
    let latest = start_error(&dir, &resume_from(&chk, "latest", 1), GROUP_QUERY);
    assert!(
        latest.contains("no complete checkpoint of this query")
            && latest.contains("a table's 'WITH' options"),
        "{latest}"
    );
    let path = job_dir(&chk).join("chk-2").display().to_string();
    let by_path = start_error(&dir, &resume_from(&chk, &path, 1), GROUP_QUERY);
    assert!(
        by_path.contains("checkpoint 2 was taken by another query")
            && by_path.contains("plan fingerprint")
            && !by_path.contains("Sluice 0"),
        "{by_path}"
    );
    let _ = std::fs::remove_dir_all(&chk);
}

/// Held rows released by a resumed run show `TIMESTAMP_LTZ` values in the resuming
/// session's time zone, like every other row of that run.
#[test]
fn held_rows_show_in_the_resuming_sessions_time_zone() {
    let query = "SELECT k, window_start, MAX(TO_TIMESTAMP_LTZ(CAST(v AS BIGINT) * 3600, 0)) \
        AS latest FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '5' SECOND)) \
        GROUP BY k, window_start, window_end";
    let dir = generated_case(query);
    let tokyo = |mut s: Vec<(&'static str, String)>| {
        s.push(("table.local-time-zone", "Asia/Tokyo".into()));
        s
    };
    let reference = run(&dir, &tokyo(Vec::new()), None);
    let chk = temp_dir("chk");
    let mut first_settings = stop_after(&chk, "100,200", "after-manifest:2", 1);
    first_settings.push(("table.local-time-zone", "UTC".into()));
    let first = run(&dir, &first_settings, None);
    assert!(first.error.is_some());
    let second = run(&dir, &tokyo(resume_from(&chk, "latest", 1)), None);
    assert_eq!(second.error, None);
    let all = data_rows(&reference.csv, true);
    let resumed = data_rows(&second.csv, true);
    assert!(resumed.len() > 2);
    for row in &resumed {
        assert!(all.contains(row), "{row} is not shown in Tokyo time");
    }
    let _ = std::fs::remove_dir_all(&chk);
}

/// Held rows released at a job's start do not block the caller: an application that
/// starts the resumed job from async code (inside a tokio runtime) gets them first.
#[test]
fn held_rows_are_released_to_a_job_started_from_async_code() {
    let dir = generated_case(TUMBLE_QUERY);
    let reference = run(&dir, &[], None);
    let chk = temp_dir("chk");
    let first = run(
        &dir,
        &stop_after(&chk, "100,200", "after-manifest:2", 1),
        None,
    );
    assert!(first.error.is_some());
    let mut sql = settings_sql(&resume_from(&chk, "latest", 1));
    let text = std::fs::read_to_string(dir.join("query.sql")).unwrap();
    sql.push_str(&text);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let batches = runtime.block_on(async {
        use sluice::Stream;
        let mut engine = Engine::new(EngineConfig {
            working_dir: Some(dir.clone()),
            ..Default::default()
        });
        let mut job = None;
        for stmt in sluice::parse_script(&sql).unwrap() {
            if let StatementResult::Query(j) = engine.execute(&stmt).unwrap() {
                job = Some(j);
            }
        }
        let mut job = job.expect("the query runs");
        let mut batches = Vec::new();
        while let Some(b) =
            std::future::poll_fn(|cx| std::pin::Pin::new(&mut job).poll_next(cx)).await
        {
            batches.push(b.unwrap());
        }
        batches
    });
    let both = format!("{}{}", first.csv, body(&rows_as_csv(&batches)));
    assert_eq!(data_rows(&both, true), data_rows(&reference.csv, true));
    let _ = std::fs::remove_dir_all(&chk);
}

/// A restart that finds no checkpoint to restore (the one it had is damaged) replays
/// from the beginning, so it first removes what its own run committed: the committed
/// output then equals the failure-free output, with no row twice.
#[test]
fn a_restart_from_the_beginning_rewinds_the_runs_committed_output() {
    let dir = generated_case(TUMBLE_QUERY);
    let expected = failure_free(&dir, TUMBLE_SINK);
    let chk = temp_dir("chk");
    let out = temp_dir("out");
    let settings = vec![
        ("execution.checkpointing.dir", chk.display().to_string()),
        ("sluice.test.checkpoint-after-rows", "100".into()),
        ("sluice.test.failpoints", "source-after-row:300".into()),
        ("restart-strategy.fixed-delay.attempts", "2".into()),
        ("restart-strategy.fixed-delay.delay", "5 s".into()),
    ];
    // While the restart waits, checkpoint 1 (whose output is committed) loses its manifest.
    let damage = {
        let (chk, out) = (chk.clone(), out.clone());
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
            while std::time::Instant::now() < deadline {
                let committed = std::fs::read_dir(&out).is_ok_and(|d| {
                    d.flatten()
                        .any(|e| e.file_name().to_string_lossy().ends_with("-c1.csv"))
                });
                if committed {
                    // Before or after the failure: either way the restart (5 s later)
                    // finds no checkpoint to restore.
                    let manifest = job_dir(&chk).join("chk-1").join("_manifest.json");
                    std::fs::remove_file(manifest).expect("checkpoint 1's manifest");
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            panic!("checkpoint 1 never committed");
        })
    };
    let r = run(&dir, &settings, Some((TUMBLE_SINK, out.as_path())));
    damage.join().unwrap();
    assert_eq!(r.error, None);
    assert_eq!(r.metrics.restored_checkpoint_id.load(Ordering::Relaxed), 0);
    assert_eq!(data_rows(&r.csv, false), expected);
    let _ = std::fs::remove_dir_all(&chk);
    let _ = std::fs::remove_dir_all(&out);
}

/// The CSV `text` without its header line.
fn body(text: &str) -> &str {
    text.split_once('\n').map_or("", |(_, rest)| rest)
}

/// The checkpoint directory of the only job in `chk`.
fn job_dir(chk: &Path) -> PathBuf {
    std::fs::read_dir(chk)
        .expect("checkpoint dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .expect("a job directory")
}

fn checkpoint_ids(job: &Path) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(job)
        .expect("job dir")
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_string_lossy()
                .strip_prefix("chk-")?
                .parse()
                .ok()
        })
        .collect();
    ids.sort_unstable();
    ids
}

/// A corrupt, incomplete or damaged newest checkpoint is detected and the previous
/// complete one is restored; the sink output that the newest one committed is rewound, so
/// the committed output is still exactly the failure-free one.
#[test]
fn damaged_checkpoints_fall_back_to_the_previous_one() {
    let dir = generated_case(TUMBLE_QUERY);
    let expected = failure_free(&dir, TUMBLE_SINK);
    type Damage = fn(&Path);
    let damages: [(&str, Damage); 3] = [
        ("flipped byte", |chk: &Path| {
            let f = chk.join("op-0-0.arrow");
            let mut bytes = std::fs::read(&f).expect("state file");
            let i = bytes.len() / 2;
            bytes[i] ^= 0xff;
            std::fs::write(&f, bytes).expect("write");
        }),
        ("no manifest", |chk: &Path| {
            std::fs::remove_file(chk.join("_manifest.json")).expect("manifest");
        }),
        ("missing state file", |chk: &Path| {
            std::fs::remove_file(chk.join("op-0-0.arrow")).expect("state file");
        }),
    ];
    for (what, damage) in damages {
        let chk = temp_dir("chk");
        let out = temp_dir("out");
        let settings = stop_after(&chk, "100,200,300", "source-after-row:350", 1);
        let r1 = run(&dir, &settings, Some((TUMBLE_SINK, out.as_path())));
        assert!(r1.error.is_some());
        let job = job_dir(&chk);
        assert_eq!(checkpoint_ids(&job), vec![1, 2, 3], "{what}");
        damage(&job.join("chk-3"));
        let r2 = run(
            &dir,
            &resume_from(&chk, "latest", 1),
            Some((TUMBLE_SINK, out.as_path())),
        );
        assert_eq!(r2.error, None, "{what}");
        assert_eq!(
            r2.metrics.restored_checkpoint_id.load(Ordering::Relaxed),
            2,
            "{what}: restored the previous complete checkpoint"
        );
        assert_eq!(data_rows(&r2.csv, false), expected, "{what}: exactly once");
        let _ = std::fs::remove_dir_all(&chk);
        let _ = std::fs::remove_dir_all(&out);
    }
}

/// Only the newest `num-retained` complete checkpoints stay; checkpoints that failed to
/// upload leave nothing behind; a named checkpoint path restores.
#[test]
fn retention_and_restore_by_path() {
    let dir = generated_case(TUMBLE_QUERY);
    let expected = failure_free(&dir, TUMBLE_SINK);
    let chk = temp_dir("chk");
    let out = temp_dir("out");
    let mut settings = stop_after(
        &chk,
        "50,100,150,200,250,300",
        "upload:6,source-after-row:320",
        1,
    );
    settings.push(("execution.checkpointing.num-retained", "2".into()));
    let r1 = run(&dir, &settings, Some((TUMBLE_SINK, out.as_path())));
    assert!(r1.error.is_some());
    assert_eq!(JobMetrics::get(&r1.metrics.checkpoints_completed), 5);
    assert_eq!(JobMetrics::get(&r1.metrics.checkpoints_failed), 1);
    let job = job_dir(&chk);
    assert_eq!(checkpoint_ids(&job), vec![4, 5]);
    let missing = Engine::new(EngineConfig::default())
        .collect(&format!(
            "SET 'execution.state-recovery.path' = '{}';\n{}",
            job.join("chk-1").display(),
            std::fs::read_to_string(dir.join("query.sql")).unwrap()
        ))
        .expect_err("checkpoint 1 was pruned");
    assert!(
        missing
            .to_string()
            .contains("chk-1/_manifest.json' does not exist"),
        "{missing}"
    );
    let path = job.join("chk-5").display().to_string();
    let r2 = run(
        &dir,
        &resume_from(&chk, &path, 2),
        Some((TUMBLE_SINK, out.as_path())),
    );
    assert_eq!(r2.error, None);
    assert_eq!(data_rows(&r2.csv, false), expected);
}

/// Checkpoints on S3-compatible storage (`s3://bucket/prefix`, endpoint and credentials
/// from `AWS_*` variables): `.ci/run` starts a local `moto` server and sets
/// `SLUICE_TEST_S3_BUCKET`. The exactly-once scenario of case 028 point 2 and a restore
/// in a new engine both go through it.
#[test]
fn checkpoints_on_s3() {
    let Ok(bucket) = std::env::var("SLUICE_TEST_S3_BUCKET") else {
        eprintln!("checkpoints_on_s3: SLUICE_TEST_S3_BUCKET is not set (.ci/run sets it); skipped");
        return;
    };
    let url = format!("s3://{bucket}/{}", unique("chk"));
    let dir = generated_case(TUMBLE_QUERY);
    let expected = failure_free(&dir, TUMBLE_SINK);
    // Restarts inside the job.
    let out = temp_dir("out");
    let mut settings = base_settings("unused");
    settings[0].1 = url.clone();
    settings.push(("sluice.test.checkpoint-after-rows", "100,200".into()));
    settings.push(("sluice.test.failpoints", "source-after-row:250".into()));
    let r = run(&dir, &settings, Some((TUMBLE_SINK, out.as_path())));
    assert_eq!(r.error, None);
    assert_eq!(JobMetrics::get(&r.metrics.restarts), 1);
    assert_eq!(r.metrics.restored_checkpoint_id.load(Ordering::Relaxed), 2);
    assert_eq!(data_rows(&r.csv, false), expected);
    // A new engine resumes from the bucket.
    let out2 = temp_dir("out");
    let url2 = format!("s3://{bucket}/{}", unique("chk"));
    let mut first = stop_after(Path::new("unused"), "100,200", "source-after-row:300", 2);
    first[0].1 = url2.clone();
    let r1 = run(&dir, &first, Some((TUMBLE_SINK, out2.as_path())));
    assert!(r1.error.is_some());
    let mut second = resume_from(Path::new("unused"), "latest", 3);
    second[0].1 = url2;
    let r2 = run(&dir, &second, Some((TUMBLE_SINK, out2.as_path())));
    assert_eq!(r2.error, None);
    assert_eq!(r2.metrics.restored_checkpoint_id.load(Ordering::Relaxed), 2);
    assert_eq!(data_rows(&r2.csv, false), expected);
}

/// `SELECT k, COUNT(*) AS n FROM ev GROUP BY k` over a `channel` table `ev (k STRING)`,
/// with `settings` (SET statements) and processing time on a manual clock: the clock, a
/// function that sends one batch of keys, and the running job.
fn counting_job_on_a_manual_clock(
    settings: &str,
) -> (
    sluice::ProcessingClock,
    impl Fn(&[&str]),
    sluice::RunningJob,
) {
    use sluice::arrow::array::StringArray;
    use sluice::arrow::datatypes::{DataType, Field, Schema};
    let clock = sluice::ProcessingClock::manual(0);
    let mut engine = Engine::new(EngineConfig {
        clock: clock.clone(),
        ..Default::default()
    });
    engine
        .execute_script(&format!(
            "{settings} CREATE TABLE ev (k STRING) WITH ('connector' = 'channel');"
        ))
        .unwrap();
    let ev = engine.channel_source("ev");
    let StatementResult::Query(job) = engine
        .sql("SELECT k, COUNT(*) AS n FROM ev GROUP BY k")
        .unwrap()
    else {
        panic!("a query")
    };
    let schema = std::sync::Arc::new(Schema::new(vec![Field::new("k", DataType::Utf8, true)]));
    let send = move |keys: &[&str]| {
        let keys = StringArray::from(keys.to_vec());
        ev.send(RecordBatch::try_new(schema.clone(), vec![std::sync::Arc::new(keys)]).unwrap())
            .unwrap();
    };
    (clock, send, job)
}

/// `'table.exec.state.ttl'`: a key idle for longer than the TTL (processing time) is
/// forgotten, so its next row starts a fresh count (emitted as a new `+I`, as Flink does);
/// a key seen more often than the TTL keeps its state. Processing time is a manual clock
/// the test sets, and each batch's changes are read before the clock moves on, so the
/// outcome never depends on how fast the machine is.
#[test]
fn state_ttl_expires_idle_keys() {
    let (clock, send, mut job) =
        counting_job_on_a_manual_clock("SET 'table.exec.state.ttl' = '1 s';");
    // Sends one batch at processing time `at_ms` and returns its changes as `op,k,n`.
    let mut step = |at_ms: i64, keys: &[&str]| -> Vec<String> {
        clock.set_ms(at_ms);
        send(keys);
        let batch = job.blocking_next().expect("the batch's changes").unwrap();
        let mut changes: Vec<String> = common::slt_rows(&[batch])
            .into_iter()
            .map(|r| r.join(","))
            .collect();
        changes.sort();
        changes
    };
    assert_eq!(step(0, &["rare", "often"]), ["+I,often,1", "+I,rare,1"]);
    // `often` every 500 ms (never idle a whole second); `rare` idles 3 s.
    for i in 1..=6 {
        assert_eq!(
            step(i * 500, &["often"]),
            [format!("+U,often,{}", i + 1), format!("-U,often,{i}")]
        );
    }
    // `rare` was forgotten: a fresh count, a new `+I`; `often` kept its count.
    assert_eq!(step(3_100, &["rare"]), ["+I,rare,1"]);
    assert_eq!(step(3_400, &["often"]), ["+U,often,8", "-U,often,7"]);
    // Exactly the TTL idle is not yet expired (expired: idle longer than the TTL).
    assert_eq!(step(4_100, &["rare"]), ["+U,rare,2", "-U,rare,1"]);
}

/// Processing-time timers: with `'table.exec.state.ttl'`, idle groups are forgotten when
/// processing time passes the TTL even if no row arrives (the aggregate's timer wakes its
/// task). Observed through a checkpoint taken after the manual clock moved: its snapshot of
/// the aggregate holds no group. Without a row after the clock moved, only the timer can
/// have forgotten them.
#[test]
fn state_ttl_forgets_idle_keys_without_new_input() {
    let chk = temp_dir("ttl-timer");
    let (clock, send, mut job) = counting_job_on_a_manual_clock(&format!(
        "SET 'table.exec.state.ttl' = '1 s';
         SET 'execution.checkpointing.interval' = '1 h';
         SET 'execution.checkpointing.mode' = 'AT_LEAST_ONCE';
         SET 'execution.checkpointing.dir' = '{}';",
        chk.display()
    ));
    send(&["x", "y", "z"]);
    let changes = job.blocking_next().expect("the changes").unwrap();
    assert_eq!(changes.num_rows(), 3, "+I for x, y and z");
    // The groups' rows in checkpoint `id`'s snapshot of the aggregate.
    let group_rows = |job: &sluice::RunningJob| -> u64 {
        let id = job.checkpoint_now().unwrap();
        let location = job
            .wait_for_checkpoint(id, std::time::Duration::from_secs(120))
            .unwrap();
        let manifest: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(Path::new(&location).join("_manifest.json")).unwrap(),
        )
        .unwrap();
        manifest["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["rows"].as_u64().unwrap())
            .sum()
    };
    // Half a TTL later the groups are all there.
    clock.set_ms(500);
    assert_eq!(group_rows(&job), 3);
    // Past the TTL, with no row since: forgotten.
    clock.set_ms(2_000);
    assert_eq!(group_rows(&job), 0);
    job.stop();
    job.join();
    let _ = std::fs::remove_dir_all(&chk);
}

/// A directory `input/` of `files` CSV files (`k,v,ts`, 5 keys) read with
/// `'scan.parallelism' = '<scan>'`. Within each file timestamps rise with disorder below
/// the watermark delay, so no row is ever late, whatever the interleaving of the files:
/// results are deterministic at any source parallelism. File `i` starts `i * offset_ms`
/// later (files do not overlap in time when `offset_ms` > 135 s).
fn parallel_case(query: &str, files: usize, scan: usize, offset_ms: i64) -> PathBuf {
    let dir = temp_dir("par");
    std::fs::create_dir_all(dir.join("input")).unwrap();
    let mut rng = Rng::new(7);
    for f in 0..files {
        let mut csv = String::from("k,v,ts\n");
        let mut t: i64 = 1_700_000_000_000 + f as i64 * offset_ms;
        for _ in 0..150 {
            t += rng.range(0, 900) as i64;
            let ts = t - rng.range(0, 800) as i64; // delay is 1 s: never late
            csv.push_str(&format!(
                "{},{},{}\n",
                rng.range(0, 4),
                rng.range(1, 100),
                sluice::format_timestamp_ms(ts)
            ));
        }
        std::fs::write(dir.join(format!("input/part-{f}.csv")), csv).unwrap();
    }
    let ddl = format!(
        "CREATE TABLE events (k INT, v INT, ts TIMESTAMP(3), \
         WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ('connector' = 'filesystem', \
         'path' = 'input', 'format' = 'csv', 'csv.header' = 'true', 'scan.parallelism' = '{scan}');\n"
    );
    std::fs::write(dir.join("query.sql"), format!("{ddl}{query}")).unwrap();
    dir
}

/// Parallel sources: every source and keyed parallelism gives the single-source result,
/// and so does exactly-once recovery with random failures (barriers aligned over the
/// source subtasks, per-source offsets restored).
#[test]
fn parallel_sources_with_failures() {
    let n = seeds(4);
    let mut failures = Vec::new();
    for (query, sink) in [(TUMBLE_QUERY, TUMBLE_SINK), (SESSION_QUERY, SESSION_SINK)] {
        // Files one after another in event time: read in sequence nothing is late either.
        let single = parallel_case(query, 3, 1, 200_000);
        let expected = failure_free(&single, sink);
        assert!(expected.len() > 10);
        for scan in [2, 3] {
            let dir = parallel_case(query, 3, scan, 200_000);
            let out = temp_dir("out");
            let plain = run(&dir, &[], Some((sink, out.as_path())));
            if data_rows(&plain.csv, false) != expected {
                failures.push(format!("{query}: scan.parallelism {scan} differs"));
            }
            for seed in 0..n {
                let mut rng = Rng::new(seed + 4000 + scan as u64);
                let settings = mode_settings(&unique("par"), "EXACTLY_ONCE", &mut rng);
                let out = temp_dir("out");
                let r = run(&dir, &settings, Some((sink, out.as_path())));
                if r.error.is_some() || data_rows(&r.csv, false) != expected {
                    failures.push(format!(
                        "{query}: scan {scan}, seed {seed} {settings:?}: error {:?}, {} rows, expected {}",
                        r.error,
                        data_rows(&r.csv, false).len(),
                        expected.len()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `'table.exec.source.idle-timeout'`: a source subtask that has sent nothing for the
/// timeout (its watchdog declares it idle) no longer holds the watermark back. Source
/// subtask 1 stalls at the start (a test hook); its file is an hour older than subtask
/// 0's. Without the timeout the watermark waits for it (stalled 1.5 s) and nothing is
/// late; with a 100 ms timeout subtask 0's windows fire meanwhile (subtask 1 stalls until
/// the job has written a window) and every row of the stalled file arrives late.
#[test]
fn idle_source_does_not_hold_the_watermark_back() {
    let dir = parallel_case(TUMBLE_QUERY, 2, 2, 0);
    // Make file 1 ten minutes older than file 0.
    let f1 = dir.join("input/part-1.csv");
    let text = std::fs::read_to_string(&f1)
        .unwrap()
        .replace("2023-11-14 22:", "2023-11-14 21:");
    std::fs::write(&f1, text).unwrap();
    let rows_in_file_1 = 150;
    for (timeout, expected_late) in [(None, 0), (Some("100 ms"), rows_in_file_1)] {
        let mut settings = Vec::new();
        match timeout {
            // Without a timeout nothing fires while subtask 1 stalls: a fixed stall.
            None => settings.push(("sluice.test.source-stall", "1:1500 ms".to_string())),
            Some(t) => {
                settings.push(("sluice.test.source-stall", "1:until-output".to_string()));
                settings.push(("table.exec.source.idle-timeout", t.to_string()));
            }
        }
        let out = temp_dir("out");
        let r = run(&dir, &settings, Some((TUMBLE_SINK, out.as_path())));
        assert_eq!(r.error, None);
        assert_eq!(
            JobMetrics::get(&r.metrics.late_rows_dropped),
            expected_late,
            "idle timeout {timeout:?}"
        );
    }
}

/// A restore brings back the watermark each stage had reached, not only the sources':
/// with source subtask 1 idle (stalled), subtask 0's watermark fired window 00:00:00
/// before the checkpoint. After a failure and restore, subtask 1 is not idle yet, so the
/// gate caps subtask 0's rows at subtask 1's watermark (none); a late row of subtask 0
/// for that window must still be dropped, not recreate the window (found by review).
#[test]
fn a_restore_keeps_the_watermark_an_idle_input_let_advance() {
    let dir = temp_dir("idle-restore");
    std::fs::create_dir_all(dir.join("input")).unwrap();
    // Enough rows that subtask 1 is idle (after 100 ms) long before subtask 0 reaches
    // the checkpoint after row 200 000.
    // Row 200 005 of subtask 0 is late (00:00:01, long after window 00:00:00 fired).
    let mut a = String::new();
    for i in 0..300_000 {
        if i == 200_004 {
            a.push_str("1,2024-01-01 00:00:01\n");
        }
        a.push_str(&format!(
            "1,2024-01-01 {:02}:{:02}:{:02}\n",
            i / 36_000,
            (i / 600) % 60,
            (i / 10) % 60
        ));
    }
    std::fs::write(dir.join("input/a.csv"), a).unwrap();
    std::fs::write(dir.join("input/b.csv"), "2,2024-01-01 09:00:00\n").unwrap();
    std::fs::write(
        dir.join("query.sql"),
        "CREATE TABLE events (k INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) \
         WITH ('connector' = 'filesystem', 'path' = 'input', 'format' = 'csv', 'scan.parallelism' = '2');\n\
         SELECT window_start, COUNT(*) AS c FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '5' SECOND)) \
         GROUP BY window_start, window_end",
    )
    .unwrap();
    let hooks = |fail: &str| {
        let mut s = base_settings(&unique("idle-restore"));
        // First run: subtask 0 starts after 500 ms, when subtask 1 is long idle (after
        // 100 ms), so window 00:00:00 fires as soon as subtask 0's watermark passes it,
        // whatever the load. After the restart subtask 0 starts at once: its late row comes
        // while subtask 1 is stalled but not yet idle.
        s.push((
            "sluice.test.source-stall",
            "1:1500 ms,0:500 ms:first".into(),
        ));
        s.push(("table.exec.source.idle-timeout", "100 ms".into()));
        s.push(("sluice.test.checkpoint-after-rows", "200000".into()));
        if !fail.is_empty() {
            s.push(("sluice.test.failpoints", fail.into()));
        }
        s
    };
    let reference = run_batches(&dir, &hooks(""), None, 1000);
    let recovered = run_batches(&dir, &hooks("source-after-row:200001"), None, 1000);
    assert_eq!(JobMetrics::get(&recovered.metrics.restarts), 1);
    assert_eq!(
        recovered
            .metrics
            .restored_checkpoint_id
            .load(Ordering::Relaxed),
        1
    );
    let rows = data_rows(&reference.csv, true);
    assert!(
        rows.iter().any(|r| r.starts_with("2024-01-01 00:00:00,")),
        "{rows:?}"
    );
    assert_eq!(data_rows(&recovered.csv, true), rows);
}

/// Barriers pass through exchanges: an aggregate over an aggregate at parallelism 2 (two
/// stages) completes checkpoints and restores from one (found by review: the second
/// stage never saw the barrier, so no checkpoint completed).
#[test]
fn checkpoints_complete_across_exchanges() {
    let dir = generated_case(AGG_OF_AGG_QUERY);
    let reference = run(&dir, &[], None);
    let mut settings = base_settings(&unique("stages"));
    settings.push(("parallelism.default", "2".into()));
    settings.push(("sluice.test.checkpoint-after-rows", "100,200".into()));
    settings.push(("sluice.test.failpoints", "source-after-row:250".into()));
    let r = run(&dir, &settings, None);
    assert_eq!(r.error, None);
    assert_eq!(JobMetrics::get(&r.metrics.checkpoints_completed), 2);
    assert_eq!(r.metrics.restored_checkpoint_id.load(Ordering::Relaxed), 2);
    assert_eq!(folded(&r.csv), folded(&reference.csv));
}

/// A job started from an older checkpoint by path, failing before its own first
/// checkpoint, restarts from that checkpoint, never from a newer one an earlier run left
/// in the same directory (found by review).
#[test]
fn a_restart_never_restores_another_runs_checkpoint() {
    let dir = generated_case(TUMBLE_QUERY);
    let expected = failure_free(&dir, TUMBLE_SINK);
    let chk = temp_dir("chk");
    let out = temp_dir("out");
    let first = stop_after(&chk, "50,100,150,200", "source-after-row:250", 1);
    assert!(run(&dir, &first, Some((TUMBLE_SINK, out.as_path())))
        .error
        .is_some());
    let job = job_dir(&chk);
    assert_eq!(checkpoint_ids(&job), vec![2, 3, 4]);
    // From checkpoint 2 (after row 100); dies at row 120 once, before checkpoint 5.
    let mut second = resume_from(&chk, &job.join("chk-2").display().to_string(), 1);
    second.push(("sluice.test.failpoints", "source-after-row:120".into()));
    second.push(("restart-strategy.fixed-delay.delay", "0 ms".into()));
    let r = run(&dir, &second, Some((TUMBLE_SINK, out.as_path())));
    assert_eq!(r.error, None);
    assert_eq!(JobMetrics::get(&r.metrics.restarts), 1);
    assert_eq!(r.metrics.restored_checkpoint_id.load(Ordering::Relaxed), 2);
    assert_eq!(data_rows(&r.csv, false), expected);
}

/// The embedding API: `stop_with_checkpoint` on a running job (a paced datagen stream
/// into a window aggregate and the two-phase-commit sink), then a new
/// engine restores from the returned location and finishes. The committed output is every
/// window exactly once: window `w` (1 s) holds ids `100w .. 100w + 99` of 1..=20000.
#[test]
fn stop_with_checkpoint_then_resume_in_a_new_engine() {
    let out = temp_dir("savepoint-out");
    let store = unique("savepoint");
    let script = |restore: Option<&str>| {
        format!(
            "SET 'table.local-time-zone' = 'UTC';
             SET 'execution.checkpointing.interval' = '1 h';
             SET 'execution.checkpointing.dir' = 'memory://{store}';
             {}
             CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
               WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen',
               'rows-per-second' = '2000', 'fields.id.kind' = 'sequence',
               'fields.id.start' = '1', 'fields.id.end' = '20000');
             CREATE TABLE out (window_start TIMESTAMP(3), n BIGINT, s BIGINT)
               WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
             INSERT INTO out SELECT window_start, COUNT(*), SUM(id)
               FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '1' SECOND))
               GROUP BY window_start, window_end",
            restore
                .map(|p| format!("SET 'execution.state-recovery.path' = '{p}';"))
                .unwrap_or_default(),
            out.display()
        )
    };
    let run_until = |sql: &str, stop: bool| -> Option<String> {
        let mut engine = Engine::new(EngineConfig::default());
        let mut location = None;
        for stmt in &sluice::parse_script(sql).expect("parses") {
            if let StatementResult::Insert(mut job) = engine.execute(stmt).expect("starts") {
                if stop {
                    // Stop once rows have come in (the source takes 10 s for all of them):
                    // waiting for rows, not for a fixed time, holds on a busy machine.
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
                    while JobMetrics::get(&job.metrics.rows_in) < 500 {
                        assert!(std::time::Instant::now() < deadline, "no rows came in");
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    location = Some(
                        job.stop_with_checkpoint(std::time::Duration::from_secs(120))
                            .expect("a savepoint"),
                    );
                }
                while let Some(b) = job.blocking_next() {
                    b.expect("no failure");
                }
                job.join();
            }
        }
        location
    };
    let location = run_until(&script(None), true).expect("stopped with a checkpoint");
    assert!(location.contains("/chk-"), "{location}");
    let partial = data_rows(&committed_files(&out), false).len();
    assert!(
        partial > 0 && partial < 201,
        "stopped mid-way: {partial} windows"
    );
    run_until(&script(Some(&location)), false);
    let mut expected: Vec<String> = (0..=200i64)
        .map(|w| {
            let (lo, hi) = ((w * 100).max(1), (w * 100 + 99).min(20_000));
            let n = hi - lo + 1;
            let sum = (lo + hi) * n / 2;
            format!("{},{n},{sum}", sluice::format_timestamp_ms(w * 1000))
        })
        .collect();
    expected.sort();
    assert_eq!(data_rows(&committed_files(&out), false), expected);
}

/// Interval, window and temporal joins keep only the rows their bounds, open windows or
/// versions need: over a generated stream of 20,000 rows (10 ms apart, ten keys), the
/// join's state never holds more than a few hundred rows, and at the end none (a temporal
/// join: the last version of each of its ten keys). An interval join of ±1 s keeps a row
/// until the watermark passes its last partner time (about 100 rows per input per second
/// of event time); a window join of 1-second windows keeps the rows of the open window; a
/// temporal join the probes the watermark has not passed and, per key, the versions from
/// the last one at or before the watermark.
#[test]
fn time_bounded_joins_keep_bounded_state() {
    let table = "CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3), \
        WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen', 'number-of-rows' = '20000', \
        'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '20000');";
    let queries = [
        "SELECT a.id, b.id FROM seq a JOIN seq b ON a.id % 10 = b.id % 10 \
         AND b.ts BETWEEN a.ts - INTERVAL '1' SECOND AND a.ts + INTERVAL '1' SECOND",
        "SELECT a.id, b.id FROM \
         (SELECT * FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '1' SECOND))) a JOIN \
         (SELECT * FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '1' SECOND))) b \
         ON a.id % 10 = b.id % 10 AND a.window_start = b.window_start \
         AND a.window_end = b.window_end AND a.id < b.id",
        // Each row joins the latest row of its (random) key at or before it: itself.
        "SELECT a.id, b.id FROM ver a JOIN ver FOR SYSTEM_TIME AS OF a.ts AS b ON a.k = b.k",
    ];
    // The same stream with a random key of ten, a versioned table by it.
    let versions = "CREATE TABLE ver (id BIGINT, k INT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3), \
        WATERMARK FOR ts AS ts, PRIMARY KEY (k) NOT ENFORCED) WITH ('connector' = 'datagen', \
        'number-of-rows' = '20000', 'fields.id.kind' = 'sequence', 'fields.id.start' = '1', \
        'fields.id.end' = '20000', 'fields.k.min' = '0', 'fields.k.max' = '9');";
    for query in queries {
        let mut engine = Engine::new(EngineConfig::default());
        let statements = sluice::parse_script(&format!("{table}\n{versions}\n{query};")).unwrap();
        let mut metrics = None;
        let mut rows = 0;
        for stmt in &statements {
            if let StatementResult::Query(mut job) = engine.execute(stmt).unwrap() {
                while let Some(b) = job.blocking_next() {
                    rows += b.unwrap().num_rows();
                }
                metrics = Some(std::sync::Arc::clone(&job.metrics));
                job.join();
            }
        }
        let state = metrics.expect("a job").state_rows();
        assert_eq!(state.len(), 1, "{query}: one stateful operator: {state:?}");
        let (now, peak) = *state.values().next().unwrap();
        assert!(rows > 1000, "{query}: {rows} rows out");
        if query.contains("SYSTEM_TIME") {
            assert_eq!(rows, 20_000, "{query}: every row joins itself");
        }
        let left = if query.contains("SYSTEM_TIME") { 10 } else { 0 };
        assert!(now <= left, "{query}: {now} state rows left at the end");
        assert!(
            peak > 0 && peak < 2_000,
            "{query}: peak state {peak} rows of 40,000 in"
        );
    }
}
