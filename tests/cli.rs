//! The `sluice` binary: `sluice run FILE.sql --from-checkpoint latest` resumes a job that
//! failed, and the output committed by both runs equals a failure-free run's.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The daily report of the flights example into `out`, with `settings` first.
fn job_sql(out: &Path, settings: &str) -> String {
    let example = std::fs::read_to_string(root().join("sql-examples/flights_daily_to_files.sql"))
        .unwrap()
        .replace(
            "target/sql-examples/daily_delays",
            &out.display().to_string(),
        );
    format!("{settings}\n{example}")
}

fn sluice(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("sluice runs")
}

#[test]
fn a_failed_job_resumes_from_its_latest_checkpoint() {
    let dir = temp_dir("resume");
    // Failure-free reference.
    let reference_out = dir.join("reference");
    std::fs::write(dir.join("reference.sql"), job_sql(&reference_out, "")).unwrap();
    let r = sluice(&["run", dir.join("reference.sql").to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let expected = common::committed_lines(&reference_out);
    assert!(expected.len() > 1000, "{} rows", expected.len());

    // Checkpoints after rows 100 000 and 200 000; the job dies at row 250 000.
    let out = dir.join("out");
    let checkpoints = dir.join("checkpoints");
    let settings = format!(
        "SET 'execution.checkpointing.dir' = '{}';\n\
         SET 'sluice.test.checkpoint-after-rows' = '100000,200000';\n\
         SET 'sluice.test.failpoints' = 'source-after-row:250000';\n\
         SET 'restart-strategy.type' = 'none';",
        checkpoints.display()
    );
    std::fs::write(dir.join("job.sql"), job_sql(&out, &settings)).unwrap();
    let first = sluice(&["run", dir.join("job.sql").to_str().unwrap()]);
    assert!(!first.status.success());
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(
        stderr.contains("injected failure at source-after-row:250000"),
        "{stderr}"
    );
    let partial = common::committed_lines(&out);
    assert!(partial.len() < expected.len());

    // The same file resumes (its failpoint would fire again at row 250 000: drop it).
    let resumed_settings = settings.replace("source-after-row:250000", "");
    std::fs::write(dir.join("job.sql"), job_sql(&out, &resumed_settings)).unwrap();
    let second = sluice(&[
        "run",
        dir.join("job.sql").to_str().unwrap(),
        "--from-checkpoint",
        "latest",
    ]);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    assert!(stderr.contains("restored checkpoint 2"), "{stderr}");
    assert_eq!(common::committed_lines(&out), expected);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A statement set (two sinks fed by one generated source) killed with SIGKILL after a
/// checkpoint completed, then resumed with `--from-checkpoint latest`: each sink's
/// committed output is exactly the failure-free result. Rows: ids 1..=20000 at 2000 rows/s,
/// event time id * 10 ms; sink `windows` gets one row per 1-second window (count and sum
/// of its ids), sink `sevens` the ids divisible by 7 (both derived below by formula).
#[test]
fn a_killed_statement_set_resumes_with_every_sinks_output_exact() {
    let dir = temp_dir("set-kill");
    let (windows, sevens, checkpoints) = (dir.join("windows"), dir.join("sevens"), dir.join("chk"));
    let script = format!(
        "SET 'table.local-time-zone' = 'UTC';
         SET 'execution.checkpointing.interval' = '300 ms';
         SET 'execution.checkpointing.dir' = '{}';
         CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
           WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen',
           'rows-per-second' = '2000', 'fields.id.kind' = 'sequence',
           'fields.id.start' = '1', 'fields.id.end' = '20000');
         CREATE TABLE windows (window_start TIMESTAMP(3), n BIGINT, s BIGINT)
           WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         CREATE TABLE sevens (id BIGINT)
           WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         EXECUTE STATEMENT SET BEGIN
           INSERT INTO windows SELECT window_start, COUNT(*), SUM(id)
             FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '1' SECOND))
             GROUP BY window_start, window_end;
           INSERT INTO sevens SELECT id FROM seq WHERE id % 7 = 0;
         END;",
        checkpoints.display(),
        windows.display(),
        sevens.display()
    );
    let file = dir.join("set.sql");
    std::fs::write(&file, script).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", file.to_str().unwrap()])
        .current_dir(root())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("sluice starts");
    // Kill once a checkpoint has committed output to both sinks (the run takes 10 s).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    while common::committed_lines(&windows).is_empty()
        || common::committed_lines(&sevens).is_empty()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint committed"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the job ended before a checkpoint"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let partial = common::committed_lines(&sevens).len();
    assert!(
        partial < 2857,
        "killed mid-run: {partial} of 2857 rows committed"
    );
    let resumed = sluice(&["run", file.to_str().unwrap(), "--from-checkpoint", "latest"]);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let expected_windows = common::second_windows_of_ids(20_000);
    assert_eq!(common::committed_lines(&windows), expected_windows);
    let mut expected_sevens: Vec<String> = (1..=20_000i64)
        .filter(|i| i % 7 == 0)
        .map(|i| i.to_string())
        .collect();
    expected_sevens.sort();
    assert_eq!(common::committed_lines(&sevens), expected_sevens);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A join job (a generated stream joined with a table read from a file) killed with SIGKILL
/// after a checkpoint committed output, then resumed with `--from-checkpoint latest`: the
/// committed output is exactly the failure-free result. Stream ids 1..=20000 at 2000
/// rows/s; the table has keys 0..=99 named `n<k>`, of which those divisible by 3 are kept,
/// so each id whose `id % 100` is divisible by 3 appears once, with its name (by formula).
#[test]
fn a_killed_join_resumes_with_exact_output() {
    let dir = temp_dir("join-kill");
    let (out, checkpoints, dim) = (dir.join("out"), dir.join("chk"), dir.join("dim.csv"));
    let names: String = (0..100).map(|k| format!("{k},n{k}\n")).collect();
    std::fs::write(&dim, names).unwrap();
    let script = format!(
        "SET 'execution.checkpointing.interval' = '300 ms';
         SET 'execution.checkpointing.dir' = '{}';
         CREATE TABLE seq (id BIGINT) WITH ('connector' = 'datagen',
           'rows-per-second' = '2000', 'fields.id.kind' = 'sequence',
           'fields.id.start' = '1', 'fields.id.end' = '20000');
         CREATE TABLE dim (k BIGINT, name STRING)
           WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         CREATE TABLE joined (id BIGINT, name STRING)
           WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         INSERT INTO joined SELECT s.id, d.name FROM seq s JOIN dim d ON s.id % 100 = d.k
           WHERE d.k % 3 = 0;",
        checkpoints.display(),
        dim.display(),
        out.display()
    );
    let file = dir.join("join.sql");
    std::fs::write(&file, script).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", file.to_str().unwrap()])
        .current_dir(root())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("sluice starts");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    while common::committed_lines(&out).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint committed"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the job ended before a checkpoint"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let mut expected: Vec<String> = (1..=20_000i64)
        .filter(|id| (id % 100) % 3 == 0)
        .map(|id| format!("{id},n{}", id % 100))
        .collect();
    expected.sort();
    let partial = common::committed_lines(&out).len();
    assert!(
        partial < expected.len(),
        "killed mid-run: {partial} rows committed"
    );
    let resumed = sluice(&["run", file.to_str().unwrap(), "--from-checkpoint", "latest"]);
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(stderr.contains("restored checkpoint"), "{stderr}");
    assert_eq!(common::committed_lines(&out), expected);
    let _ = std::fs::remove_dir_all(&dir);
}

fn run_with_stdin(args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .current_dir(root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sluice starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().expect("sluice ends")
}

const CLICKS: &str = "CREATE TABLE clicks (uid STRING, url STRING, amount INT, price DOUBLE, \
    ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) WITH ('connector' = \
    'filesystem', 'path' = 'tests/slt/data/clicks.csv', 'format' = 'csv');";

/// `-e`, `-` (stdin), `--set`, the summary line, and exit codes that say what failed.
#[test]
fn run_options_and_exit_codes() {
    let query =
        format!("{CLICKS} SELECT uid, COUNT(*) AS n FROM clicks WHERE uid = 'alice' GROUP BY uid");
    // -e: the final table of an updating result, and a summary line on stderr.
    let e = sluice(&["run", "-e", &query]);
    assert_eq!(
        e.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&e.stderr)
    );
    let out = String::from_utf8_lossy(&e.stdout);
    assert!(
        out.lines()
            .any(|l| l.contains("alice") && l.trim_end().ends_with(" 4 |")),
        "{out}"
    );
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(err.contains("[INFO] Job finished: 9 rows in"), "{err}");
    // stdin, csv, with --set.
    let s = run_with_stdin(
        &[
            "run",
            "-",
            "--format",
            "csv",
            "--set",
            "parallelism.default=2",
        ],
        &query,
    );
    assert_eq!(
        s.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&s.stderr)
    );
    let out = String::from_utf8_lossy(&s.stdout);
    assert!(
        out.starts_with("op,uid,n\n") && out.contains(",alice,4"),
        "{out}"
    );
    // 3: SQL that does not parse (the message names line and column), a bad setting.
    let bad = sluice(&["run", "-e", "SELEC 1"]);
    assert_eq!(bad.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("Line: 1, Column"));
    let bad_set = sluice(&["run", "-e", &query, "--set", "parallelism.default=zero"]);
    assert_eq!(bad_set.status.code(), Some(3));
    let no_pair = sluice(&["run", "-e", &query, "--set", "nonsense"]);
    assert_eq!(no_pair.status.code(), Some(3));
    // 4: the file cannot be read.
    let missing = sluice(&["run", "/nonexistent/job.sql"]);
    assert_eq!(missing.status.code(), Some(4));
    // 1: a job that fails while running (a row that does not parse).
    let dir = temp_dir("exit");
    std::fs::write(dir.join("bad.csv"), "a,1\nb,x\n").unwrap();
    let data_error = sluice(&[
        "run",
        "-e",
        &format!(
            "CREATE TABLE t (s STRING, n INT) WITH ('connector' = 'filesystem', 'path' = '{}', \
             'format' = 'csv'); SELECT s, n FROM t",
            dir.join("bad.csv").display()
        ),
    ]);
    assert_eq!(data_error.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&data_error.stderr).contains("bad.csv:2:2"));
    // 2: bad command-line arguments.
    assert_eq!(sluice(&["run"]).status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// EXPLAIN goldens (`tests/explain/`): the indented text at parallelism 3 (two stages
/// behind hash exchanges, two source subtasks) and the Graphviz form at parallelism 1
/// (one chain, source subtasks merged). The goldens were checked by hand against how
/// `sluice_runtime::job` builds stages.
#[test]
fn explain_goldens() {
    // Runs `tests/explain/<sql>` at `parallelism` and compares its output with `<golden>`.
    let golden = |sql: &str, parallelism: usize, golden: &str| -> String {
        let out = sluice(&[
            "run",
            &format!("tests/explain/{sql}"),
            "--set",
            &format!("parallelism.default={parallelism}"),
        ]);
        assert_eq!(out.status.code(), Some(0), "{sql}");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let expected = std::fs::read_to_string(root().join("tests/explain").join(golden)).unwrap();
        assert_eq!(text, expected, "{sql}");
        text
    };
    golden("agg_of_agg.sql", 3, "agg_of_agg_p3.txt");
    let dot = golden("agg_of_agg_dot.sql", 1, "agg_of_agg_p1.dot");
    assert_eq!(dot.matches(" -> ").count(), 7, "a chain of 8 operators");
    // A union of three branches (table `a` read once, by two of them): every branch and
    // edge, the shared source drawn once in DOT with an edge to each consumer.
    golden("union.sql", 2, "union_p2.txt");
    let dot = golden("union_dot.sql", 1, "union_p1.dot");
    assert_eq!(
        dot.matches("Source: table=a").count(),
        1,
        "one source for table a"
    );
    assert_eq!(dot.matches("n0 -> ").count(), 2, "read by two branches");
    // A statement set: both sinks' branches, from the one source they share.
    let set = golden("statement_set.sql", 2, "statement_set_p2.txt");
    // EXPLAIN [PLAN FOR] INSERT INTO: the plan of a statement set of that one INSERT (the
    // golden's first sink).
    let ddl = std::fs::read_to_string(root().join("tests/explain/statement_set.sql")).unwrap();
    let ddl = &ddl[..ddl.find("EXPLAIN").unwrap()];
    let first_sink: String = set
        .lines()
        .take_while(|l| !l.starts_with("Sink: table=per_window"))
        .map(|l| format!("{l}\n"))
        .collect();
    for explain in ["EXPLAIN", "EXPLAIN PLAN FOR"] {
        let sql = format!("{ddl}{explain} INSERT INTO big SELECT id FROM a WHERE amount > 20");
        let out = sluice(&["run", "-e", &sql, "--set", "parallelism.default=2"]);
        assert_eq!(out.status.code(), Some(0), "{sql}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            first_sink,
            "{explain}"
        );
    }
    // Joins: each input hashed by its own key (so equal keys meet in one subtask), a
    // condition on one input below the join; NOT IN as a null-aware anti join in one
    // subtask, IN as a semi join.
    let join = golden("join.sql", 2, "join_p2.txt");
    assert!(join.contains("input=hash[c.id], hash[o.cust]"), "{join}");
    golden("subqueries.sql", 2, "subqueries_p2.txt");
    // Ordered analytics: each operator by name with its state, keyed by PARTITION BY
    // (an OVER window and a Top-N over it each behind a hash exchange); a sort, a limit
    // and a Top-N without PARTITION BY in one subtask.
    let ordered = golden("ordered.sql", 2, "ordered_p2.txt");
    for name in [
        "OverAggregate:",
        "Rank:",
        "Deduplicate:",
        "WindowRank:",
        "Sort:",
        "Limit:",
    ] {
        assert!(ordered.contains(name), "{name} in {ordered}");
    }
    // A Top-N over a growing COUNT(*) keeps only its top rows (update-fast); over a SUM,
    // which can shrink, every live row.
    assert_eq!(
        ordered.matches("updates only move a row up").count(),
        1,
        "{ordered}"
    );
    assert_eq!(
        ordered.matches("every live row per partition").count(),
        1,
        "{ordered}"
    );
    // Time-bounded joins: their kind, bounds and state-retention rule.
    let interval = golden("interval_join.sql", 2, "interval_join_p2.txt");
    assert!(interval.contains("IntervalJoin: LEFT OUTER"), "{interval}");
    let window = golden("window_join.sql", 2, "window_join_p2.txt");
    assert!(
        window.contains("WindowJoin: LEFT OUTER, TUMBLE"),
        "{window}"
    );
    // A temporal join: keyed by the versioned table's primary key, its time attributes and
    // what its state keeps.
    let temporal = golden("temporal_join.sql", 2, "temporal_join_p2.txt");
    assert!(
        temporal.contains("TemporalJoin: LEFT OUTER, on=[o.currency = r.currency]"),
        "{temporal}"
    );
    // A lookup join: chained where its input runs (no keyed state), its cache.
    let lookup = golden("lookup_join.sql", 2, "lookup_join_p2.txt");
    assert!(
        lookup.contains("LookupJoin: LEFT OUTER, table=customers"),
        "{lookup}"
    );
    // Projection pushdown: a JSON table read by two scans (one through a view) is read
    // once, decoding only the columns and ROW fields either reads; the view's column
    // `note`, which nothing above the join reads, is gone from its projection and from
    // what the scan decodes.
    let projection = golden("projection.sql", 2, "projection_p2.txt");
    assert!(
        projection.contains("reads=[id, person.name, person.city]"),
        "{projection}"
    );
    let bad = sluice(&["run", "-e", "EXPLAIN FORMAT JSON SELECT 1"]);
    assert_eq!(bad.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("must be TEXT or DOT"));
}

/// On a terminal (a pseudo-terminal from `script`), an INSERT job shows a live progress
/// line (rows, bytes, rows/s, watermark) that is cleared before the summary; without a
/// terminal there is none.
#[test]
fn progress_line_only_on_a_terminal() {
    let bin = env!("CARGO_BIN_EXE_sluice");
    let dir = temp_dir("progress");
    std::fs::write(
        dir.join("job.sql"),
        job_sql(&dir.join("out"), "").replace(
            "'path' = 'sql-examples/data",
            &format!("'path' = '{}/sql-examples/data", root().display()),
        ),
    )
    .unwrap();
    let job = dir.join("job.sql").display().to_string();
    let plain = sluice(&["run", &job]);
    assert!(plain.status.success());
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(!stderr.contains("rows/s"), "{stderr}");
    let Ok(tty) = Command::new("script")
        .args(["-qfec", &format!("{bin} run {job}"), "/dev/null"])
        .output()
    else {
        panic!("util-linux `script` is needed to give the binary a terminal");
    };
    let screen = String::from_utf8_lossy(&tty.stdout);
    assert!(screen.contains(" rows/s, watermark "), "{screen}");
    // The flights file's decompressed size (its gzip trailer) is the bar's total.
    assert!(screen.contains(" MB of 37.8 MB) read"), "{screen}");
    assert!(screen.contains("%"), "{screen}");
    assert!(
        screen.contains("[INFO] Job finished: 336776 rows in"),
        "{screen}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `SHOW CREATE TABLE` prints DDL that creates the same table again (same DESCRIBE):
/// NOT NULL columns (declared, or a primary key's, as Flink prints them), computed
/// columns, the watermark and the key.
#[test]
fn show_create_table_round_trips() {
    let ddl = "CREATE TABLE t (a INT, c STRING NOT NULL, `ts` TIMESTAMP(3), b AS a + 1, \
               WATERMARK FOR ts AS ts - INTERVAL '1' SECOND, PRIMARY KEY (a) NOT ENFORCED) \
               WITH ('connector' = 'filesystem', 'path' = 'it''s.csv', 'format' = 'csv');";
    let shown = sluice(&["run", "-e", &format!("{ddl} SHOW CREATE TABLE t")]);
    assert_eq!(shown.status.code(), Some(0));
    let printed = String::from_utf8_lossy(&shown.stdout).to_string();
    assert!(printed.starts_with("CREATE TABLE `t` ("), "{printed}");
    assert!(printed.contains("`a` INT NOT NULL,"), "{printed}");
    assert!(printed.contains("`c` STRING NOT NULL,"), "{printed}");
    let describe = |ddl: &str| {
        let out = sluice(&[
            "run",
            "--format",
            "csv",
            "-e",
            &format!("{ddl}; DESCRIBE t"),
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let original = describe(ddl.trim_end_matches(';'));
    assert!(original.contains("ts - INTERVAL '1' SECOND"), "{original}");
    assert_eq!(describe(printed.trim()), original);
    assert_eq!(
        sluice(&["run", "-e", "SHOW CREATE TABLE nope"])
            .status
            .code(),
        Some(3)
    );
}

/// SQL piped into the shell (`sluice` with stdin not a terminal): no banner, an INSERT's
/// background job is waited for at the end of the input (its rows are all written), and
/// a failed statement makes the exit code 1.
#[test]
fn piped_shell_waits_for_inserts_and_reports_failure() {
    use std::io::Write;
    let dir = temp_dir("piped");
    let out = dir.join("out");
    let sql = format!(
        "CREATE TABLE gen (n BIGINT) WITH ('connector' = 'datagen', 'fields.n.kind' = \
         'sequence', 'fields.n.start' = '1', 'fields.n.end' = '500');\n\
         CREATE TABLE sink (n BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', \
         'format' = 'csv');\n\
         INSERT INTO sink SELECT n FROM gen;\n",
        out.display()
    );
    let shell = |input: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .current_dir(&dir)
            .env("SLUICE_HISTORY", dir.join("history"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let done = shell(&sql);
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert_eq!(done.status.code(), Some(0), "{stdout}");
    assert!(!stdout.contains("HELP for help"), "{stdout}");
    assert!(stdout.contains("[INFO] Submitted job '"), "{stdout}");
    let mut expected: Vec<String> = (1..=500).map(|n| n.to_string()).collect();
    expected.sort();
    assert_eq!(common::committed_lines(&out), expected);
    assert!(!dir.join("history").exists(), "piped input is not history");

    // With exactly-once checkpointing on, the shell says SELECT rows wait for checkpoints.
    let held = shell(&format!(
        "{}SET 'execution.checkpointing.interval' = '1 h';\nSELECT n FROM gen WHERE n = 7;\n",
        sql.lines().next().unwrap()
    ));
    let stdout = String::from_utf8_lossy(&held.stdout);
    assert!(
        stdout.contains("[INFO] Exactly-once checkpointing is on: rows show as each checkpoint completes (every 3600 s)"),
        "{stdout}"
    );
    assert!(stdout.contains("|                    7 |"), "{stdout}");

    let failed = shell("SELCT 1;\n");
    assert_eq!(failed.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&failed.stdout).contains("[ERROR] SQL error"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The binary registers Nexmark's user-defined functions (q14's `count_char`) in `sluice
/// run` and in the shell (here with piped input); a library `Engine` does not.
#[test]
fn the_binary_registers_nexmark_functions() {
    let script = "CREATE FUNCTION count_char AS 'com.github.nexmark.flink.udf.CountChar';\n\
                  SELECT count_char('abcc', 'c') AS n;";
    // 'abcc' has two 'c' (by hand).
    for args in [&["run", "-e", script][..], &["run", "-"][..], &[][..]] {
        let out = if args.contains(&"-e") {
            sluice(args)
        } else {
            run_with_stdin(args, script)
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert!(
            stdout.lines().any(|l| l.trim_end().ends_with(" 2 |")),
            "{args:?}: {stdout}"
        );
    }
    let mut engine = sluice::Engine::new(sluice::EngineConfig::default());
    let err = engine
        .sql("CREATE FUNCTION count_char AS 'com.github.nexmark.flink.udf.CountChar'")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("register_udf"), "{err}");
}

/// `SET` of a key Sluice does not read keeps it (Flink's configuration is open) and says
/// so, with the closest key Sluice reads.
#[test]
fn set_of_an_unknown_key_says_so() {
    let out = sluice(&["run", "-e", "SET 'parallelism.defualt' = '2'"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(
            "Sluice does not read 'parallelism.defualt'; did you mean 'parallelism.default'?"
        ),
        "{text}"
    );
}
