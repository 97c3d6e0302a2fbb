//! The exactly-once Kafka sink (`'sink.delivery-guarantee' = 'exactly-once'`) against the
//! broker `scripts/kafka-test-server` starts, with failures injected: in-process failpoints
//! (also in the commit path) and SIGKILL of `sluice run`. What Sluice wrote is read as a
//! `read_committed` reader of a correct broker reads it, from the raw log with its
//! transaction markers (`support::transactional_log`; the test broker itself shows open
//! transactions to `read_committed` readers). Expected rows are worked out by hand.

use std::time::{Duration, Instant};

mod common;
#[path = "kafka/support.rs"]
mod support;

use support::*;

/// The committed values of `topic` (all partitions), sorted; asserts that no transaction
/// was left open.
fn committed_values(topic: &str, partitions: i32) -> Vec<String> {
    let mut values = Vec::new();
    for p in 0..partitions {
        let log = transactional_log(topic, p);
        assert_eq!(
            log.open, 0,
            "{topic}/{p}: messages of transactions left open"
        );
        values.extend(log.committed.into_iter().map(|(_, v)| v));
    }
    values.sort();
    values
}

fn exactly_once(prefix: &str) -> String {
    format!(
        ", 'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = '{}'",
        unique(prefix)
    )
}

#[test]
fn each_row_is_committed_once_across_restarts() {
    let (out, expected) = copy_across_failures("EXACTLY_ONCE", &exactly_once("copy"), 2);
    assert_eq!(committed_values(&out, 2), expected);
}

#[test]
fn exactly_once_settings_that_cannot_hold_are_clear_errors() {
    let t = topic("eos-bad", 1);
    let run = |sink_options: &str, settings: &str| {
        let sql = format!(
            "{settings}{}{}INSERT INTO s SELECT id FROM t;",
            table(
                "t",
                "id BIGINT",
                &t,
                &format!("{BOUNDED}, 'format' = 'json'")
            ),
            table(
                "s",
                "id BIGINT",
                &t,
                &format!(", 'format' = 'json'{sink_options}")
            )
        );
        engine().execute_script(&sql).unwrap_err().to_string()
    };
    // No transactional-id prefix (Flink's rule), also under Flink's older option name.
    for key in ["sink.delivery-guarantee", "sink.semantic"] {
        let err = run(&format!(", '{key}' = 'exactly-once'"), "");
        assert!(
            err.contains("'sink.transactional-id-prefix' must be set"),
            "{key}: {err}"
        );
    }
    let eos = exactly_once("bad");
    let cases = [
        // A transaction timeout the checkpoint interval reaches.
        (
            "'properties.transaction.timeout.ms' = '1000'",
            "SET 'execution.checkpointing.interval' = '2 s';",
            "'properties.transaction.timeout.ms' (1000 ms) must exceed the checkpoint interval (2000 ms)",
        ),
        (
            "'properties.transaction.timeout.ms' = 'soon'",
            "",
            "must be a positive number of milliseconds",
        ),
        // A secured connection: the restore's own commit speaks plain TCP.
        (
            "'properties.security.protocol' = 'SASL_SSL'",
            "",
            "over 'security.protocol' = 'SASL_SSL'",
        ),
    ];
    for (option, settings, message) in cases {
        let err = run(&format!("{eos}, {option}"), settings);
        assert!(err.contains(message), "{option}: {err}");
    }
}

/// xorshift64*: reproducible random numbers.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        lo + self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % (hi - lo + 1)
    }
}

/// `SLUICE_RECOVERY_SEEDS` (the recovery tests' knob), else `default`.
fn seeds(default: u64) -> u64 {
    std::env::var("SLUICE_RECOVERY_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Failures at random points of the checkpoint and commit path (between checkpoint
/// completion and commit, between two subtasks' commits, after a pre-commit, before the
/// final commit, at a barrier, in the source) with random checkpoints and sink
/// parallelism, for many seeds: the committed output of a copy and of a window aggregate
/// is the failure-free output, each row once, and no transaction stays open.
#[test]
fn randomized_failures_in_the_commit_path_commit_each_row_once() {
    // 120 rows over 3 partitions: id = 3 * i + p at ts = id * 100 ms.
    let input = topic("eos-rnd-in", 3);
    let messages: Vec<(i32, String)> = (0..120i64)
        .map(|id| ((id % 3) as i32, format!(r#"{{"id": {id}}}"#)))
        .collect();
    let refs: Vec<(i32, Option<&str>, &str)> = messages
        .iter()
        .map(|(p, v)| (*p, None, v.as_str()))
        .collect();
    produce(&input, &refs);
    let copy: Vec<String> = {
        let mut v: Vec<String> = (0..120)
            .map(|id: i64| format!("{id},{}", id * id))
            .collect();
        v.sort();
        v
    };
    // 1-second windows: ids 10w..10w+9, 10 rows, sum 100w + 45.
    let windows: Vec<String> = {
        let mut v: Vec<String> = (0..12i64)
            .map(|w| {
                format!(
                    "{},10,{}",
                    sluice::format_timestamp_ms(w * 1000),
                    100 * w + 45
                )
            })
            .collect();
        v.sort();
        v
    };
    let source = table(
        "seq",
        "id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 100, 3), WATERMARK FOR ts AS ts",
        &input,
        &format!("{BOUNDED}, 'format' = 'json'"),
    );
    let mut failures = Vec::new();
    let mut aborted = 0;
    for seed in 0..seeds(6) {
        let mut rng = Rng::new(seed + 5000);
        let every = rng.range(8, 30);
        let rows: Vec<String> = (1..120 / every)
            .map(|i| (i * every + rng.range(0, 3)).to_string())
            .collect();
        let checkpoints = rows.len() as u64;
        let mut points = Vec::new();
        for _ in 0..rng.range(1, 3) {
            let id = rng.range(1, checkpoints + 1);
            points.push(match rng.range(0, 6) {
                0 => format!("after-manifest:{id}"),
                1 => format!("mid-commit:{id}"),
                2 => format!("sink-after-precommit:{id}"),
                3 => "before-final-commit".to_string(),
                4 => format!("barrier:{id}"),
                5 => format!("source-after-row:{}", rng.range(1, 119)),
                _ => format!("upload:{id}"),
            });
        }
        let parallelism = rng.range(1, 3);
        let (out_copy, out_windows) = (topic("eos-rnd-copy", 2), topic("eos-rnd-win", 2));
        let sql = format!(
            "SET 'table.local-time-zone' = 'UTC';
             SET 'execution.checkpointing.dir' = 'memory://{}';
             SET 'sluice.test.checkpoint-after-rows' = '{}';
             SET 'sluice.test.failpoints' = '{}';
             SET 'parallelism.default' = '{parallelism}';
             SET 'restart-strategy.fixed-delay.attempts' = '10';
             SET 'restart-strategy.fixed-delay.delay' = '0 ms';
             {source}{}{}
             EXECUTE STATEMENT SET BEGIN
               INSERT INTO copy SELECT id, id * id FROM seq;
               INSERT INTO windows SELECT window_start, COUNT(*), SUM(id)
                 FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '1' SECOND))
                 GROUP BY window_start, window_end;
             END;",
            unique("kafka-eos-rnd"),
            rows.join(","),
            points.join(","),
            table(
                "copy",
                "id BIGINT, sq BIGINT",
                &out_copy,
                &format!(
                    ", 'format' = 'csv', 'sink.partitioner' = 'round-robin'{}",
                    exactly_once("rnd-copy")
                )
            ),
            table(
                "windows",
                "window_start TIMESTAMP(3), n BIGINT, s BIGINT",
                &out_windows,
                &format!(", 'format' = 'csv'{}", exactly_once("rnd-win"))
            ),
        );
        let context = format!("seed {seed}: parallelism {parallelism}, checkpoints after rows {rows:?}, failpoints {points:?}");
        if let Err(e) = engine().execute_script(&sql) {
            failures.push(format!("{context}: {e}"));
            continue;
        }
        for (out, expected) in [(&out_copy, &copy), (&out_windows, &windows)] {
            let mut got = Vec::new();
            for p in 0..2 {
                let log = transactional_log(out, p);
                aborted += log.aborted;
                if log.open > 0 {
                    failures.push(format!(
                        "{context}: {out}/{p} has {} messages in open transactions",
                        log.open
                    ));
                }
                got.extend(log.committed.into_iter().map(|(_, v)| v));
            }
            got.sort();
            if &got != expected {
                failures.push(format!(
                    "{context}: {out} committed {got:?}, expected {expected:?}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        aborted > 0,
        "some failure aborted a transaction that had messages"
    );
}

/// Kafka → window aggregate → Kafka, exactly-once, run by `sluice run` while the input is
/// still being written: the process dies right after checkpoint 3's manifest is written,
/// before its transaction commits (an injected abort), so a new process must commit it by
/// EndTxn; then it is killed with SIGKILL at random moments; each time
/// `--from-checkpoint latest` resumes it. The committed output holds each of the 41
/// windows once (worked out by hand), and no transaction stays open; resuming the finished
/// job adds nothing.
#[test]
fn a_killed_job_resumed_from_its_checkpoint_commits_each_window_once() {
    // One partition: the rows come in id order, so checkpoint 3 (after rows 1000-1500)
    // holds windows whatever the timing.
    let input = topic("eos-kill-in", 1);
    let output = topic("eos-kill-out", 1);
    let dir = std::env::temp_dir().join(unique("sluice-kafka-eos-kill"));
    std::fs::create_dir_all(&dir).unwrap();
    let writer = write_ids_while_running(&input, 1);
    let script = format!(
        "SET 'table.local-time-zone' = 'UTC';
         SET 'execution.checkpointing.interval' = '200 ms';
         SET 'execution.checkpointing.dir' = '{}';
         CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
           WATERMARK FOR ts AS ts) WITH ('connector' = 'kafka', 'topic' = '{input}',
           'properties.bootstrap.servers' = '{}', 'format' = 'json',
           'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'specific-offsets',
           'scan.bounded.specific-offsets' = 'partition:0,offset:4000');
         {}
         INSERT INTO windows SELECT window_start, COUNT(*), SUM(id)
           FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '1' SECOND))
           GROUP BY window_start, window_end;",
        dir.join("chk").display(),
        bootstrap(),
        table(
            "windows",
            "window_start TIMESTAMP(3), n BIGINT, s BIGINT",
            &output,
            &format!(", 'format' = 'csv'{}", exactly_once("kill"))
        ),
    );
    // The first run checkpoints after source rows 500, 1000 and 1500 (the windows that
    // close between the last two are checkpoint 3's transaction) and dies after 3.
    let first_file = dir.join("first.sql");
    std::fs::write(
        &first_file,
        format!(
            "SET 'execution.checkpointing.interval' = '0';
             SET 'sluice.test.checkpoint-after-rows' = '500,1000,1500';
             SET 'sluice.test.failpoints' = 'kill-after-manifest:3';
             {script}"
        )
        .replace("SET 'execution.checkpointing.interval' = '200 ms';", ""),
    )
    .unwrap();
    let file = dir.join("job.sql");
    std::fs::write(&file, script).unwrap();
    let run = |resume: bool| {
        let mut c = sluice_run(if resume { &file } else { &first_file }, resume);
        c.stderr(std::process::Stdio::piped());
        c
    };
    // 1. Dies after checkpoint 3's manifest, before its commit.
    let first = run(false).output().unwrap();
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(
        !first.status.success() && stderr.contains("kill-after-manifest:3"),
        "{stderr}"
    );
    let log = transactional_log(&output, 0);
    assert!(
        log.open > 0,
        "checkpoint 3's transaction is pre-committed, not committed"
    );
    let (committed, open) = (log.committed.len(), log.open);
    // The next run commits it, from its checkpointed producer id and epoch.
    let mut child = run(true).spawn().expect("sluice starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = transactional_log(&output, 0);
        if log.committed.len() >= committed + open {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "checkpoint 3's transaction not committed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait().unwrap();
    // 2. Killed at random moments.
    let mut rng = Rng::new(7);
    for _ in 0..3 {
        let mut child = run(true).spawn().expect("sluice starts");
        let deadline = Instant::now() + Duration::from_millis(rng.range(500, 2500));
        while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill(); // SIGKILL
        child.wait().unwrap();
    }
    writer.join().unwrap();
    // 3. Runs to the end.
    let last = run(true).output().unwrap();
    assert!(
        last.status.success(),
        "{}",
        String::from_utf8_lossy(&last.stderr)
    );
    let expected = common::second_windows_of_ids(4000);
    assert_eq!(committed_values(&output, 1), expected);
    // The end was a final checkpoint: resuming the finished job replays nothing.
    let again = run(true).output().unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        committed_values(&output, 1),
        expected,
        "after resuming the finished job"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The broker restarted while an exactly-once Kafka → Kafka job runs (its data kept): the
/// job fails over to its last checkpoint where it must, and the committed output holds
/// every row once.
#[test]
fn an_exactly_once_job_survives_a_broker_restart() {
    let (broker, output) = double_across_a_broker_restart(
        "SET 'restart-strategy.fixed-delay.attempts' = '20';
         SET 'restart-strategy.fixed-delay.delay' = '500 ms';",
        &exactly_once("restart"),
    );
    let address = broker.address();
    let log = transactional_log_at(&address, &output, 0);
    assert_eq!(log.open, 0, "messages of transactions left open");
    let mut got: Vec<i64> = log
        .committed
        .iter()
        .map(|(_, v)| v.parse().unwrap())
        .collect();
    got.sort_unstable();
    let want: Vec<i64> = (1..=2000).map(|n| n * 2).collect();
    assert_eq!(got, want);
}
