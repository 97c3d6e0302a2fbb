//! The interactive shell, driven as a person would: the real binary in a tmux pane (a
//! pseudo-terminal), keys sent with `tmux send-keys`, assertions on the rendered screen
//! (`tmux capture-pane`). `.ci/run` installs tmux when it is missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static SESSION: AtomicU32 = AtomicU32::new(0);

/// How long a test waits for what it expects on the screen before failing.
const WAIT_DEADLINE: Duration = Duration::from_secs(180);

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-repl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One shell in its own tmux server (socket), 160 x 50 characters.
struct Shell {
    socket: String,
}

impl Shell {
    fn start(dir: &Path, history: &Path) -> Shell {
        let socket = format!(
            "sluice-test-{}-{}",
            std::process::id(),
            SESSION.fetch_add(1, Ordering::SeqCst)
        );
        let bin = env!("CARGO_BIN_EXE_sluice");
        // After the shell exits, its exit code stays on the screen.
        let command = format!(
            "SLUICE_HISTORY='{}' TERM=xterm '{bin}'; echo \"EXITED:$?\"; sleep 600",
            history.display()
        );
        let status = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", "160", "-y", "50", "-c"])
            .arg(dir)
            .arg(command)
            .status()
            .expect("tmux is needed for the shell tests (.ci/run installs it)");
        assert!(status.success());
        let shell = Shell { socket };
        shell.wait_for("the banner", |s| s.contains("sluice>"));
        shell
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// Types text literally (no Enter). tmux reads an argument ending in `;` as a
    /// command separator, so each `;` is sent as its character code.
    fn type_text(&self, text: &str) {
        for (i, piece) in text.split(';').enumerate() {
            if i > 0 {
                self.tmux(&["send-keys", "-t", "0", "-H", "3b"]);
            }
            if !piece.is_empty() {
                self.tmux(&["send-keys", "-t", "0", "-l", piece]);
            }
        }
    }

    /// Sends `text` to the terminal in one write, as a paste or fast typing delivers it
    /// (`\r` is Enter).
    fn send_at_once(&self, text: &str) {
        let hex: Vec<String> = text.bytes().map(|b| format!("{b:02x}")).collect();
        let mut args = vec!["send-keys", "-t", "0", "-H"];
        args.extend(hex.iter().map(String::as_str));
        self.tmux(&args);
    }

    /// Presses keys (tmux key names: `Enter`, `Tab`, `Up`, `C-c`, `C-d`, ...).
    fn press(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "0"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// Types a line and presses Enter.
    fn enter(&self, line: &str) {
        self.type_text(line);
        self.press(&["Enter"]);
    }

    /// Waits for an empty prompt at the end of the screen (the shell is reading input);
    /// returns the screen.
    fn wait_for_prompt(&self) -> String {
        self.wait_for("an empty prompt", |s| s.trim_end().ends_with("sluice>"))
    }

    /// Types a statement's first (or only) line at an empty prompt, as a person would:
    /// waits for the prompt, types, presses Enter, and waits until the shell has taken
    /// the line (the screen changed). Keys sent while the previous statement still runs
    /// reach a terminal the line editor does not read, and some are lost.
    fn run(&self, line: &str) {
        let before = self.wait_for_prompt();
        self.enter(line);
        self.wait_for("the line taken", |s| s != before);
    }

    /// The visible screen plus the scrollback.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "0", "-S", "-1000"])
    }

    /// Waits until the screen satisfies `ok`; returns it. The deadline is generous (a
    /// debug build on a busy machine): waiting for a condition costs only as long as it
    /// takes to hold.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT_DEADLINE;
        loop {
            let screen = self.screen();
            if ok(&screen) {
                return screen;
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}; the screen:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `SHOW JOBS` until the session's newest job listed has written rows (its
    /// `rows out` is above zero); returns the screen.
    fn wait_for_rows_out(&self) -> String {
        let deadline = Instant::now() + WAIT_DEADLINE;
        loop {
            // Each round on a cleared screen and scrollback (Ctrl-L at the prompt).
            self.press(&["C-l"]);
            self.tmux(&["clear-history", "-t", "0"]);
            self.wait_for("a cleared screen", |s| !s.contains("| job id "));
            self.run("SHOW JOBS;");
            let screen = self.wait_for("SHOW JOBS", |s| {
                s.lines().any(|l| l.starts_with("| job_")) && s.trim_end().ends_with("sluice>")
            });
            // The last table's job row: | id | name | status | start | in | out | error |
            let rows_out = screen
                .lines()
                .rev()
                .find(|l| l.starts_with("| job_"))
                .and_then(|l| l.split('|').nth(6))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0);
            if rows_out > 0 {
                return screen;
            }
            if Instant::now() > deadline {
                panic!("the job never wrote a row; the screen:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `text` occurs `n` times on the screen.
    fn wait_count(&self, text: &str, n: usize) -> String {
        self.wait_for(&format!("{n} x '{text}'"), |s| s.matches(text).count() >= n)
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

const CLICKS: &str = "user_id,url,ts\n\
    1,/a,2024-01-01 10:00:01\n\
    2,/b,2024-01-01 10:00:20\n\
    1,/c,2024-01-01 10:01:05\n\
    3,/a,2024-01-01 10:01:30\n\
    1,/b,2024-01-01 10:02:10\n";

fn clicks_dir(name: &str) -> PathBuf {
    let dir = temp_dir(name);
    std::fs::write(dir.join("clicks.csv"), CLICKS).unwrap();
    dir
}

const CREATE_CLICKS: [&str; 3] = [
    "CREATE TABLE clicks (user_id INT, url STRING, ts TIMESTAMP(3),",
    "  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)",
    "WITH ('connector' = 'filesystem', 'path' = 'clicks.csv', 'format' = 'csv', 'csv.header' = 'true');",
];

/// An unbounded `ticks` table (50 rows/s: 1, 2, 3, ...) and a CSV sink `out_ticks` in
/// `out/`.
fn create_ticks_and_sink(shell: &Shell) {
    shell.run(
        "CREATE TABLE ticks (n BIGINT) WITH ('connector' = 'datagen', \
         'rows-per-second' = '50', 'fields.n.kind' = 'sequence', 'fields.n.start' = '1', \
         'fields.n.end' = '100000000');",
    );
    shell.run(
        "CREATE TABLE out_ticks (n BIGINT) WITH ('connector' = 'filesystem', \
         'path' = 'out', 'format' = 'csv');",
    );
}

/// A statement over several lines runs at its `;`; a windowed SELECT prints its rows;
/// Tab completes a table name; the hint line shows a keyword's completion; a syntax error
/// shows a caret under its position; SHOW TABLES, DESCRIBE and EXPLAIN work; QUIT exits 0.
#[test]
fn multi_line_statements_completion_hints_and_error_caret() {
    let dir = clicks_dir("basics");
    let shell = Shell::start(&dir, &dir.join("history"));
    shell.run(CREATE_CLICKS[0]);
    shell.enter(CREATE_CLICKS[1]);
    // Not run yet: the statement has no ';'.
    std::thread::sleep(Duration::from_millis(300));
    assert!(!shell.screen().contains("has been created"));
    shell.enter(CREATE_CLICKS[2]);
    shell.wait_for("the table", |s| {
        s.contains("[INFO] Table 'clicks' has been created.")
    });

    shell.run(
        "SELECT window_start, COUNT(*) AS clicks FROM TABLE(TUMBLE(TABLE clicks, \
         DESCRIPTOR(ts), INTERVAL '1' MINUTE)) GROUP BY window_start, window_end;",
    );
    let screen = shell.wait_for("the result", |s| s.contains("rows in"));
    // 10:00 has 2 clicks, 10:01 has 2, 10:02 has 1 (hand count of CLICKS).
    for row in [
        "| 2024-01-01 10:00:00     |                    2 |",
        "| 2024-01-01 10:01:00     |                    2 |",
        "| 2024-01-01 10:02:00     |                    1 |",
    ] {
        assert!(screen.contains(row), "missing {row}:\n{screen}");
    }
    assert!(screen.contains("[INFO] 3 rows in"), "{screen}");

    // Tab completes the table name.
    shell.wait_for_prompt();
    shell.type_text("DESCRIBE cli");
    shell.press(&["Tab"]);
    shell.wait_for("completion", |s| s.contains("sluice> DESCRIBE clicks"));
    shell.enter(";");
    let screen = shell.wait_for("DESCRIBE", |s| s.contains("*ROWTIME*"));
    assert!(screen.contains("| user_id |"), "{screen}");

    // The hint line: "EXPLA" shows "IN" after the cursor; → accepts it. EXPLAIN shows
    // the operator graph.
    shell.wait_for_prompt();
    shell.type_text("EXPLA");
    shell.wait_for("the hint", |s| s.contains("sluice> EXPLAIN"));
    shell.press(&["Right"]);
    shell.enter(" SELECT user_id, COUNT(*) FROM clicks GROUP BY user_id;");
    shell.wait_for("EXPLAIN", |s| s.contains("GroupAggregate"));
    shell.run("SHOW TABLES;");
    shell.wait_for("SHOW TABLES", |s| s.contains("| clicks     |"));

    // A syntax error: the caret sits under the bad token (column 6).
    shell.run("SHOW TABELS;");
    let screen = shell.wait_for("the error", |s| s.contains("LINE 1: SHOW TABELS;"));
    let lines: Vec<&str> = screen.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("LINE 1: SHOW TABELS;"))
        .unwrap();
    assert_eq!(
        lines[at + 1],
        format!("{}^", " ".repeat("LINE 1: SHOW ".len()))
    );
    assert!(screen.contains("[ERROR] SQL error: Expected: TABLES, VIEWS, FUNCTIONS, JOBS"));

    shell.run("QUIT");
    shell.wait_for("the exit", |s| s.contains("EXITED:0"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Statements typed ahead arrive together; each runs (none is lost with the line the
/// editor read before it).
#[test]
fn typed_ahead_statements_all_run() {
    let dir = temp_dir("typeahead");
    let shell = Shell::start(&dir, &dir.join("history"));
    shell.wait_for_prompt();
    shell.send_at_once(
        "SET 'pipeline.name' = 'first';\rSET 'pipeline.name' = 'second';\rSET 'pipeline.name' = 'third';\r",
    );
    shell.wait_count("Session property has been set", 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The history survives a restart: Up recalls the previous session's statements.
#[test]
fn history_persists_across_sessions() {
    let dir = temp_dir("history");
    let history = dir.join("history");
    {
        let shell = Shell::start(&dir, &history);
        shell.run("SET 'pipeline.name' = 'remember-me';");
        shell.wait_for("SET", |s| s.contains("Session property has been set"));
        shell.press(&["C-d"]);
        shell.wait_for("the exit", |s| s.contains("EXITED:0"));
    }
    let shell = Shell::start(&dir, &history);
    shell.press(&["Up"]);
    shell.wait_for("the recalled statement", |s| {
        s.contains("sluice> SET 'pipeline.name' = 'remember-me';")
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ctrl-C cancels a running (unbounded) query and returns to the prompt, and the shell
/// goes on working.
#[test]
fn ctrl_c_cancels_a_running_query() {
    let dir = temp_dir("cancel");
    let shell = Shell::start(&dir, &dir.join("history"));
    shell.run(
        "CREATE TABLE ticks (n BIGINT) WITH ('connector' = 'datagen', \
         'rows-per-second' = '20', 'fields.n.kind' = 'sequence', 'fields.n.start' = '1', \
         'fields.n.end' = '100000000');",
    );
    shell.wait_for("the table", |s| s.contains("has been created"));
    shell.run("SELECT n FROM ticks;");
    shell.wait_for("rows streaming in", |s| {
        s.contains("|                    3 |")
    });
    shell.press(&["C-c"]);
    // The message, then the prompt back (printed after the job has ended).
    shell.wait_for("the cancel and the prompt", |s| {
        s.contains("[INFO] Query canceled") && s.trim_end().ends_with("sluice>")
    });
    shell.run("SHOW TABLES;");
    shell.wait_for("the next statement", |s| s.contains("| ticks      |"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// INSERT INTO returns a job id at once; SHOW JOBS lists it RUNNING; STOP JOB ... WITH
/// SAVEPOINT prints the checkpoint's path (which exists) and the job shows CANCELED.
#[test]
fn background_insert_show_jobs_and_stop_with_savepoint() {
    let dir = temp_dir("jobs");
    let shell = Shell::start(&dir, &dir.join("history"));
    create_ticks_and_sink(&shell);
    shell.run("SET 'execution.checkpointing.interval' = '1 h';");
    shell.run("SET 'execution.checkpointing.dir' = 'chk';");
    shell.wait_count("Session property has been set", 2);
    shell.run("INSERT INTO out_ticks SELECT n FROM ticks;");
    let screen = shell.wait_for("the job id", |s| s.contains("[INFO] Submitted job '"));
    let id = screen
        .split("[INFO] Submitted job '")
        .nth(1)
        .and_then(|r| r.split('\'').next())
        .unwrap()
        .to_string();
    // The prompt is back while the job runs.
    shell.run("SHOW JOBS;");
    let screen = shell.wait_for("SHOW JOBS", |s| s.contains("| RUNNING"));
    assert!(screen.contains(&id), "{screen}");
    assert!(
        screen.contains("INSERT INTO out_ticks SELECT n FROM ticks"),
        "{screen}"
    );

    shell.run(&format!("STOP JOB '{id}' WITH SAVEPOINT;"));
    let screen = shell.wait_for("the savepoint", |s| s.contains("savepoint path"));
    let path = screen
        .lines()
        .find(|l| l.contains("chk-"))
        .map(|l| l.trim_matches(|c| c == '|' || c == ' ').to_string())
        .unwrap_or_else(|| panic!("no savepoint path:\n{screen}"));
    assert!(
        Path::new(&path).join("_manifest.json").exists(),
        "{path}:\n{screen}"
    );
    shell.run("SHOW JOBS;");
    shell.wait_for("CANCELED", |s| s.contains("| CANCELED"));
    shell.run(&format!("STOP JOB '{id}';"));
    shell.wait_for("an error", |s| s.contains("is not running"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// An updating result in each result mode: `changelog` shows the retractions, `table`
/// shows only the current table (redrawn in place), an unknown mode is an error.
#[test]
fn result_modes_for_an_updating_query() {
    let dir = temp_dir("modes");
    let shell = Shell::start(&dir, &dir.join("history"));
    // Two rows per second, one at a time (half a second apart).
    shell.run(
        "CREATE TABLE ticks (n BIGINT) WITH ('connector' = 'datagen', \
         'rows-per-second' = '2', 'fields.n.kind' = 'sequence', 'fields.n.start' = '1', \
         'fields.n.end' = '4');",
    );
    shell.wait_for("the table", |s| s.contains("has been created"));
    let query = "SELECT n % 2 AS k, COUNT(*) AS c FROM ticks GROUP BY n % 2;";

    shell.run("SET 'sql-client.execution.result-mode' = 'changelog';");
    shell.run(query);
    let screen = shell.wait_count("changelog rows in", 1);
    // Batch 1: +I (1, 1), +I (0, 1); batch 2: each count goes from 1 to 2.
    for row in [
        "| +I |                    1 |                    1 |",
        "| +I |                    0 |                    1 |",
        "| -U |                    1 |                    1 |",
        "| +U |                    1 |                    2 |",
        "| -U |                    0 |                    1 |",
        "| +U |                    0 |                    2 |",
    ] {
        assert!(screen.contains(row), "missing {row}:\n{screen}");
    }

    shell.run("SET 'sql-client.execution.result-mode' = 'table';");
    shell.run(query);
    let screen = shell.wait_count("changelog rows in", 2);
    let table_part = screen.rsplit("result-mode' = 'table'").next().unwrap();
    assert!(table_part.contains("| 0 | 2 |"), "{table_part}");
    assert!(table_part.contains("| 1 | 2 |"), "{table_part}");
    // The first drawing (counts of 1) was replaced, not printed above.
    assert!(!table_part.contains("| 1 | 1 |"), "{table_part}");
    assert_eq!(table_part.matches("| k | c |").count(), 1, "{table_part}");

    shell.run("SET 'sql-client.execution.result-mode' = 'nope';");
    shell.wait_for("a mode error", |s| {
        s.contains("must be one of 'tableau', 'changelog', 'table', found 'nope'")
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Leaving the shell with a background job running says so and stops it: the rows it
/// wrote are flushed into its part file (no checkpointing: written directly).
#[test]
fn quitting_stops_running_jobs_and_keeps_their_output() {
    let dir = temp_dir("quit");
    let shell = Shell::start(&dir, &dir.join("history"));
    create_ticks_and_sink(&shell);
    shell.run("INSERT INTO out_ticks SELECT n FROM ticks;");
    shell.wait_for("the job id", |s| s.contains("[INFO] Submitted job '"));
    // Quit once the job has written rows (not after a fixed time: a busy machine may
    // not have started it yet).
    shell.wait_for_rows_out();
    shell.run("QUIT");
    let screen = shell.wait_for("the exit", |s| s.contains("EXITED:0"));
    assert!(
        screen.contains("[INFO] Stopping 1 running job(s)"),
        "{screen}"
    );
    let mut rows: Vec<u64> = std::fs::read_dir(dir.join("out"))
        .unwrap()
        .flatten()
        .flat_map(|f| {
            std::fs::read_to_string(f.path())
                .unwrap()
                .lines()
                .map(|l| l.parse::<u64>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    rows.sort();
    assert!(!rows.is_empty(), "{screen}");
    // A prefix of the sequence: 1, 2, ..., n.
    assert_eq!(rows, (1..=rows.len() as u64).collect::<Vec<_>>());
    let _ = std::fs::remove_dir_all(&dir);
}
