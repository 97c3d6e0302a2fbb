//! Every Nexmark query in `sql-examples/nexmark/` over the conformance stream (100,000
//! events at 1,000 events per second from the built-in `nexmark` connector) gives Apache
//! Flink 2.3's final table on the same events (`tests/nexmark/derive_flink.py`; Flink reads
//! the events from a file Sluice writes). A small result is compared whole
//! (`tests/nexmark/expected/qN.csv.gz`), a large one by its row count and the SHA-256 of its
//! sorted rows (`qN.digest`). q6 is refused by both engines; q12 (processing time) is
//! checked by its total count.

#[path = "common/mod.rs"]
mod common;

use std::io::Read;
use std::path::{Path, PathBuf};

use common::{compare_csv_multiset, rows_as_csv};
use sha2::{Digest, Sha256};
use sluice::arrow::array::{Array, Int64Array, RecordBatch};
use sluice::{Engine, EngineConfig};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn nexmark_dir() -> PathBuf {
    root().join("sql-examples/nexmark")
}

/// The conformance stream's settings in place of the examples' (the same substitution is
/// in `derive_flink.py`).
fn conformance(sql: &str) -> String {
    sql.replace("'events.num' = '1000000'", "'events.num' = '100000'")
        .replace(
            "'first-event.rate' = '10000'",
            "'first-event.rate' = '1000'",
        )
        .replace("'next-event.rate' = '10000'", "'next-event.rate' = '1000'")
}

/// The query file with its blackhole sink dropped and its INSERT made the SELECT it
/// inserts, so that the result comes back.
fn query_sql(name: &str) -> String {
    let text = std::fs::read_to_string(nexmark_dir().join(format!("{name}.sql"))).unwrap();
    let text = conformance(&text);
    let mut statements = Vec::new();
    for statement in text.split(";\n") {
        let code: String = statement
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        let code = code.trim();
        if code.is_empty() || code.starts_with("CREATE TABLE nexmark_q") {
            continue;
        }
        let code = match code.strip_prefix("INSERT INTO nexmark_q") {
            Some(rest) => rest.split_once(char::is_whitespace).unwrap().1.to_string(),
            None => code.to_string(),
        };
        statements.push(code);
    }
    statements.join(";\n") + ";\n"
}

fn engine() -> Engine {
    let mut engine = Engine::new(EngineConfig {
        working_dir: Some(root()),
        ..Default::default()
    });
    sluice::nexmark::register_udfs(&mut engine);
    engine
}

/// The query's final table (an updating result folded).
fn final_table(name: &str) -> Vec<RecordBatch> {
    final_table_with(name, "")
}

/// [`final_table`] after the `SET` statements `settings`.
fn final_table_with(name: &str, settings: &str) -> Vec<RecordBatch> {
    let batches = engine()
        .collect(&format!("{settings}{}", query_sql(name)))
        .unwrap_or_else(|e| panic!("{name} failed: {e}"));
    match batches.first() {
        Some(b) if b.schema().field(0).name() == "op" => sluice::format::fold_changelog(&batches)
            .unwrap()
            .into_iter()
            .collect(),
        _ => batches,
    }
}

/// Sorted rows as `derive_flink.py` normalizes them (a timestamp's `.000` dropped).
fn normalized_rows(csv: &str) -> (String, Vec<String>) {
    let mut lines = csv.lines();
    let header = lines.next().unwrap_or_default().to_string();
    let mut rows: Vec<String> = lines
        .map(|l| {
            l.split(',')
                .map(|v| match v.strip_suffix(".000") {
                    Some(t) if v.len() == 23 && v.as_bytes()[10] == b' ' => t,
                    _ => v,
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    rows.sort();
    (header, rows)
}

fn read_gz(path: &Path) -> String {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    text
}

fn check(name: &str) {
    check_table(name, &rows_as_csv(&final_table(name)));
}

/// Compares `actual` (a final table as CSV) with Flink's for query `name`.
fn check_table(name: &str, actual: &str) {
    let actual = actual.to_string();
    let expected = root().join("tests/nexmark/expected");
    let whole = expected.join(format!("{name}.csv.gz"));
    if whole.exists() {
        if let Err(e) = compare_csv_multiset(&read_gz(&whole), &actual) {
            let short: String = e.chars().take(4000).collect();
            panic!("{name}: result differs from Flink's:\n{short}");
        }
        return;
    }
    let digest = std::fs::read_to_string(expected.join(format!("{name}.digest"))).unwrap();
    let field = |key: &str| {
        digest
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key} ")))
            .unwrap()
            .to_string()
    };
    let (header, rows) = normalized_rows(&actual);
    let sha = format!("{:x}", Sha256::digest(rows.join("\n").as_bytes()));
    let sample: Vec<&String> = rows.iter().take(5).collect();
    assert_eq!(
        header,
        field("header"),
        "{name}: columns differ from Flink's"
    );
    assert_eq!(
        rows.len().to_string(),
        field("rows"),
        "{name}: row count differs from Flink's; first rows: {sample:#?}"
    );
    assert_eq!(
        sha,
        field("sha256"),
        "{name}: rows differ from Flink's (same count); first rows: {sample:#?}"
    );
}

macro_rules! conformance_tests {
    ($($test:ident => $name:literal,)*) => {
        $(
            #[test]
            fn $test() {
                check($name);
            }
        )*
    };
}

conformance_tests! {
    q0_pass_through => "q0",
    q1_currency_conversion => "q1",
    q2_selection => "q2",
    q3_local_item_suggestion => "q3",
    q4_average_price_per_category => "q4",
    q5_hot_items => "q5",
    q7_highest_bid => "q7",
    q8_new_users => "q8",
    q9_winning_bids => "q9",
    q10_log_to_file_system => "q10",
    q11_user_sessions => "q11",
    q11_user_sessions_legacy_form => "q11_legacy",
    q13_bounded_side_input_join => "q13",
    q14_calculation => "q14",
    q15_bidding_statistics => "q15",
    q16_channel_statistics => "q16",
    q17_auction_statistics => "q17",
    q18_last_bid => "q18",
    q19_top_10_bids => "q19",
    q20_bids_with_auction => "q20",
    q21_channel_id => "q21",
    q22_url_directories => "q22",
    q23_three_way_join => "q23",
}

/// Exactly-once recovery: queries keeping window, join, aggregate and Top-N state run
/// with checkpoints after events 20,000, 50,000 and 80,000, fail twice (in the source
/// after event 35,000 and 90,000, and once while uploading checkpoint 2), restart at
/// another parallelism from the last complete checkpoint, where the `nexmark` source
/// resumes at the exact event, and still give Flink's final table.
#[test]
fn queries_restored_after_failures_give_flinks_answer() {
    for (name, parallelism) in [("q4", "2,1,2"), ("q5", "1,2,1"), ("q19", "2,2,1")] {
        let settings = format!(
            "SET 'execution.checkpointing.dir' = 'memory://nexmark-{name}-{}';
             SET 'execution.checkpointing.mode' = 'EXACTLY_ONCE';
             SET 'sluice.test.checkpoint-after-rows' = '20000,50000,80000';
             SET 'sluice.test.failpoints' = 'source-after-row:35000,upload:2,source-after-row:90000';
             SET 'sluice.test.restart-parallelism' = '{parallelism}';
             SET 'restart-strategy.fixed-delay.attempts' = '10';
             SET 'restart-strategy.fixed-delay.delay' = '0 ms';\n",
            std::process::id()
        );
        check_table(name, &rows_as_csv(&final_table_with(name, &settings)));
    }
}

/// A split source (`'scan.parallelism'` = 2: each subtask generates every other event, its
/// watermark the smaller of the two) and two subtasks per keyed operator give the same
/// answers: window aggregates and a window join (q5, q7), a regular join (q20) and a
/// session window (q11).
#[test]
fn a_split_source_gives_flinks_answer() {
    for name in ["q5", "q7", "q11", "q20"] {
        let sql = query_sql(name).replacen(
            "'events.num' = '100000'",
            "'events.num' = '100000', 'scan.parallelism' = '2'",
            1,
        );
        assert!(sql.contains("'scan.parallelism' = '2'"), "{name}");
        let batches = engine()
            .collect(&format!("SET 'parallelism.default' = '2';\n{sql}"))
            .unwrap_or_else(|e| panic!("{name} failed: {e}"));
        check_table(name, &rows_as_csv(&batches));
    }
}

/// q6 (a bounded OVER over each seller's winning bids, which change as bids arrive) needs
/// an OVER window that takes retractions: Flink cannot run it (FLINK-19059), nor Sluice; the
/// error says why.
#[test]
fn q6_is_refused_with_the_reason() {
    let err = engine().collect(&query_sql("q6")).unwrap_err().to_string();
    assert!(
        err.contains("OVER window over an updating input") && err.contains("FLINK-19059"),
        "{err}"
    );
}

/// q12 counts bids per bidder in processing-time windows, so its rows depend on how fast
/// the events were read; their total is every bid, which is q0's row count in Flink.
#[test]
fn q12_counts_every_bid_once() {
    let table = final_table("q12");
    let total: i64 = table
        .iter()
        .map(|b| {
            let counts = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
            counts.iter().flatten().sum::<i64>()
        })
        .sum();
    let q0 = std::fs::read_to_string(root().join("tests/nexmark/expected/q0.digest")).unwrap();
    let bids: i64 = q0
        .lines()
        .find_map(|l| l.strip_prefix("rows "))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(total, bids);
}

/// Every query file begins with `ddl.sql`, so each runs alone and all read the same stream.
#[test]
fn every_query_file_begins_with_the_shared_ddl() {
    let ddl = std::fs::read_to_string(nexmark_dir().join("ddl.sql")).unwrap();
    let mut count = 0;
    for entry in std::fs::read_dir(nexmark_dir()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with('q') && name.ends_with(".sql") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(text.starts_with(&ddl), "{name} does not begin with ddl.sql");
            count += 1;
        }
    }
    assert_eq!(count, 25, "q0 to q23 and q11_legacy");
}
