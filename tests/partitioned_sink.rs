//! The filesystem sink of a `PARTITIONED BY` table (Nexmark q10's): rows under
//! `<column>=<value>` directories without the partition columns, values escaped, a NULL
//! value in the default partition, and each complete partition committed with a
//! `_SUCCESS` file. The directory tree is the one Flink 2.3 writes for the same table and
//! rows (../shared/tools/flink-oracle, q10 over tests/slt/data/nexmark_bids.csv); the rows
//! in each partition are checked by hand.

use std::path::{Path, PathBuf};

use sluice::{Engine, EngineConfig, StatementResult};

fn temp_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("sluice-partitioned-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(sql: &str) {
    let mut engine = Engine::new(EngineConfig {
        batch_size: 2,
        ..Default::default()
    });
    for stmt in sluice::parse_script(sql).unwrap() {
        match engine.execute(&stmt).unwrap() {
            StatementResult::Insert(mut job) | StatementResult::Query(mut job) => {
                while let Some(b) = job.blocking_next() {
                    b.unwrap();
                }
                job.join();
            }
            _ => {}
        }
    }
}

/// Every file under `dir`: (relative directory, file name), sorted; hidden files too.
fn tree(dir: &Path) -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            if e.path().is_dir() {
                walk(root, &e.path(), out);
            } else {
                let rel = dir.strip_prefix(root).unwrap().display().to_string();
                out.push((rel, e.file_name().to_string_lossy().to_string()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn q10(out: &Path, settings: &str) -> String {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt/data/nexmark_bids.csv");
    format!(
        "{settings}
        CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
          `dateTime` TIMESTAMP(3), extra STRING, WATERMARK FOR `dateTime` AS `dateTime`)
        WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
        CREATE TABLE fs_sink (auction BIGINT, bidder BIGINT, price BIGINT, `dateTime` TIMESTAMP(3),
          extra STRING, dt STRING, hm STRING) PARTITIONED BY (dt, hm) WITH (
          'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv',
          'sink.partition-commit.trigger' = 'partition-time', 'sink.partition-commit.delay' = '1 min',
          'sink.partition-commit.policy.kind' = 'success-file',
          'partition.time-extractor.timestamp-pattern' = '$dt $hm:00',
          'sink.rolling-policy.rollover-interval' = '1min', 'sink.rolling-policy.check-interval' = '1min');
        INSERT INTO fs_sink SELECT auction, bidder, price, `dateTime`, extra,
          DATE_FORMAT(`dateTime`, 'yyyy-MM-dd'), DATE_FORMAT(`dateTime`, 'HH:mm') FROM bid;",
        data.display(),
        out.display()
    )
}

/// Flink's partitions for q10 over the nine bids.
const PARTITIONS: &[&str] = &[
    "dt=2015-07-15/hm=06%3A00",
    "dt=2015-07-15/hm=07%3A59",
    "dt=2015-07-15/hm=08%3A00",
    "dt=2015-07-15/hm=18%3A59",
    "dt=2015-07-15/hm=19%3A30",
    "dt=2015-07-15/hm=20%3A00",
    "dt=2015-07-16/hm=00%3A10",
    "dt=2015-07-16/hm=12%3A00",
    "dt=2015-07-16/hm=23%3A59",
];

fn check_q10(out: &Path) {
    let files = tree(out);
    let dirs: std::collections::BTreeSet<&str> = files.iter().map(|(d, _)| d.as_str()).collect();
    assert_eq!(
        dirs.into_iter().collect::<Vec<_>>(),
        PARTITIONS,
        "{files:?}"
    );
    for p in PARTITIONS {
        assert!(
            files.iter().any(|(d, f)| d == p && f == "_SUCCESS"),
            "{p} has no success file: {files:?}"
        );
        assert!(
            !files.iter().any(|(d, f)| d == p && f.starts_with('.')),
            "{p} has hidden files left: {files:?}"
        );
    }
    // One bid per partition, without dt and hm (by hand from nexmark_bids.csv).
    let read = |p: &str| -> String {
        files
            .iter()
            .filter(|(d, f)| d == p && f.starts_with("part-"))
            .map(|(d, f)| std::fs::read_to_string(out.join(d).join(f)).unwrap())
            .collect()
    };
    assert_eq!(
        read("dt=2015-07-15/hm=06%3A00"),
        "1002,10,1500000,2015-07-15 06:00:00,xyz\n"
    );
    assert_eq!(
        read("dt=2015-07-15/hm=18%3A59"),
        "2460,7,1200000,2015-07-15 18:59:59,\n"
    );
    assert_eq!(
        read("dt=2015-07-16/hm=23%3A59"),
        "1004,11,1101322,2015-07-16 23:59:59,ccc\n"
    );
}

#[test]
fn nexmark_q10_writes_flinks_partitions() {
    let out = temp_dir("q10");
    run(&q10(&out, ""));
    check_q10(&out);
    // Read back: the partition columns come from the directories (by hand: every bid).
    let mut engine = Engine::new(EngineConfig::default());
    engine
        .execute_script(&format!(
            "CREATE TABLE fs_in (auction BIGINT, bidder BIGINT, price BIGINT, `dateTime` TIMESTAMP(3),
               extra STRING, dt STRING, hm STRING) PARTITIONED BY (dt, hm)
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            out.display()
        ))
        .unwrap();
    let batches = engine
        .collect("SELECT auction, price, dt, hm FROM fs_in WHERE dt = '2015-07-16'")
        .unwrap();
    let mut rows: Vec<String> = Vec::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            rows.push(sluice::format::row_values(b, r).unwrap().join(","));
        }
    }
    rows.sort();
    assert_eq!(
        rows,
        [
            "1004,1101322,2015-07-16,23:59",
            "1004,55000000,2015-07-16,00:10",
            "369,10000,2015-07-16,12:00"
        ]
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// With exactly-once checkpoints, each partition's files and success file are
/// pre-committed at the barriers and committed when checkpoints complete: the same tree.
#[test]
fn partitions_commit_with_checkpoints() {
    let out = temp_dir("q10-chk");
    let chk = temp_dir("q10-store");
    let settings = format!(
        "SET 'execution.checkpointing.dir' = '{}'; SET 'sluice.test.checkpoint-after-rows' = '3,6';",
        chk.display()
    );
    run(&q10(&out, &settings));
    check_q10(&out);
    // Files from the checkpoints and the end (-c1, -c2, -end).
    let names: Vec<String> = tree(&out).into_iter().map(|(_, f)| f).collect();
    assert!(names.iter().any(|f| f.ends_with("-c1.csv")), "{names:?}");
    assert!(names.iter().any(|f| f.ends_with("-end.csv")), "{names:?}");
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&chk);
}

/// A NULL or empty partition value goes to 'partition.default-name'.
#[test]
fn null_values_go_to_the_default_partition() {
    let out = temp_dir("default");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt/data/nexmark_bids.csv");
    run(&format!(
        "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
          `dateTime` TIMESTAMP(3), extra STRING)
        WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
        CREATE TABLE by_extra (auction BIGINT, extra STRING) PARTITIONED BY (extra)
        WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
        INSERT INTO by_extra SELECT auction, extra FROM bid WHERE auction IN (2460, 369, 1001);",
        data.display(),
        out.display()
    ));
    let dirs: std::collections::BTreeSet<String> = tree(&out).into_iter().map(|(d, _)| d).collect();
    // 2460 and 369 have no extra (NULL), 1001 has 'abc'; no policy: no success files.
    assert_eq!(
        dirs.into_iter().collect::<Vec<_>>(),
        ["extra=__DEFAULT_PARTITION__", "extra=abc"]
    );
    assert!(!tree(&out).iter().any(|(_, f)| f == "_SUCCESS"));
    // Read back: the default partition is NULL.
    let mut engine = Engine::new(EngineConfig::default());
    engine
        .execute_script(&format!(
            "CREATE TABLE back (auction BIGINT, extra STRING) PARTITIONED BY (extra)
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            out.display()
        ))
        .unwrap();
    let batches = engine
        .collect("SELECT auction, extra IS NULL AS no_extra FROM back")
        .unwrap();
    let mut rows: Vec<String> = batches
        .iter()
        .flat_map(|b| {
            (0..b.num_rows()).map(move |r| sluice::format::row_values(b, r).unwrap().join(","))
        })
        .collect();
    rows.sort();
    assert_eq!(rows, ["1001,false", "2460,true", "369,true"]);
    let _ = std::fs::remove_dir_all(&out);
}
