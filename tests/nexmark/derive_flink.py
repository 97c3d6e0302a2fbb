#!/usr/bin/env python3
"""Derives the expected results of the Nexmark queries (sql-examples/nexmark/qN.sql) with
Apache Flink 2.3 (../shared/tools/flink-oracle), for tests/nexmark.rs.

1. The `sluice` binary writes the conformance stream (100,000 events at 1,000 events per
   second: 100 s of event time, Sluice's built-in generator) to a JSON-lines file; Flink's
   own Nexmark generator is a different program, so Flink reads Sluice's events.
2. Each query runs in Flink over a filesystem table with the same columns, computed
   `dateTime` and watermark, and the same views; its INSERT becomes the SELECT it inserts,
   and Flink's final table (an updating result folded) is the expected table. Where Flink
   cannot run the query as written, the script rewrites it to an equivalent one, and says so:
   q13's lookup join on a static file is a regular join with it (Flink's filesystem tables
   cannot be looked up); q14's count_char (a Java UDF) is CHAR_LENGTH arithmetic.
   q6 is refused by both engines (FLINK-19059), q12 (processing time) is checked by its
   total count, which is the bid count Flink finds. q9's and q18's Top-1 changelogs are
   folded as upserts (UPSERT_KEYS).
3. A result of at most SMALL rows is written whole (tests/nexmark/expected/qN.csv.gz); a
   larger one as its row count and the SHA-256 of its sorted, normalized rows (qN.digest),
   which tests/nexmark.rs computes the same way.

Usage (from the repository root, after `cargo build --release`):
  ~/.cache/sluice-flink-venv/bin/python tests/nexmark/derive_flink.py [q0 q1 ...]
  python3 tests/nexmark/derive_flink.py --bench-sql DIR EVENTS [json|csv]   (the benchmark's Flink SQL)
"""
import csv
import gzip
import hashlib
import io
import os
import re
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
queries_dir = os.path.join(root, "sql-examples", "nexmark")
expected_dir = os.path.join(here, "expected")
oracle = os.environ.get(
    "FLINK_ORACLE", os.path.join(root, "..", "shared", "tools", "flink-oracle", "run_flink_sql.py"))
sluice = os.environ.get("SLUICE_BIN", os.path.join(root, "target", "release", "sluice"))
SMALL = 20000

# Top-1 queries without the row number: Flink emits a partition's new first row as `+U`
# without retracting the row it replaces (an upsert stream keyed by the partition), so
# their changelog is folded as an upsert by these columns.
UPSERT_KEYS = {"q9": ["id"], "q18": ["bidder", "auction"]}

# Updating aggregates whose changelog (two rows per bid) is slow to collect through Python:
# Flink's mini-batch folds it before it leaves the job; the final table is the same.
MINI_BATCH = {"q4", "q15", "q16", "q17"}
MINI_BATCH_SETTINGS = [("table.exec.mini-batch.enabled", "true"),
                       ("table.exec.mini-batch.allow-latency", "1 s"),
                       ("table.exec.mini-batch.size", "10000")]

# Where the benchmark's Flink run of q10 writes its partitioned files (beside the events).
FLINK_FILES_OUT = "flink-files-out"

QUERIES = ["q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q9", "q10", "q11", "q11_legacy",
           "q13", "q14", "q15", "q16", "q17", "q18", "q19", "q20", "q21", "q22", "q23"]


def conformance(sql):
    """The stream of the conformance test: 100,000 events at 1,000 per second. The same
    substitution is in tests/nexmark.rs."""
    sql = sql.replace("'events.num' = '1000000'", "'events.num' = '100000'")
    sql = sql.replace("'first-event.rate' = '10000'", "'first-event.rate' = '1000'")
    return sql.replace("'next-event.rate' = '10000'", "'next-event.rate' = '1000'")


def split_statements(sql):
    body = "\n".join(l for l in sql.splitlines() if not l.strip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]


def write_events(work):
    ddl = conformance(open(os.path.join(queries_dir, "ddl.sql")).read())
    columns = re.search(r"CREATE TABLE nexmark \((.*?)`dateTime` AS", ddl, re.S).group(1)
    out = os.path.join(work, "events")
    gen = ddl + f"""
CREATE TABLE events ({columns.rstrip().rstrip(',')})
WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'json');
INSERT INTO events SELECT event_type, person, auction, bid FROM nexmark;
"""
    path = os.path.join(work, "gen.sql")
    open(path, "w").write(gen)
    subprocess.run([sluice, "run", path], check=True, cwd=root)
    return out


def flink_sql(name, events, bench=False, fmt="json"):
    """The query as Flink runs it over the events at `events` (in format `fmt`: json or
    csv). For the conformance test the watermark follows every row; for the benchmark
    (`bench`) Flink's defaults stay."""
    text = open(os.path.join(queries_dir, name + ".sql")).read()
    if not bench:
        text = conformance(text)
    text = re.sub(r"WITH \(\s*'connector' = 'nexmark'.*?\);",
                  f"WITH ('connector' = 'filesystem', 'path' = '{events}', 'format' = '{fmt}');",
                  text, count=1, flags=re.S)
    # In the benchmark a query whose sink writes files (q10) writes them in Flink too,
    # under FLINK_FILES_OUT next to the events; the others' sinks are the oracle's.
    writes_files = bench and "'connector' = 'filesystem'" in text.split("CREATE TABLE nexmark_q")[-1]
    out = []
    for stmt in split_statements(text):
        if writes_files and re.match(r"CREATE TABLE nexmark_q\w+", stmt):
            files = os.path.join(os.path.dirname(events), FLINK_FILES_OUT)
            out.append(re.sub(r"'path' = '[^']*'", f"'path' = '{files}'", stmt))
            continue
        if re.match(r"CREATE TABLE nexmark_q\w+", stmt) or stmt.startswith("CREATE FUNCTION"):
            continue
        if not writes_files:
            stmt = re.sub(r"^INSERT INTO nexmark_q\w+\s*", "", stmt)
        stmt = stmt.replace("count_char(extra, 'c')",
                            "CHAR_LENGTH(extra) - CHAR_LENGTH(REPLACE(extra, 'c', ''))")
        stmt = stmt.replace("JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S",
                            "JOIN side_input AS S")
        stmt = stmt.replace("'sql-examples/nexmark/side_input.txt'",
                            "'" + os.path.join(queries_dir, "side_input.txt") + "'")
        out.append(stmt)
    if not bench:
        out.insert(0, "SET 'pipeline.auto-watermark-interval' = '0'")
        if name in MINI_BATCH:
            out[:0] = [f"SET '{k}' = '{v}'" for k, v in MINI_BATCH_SETTINGS]
    return ";\n".join(out) + ";\n"


def normalized_rows(csv_text):
    """Sorted rows, as tests/nexmark.rs normalizes them: fields joined by ',', a
    timestamp's '.000' dropped."""
    rows = []
    reader = csv.reader(io.StringIO(csv_text))
    header = next(reader, [])
    for r in reader:
        fields = []
        for v in r:
            if len(v) == 23 and v[10] == " " and v.endswith(".000"):
                v = v[:-4]
            fields.append(v)
        rows.append(",".join(fields))
    rows.sort()
    return header, rows


def write_bench_sql(out_dir, events, fmt):
    """`--bench-sql DIR EVENTS FORMAT`: each query's Flink form over the events file (or
    directory) EVENTS in FORMAT (json or csv) into DIR/qN.sql, for
    `scripts/flink-nexmark-bench` (called by `cargo bench --bench nexmark`)."""
    os.makedirs(out_dir, exist_ok=True)
    for name in QUERIES + ["q12"]:
        with open(os.path.join(out_dir, name + ".sql"), "w") as f:
            f.write(flink_sql(name, os.path.abspath(events), bench=True, fmt=fmt))


def fold_upsert(changelog, key_names):
    """The final table of an upsert changelog (the oracle's `--changelog` CSV: op column
    first): `+I`/`+U` set the row of its key, `-U`/`-D` delete it. Written as the oracle
    writes a result (header, sorted rows)."""
    with open(changelog, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)[1:]
        keys = [header.index(k) for k in key_names]
        table = {}
        for op, *row in reader:
            key = tuple(row[i] for i in keys)
            if op in ("+I", "+U"):
                table[key] = tuple(row)
            else:
                table.pop(key, None)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(header)
    w.writerows(sorted(table.values()))
    return out.getvalue()


def main():
    if sys.argv[1:2] == ["--bench-sql"]:
        if len(sys.argv) not in (4, 5):
            sys.exit("usage: derive_flink.py --bench-sql DIR EVENTS [json|csv]")
        write_bench_sql(sys.argv[2], sys.argv[3], (sys.argv[4:] or ["json"])[0])
        return
    wanted = sys.argv[1:] or QUERIES
    os.makedirs(expected_dir, exist_ok=True)
    python = sys.executable
    with tempfile.TemporaryDirectory() as work:
        events = write_events(work)
        for name in wanted:
            sql_path = os.path.join(work, name + ".sql")
            open(sql_path, "w").write(flink_sql(name, events))
            out = os.path.join(work, name + ".csv")
            changelog = os.path.join(work, name + ".changelog.csv")
            args = [python, oracle, sql_path, "--out", out]
            if name in UPSERT_KEYS:
                args += ["--changelog", changelog]
            subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
            if name in UPSERT_KEYS:
                text = fold_upsert(changelog, UPSERT_KEYS[name])
            else:
                text = open(out).read()
            header, rows = normalized_rows(text)
            for old in (name + ".csv.gz", name + ".digest"):
                p = os.path.join(expected_dir, old)
                if os.path.exists(p):
                    os.remove(p)
            if len(rows) <= SMALL:
                with gzip.open(os.path.join(expected_dir, name + ".csv.gz"), "wt") as f:
                    f.write(text)
                kind = "whole"
            else:
                digest = hashlib.sha256("\n".join(rows).encode()).hexdigest()
                with open(os.path.join(expected_dir, name + ".digest"), "w") as f:
                    f.write(f"header {','.join(header)}\nrows {len(rows)}\nsha256 {digest}\n")
                kind = "digest"
            print(f"{name}: {len(rows)} rows ({kind})", flush=True)


if __name__ == "__main__":
    main()
