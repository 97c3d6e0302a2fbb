#!/usr/bin/env python3
"""Fill in Flink 2.3's results in the function conformance table (tests/functions/*.txt).

Run with the Flink oracle's Python (../shared/tools/flink-oracle/install.sh makes it):

    ~/.cache/sluice-flink-venv/bin/python tests/functions/derive_flink.py [FILE...]

For every block the rows are written as JSON lines and read by Flink's filesystem
connector (the same rows Sluice's test reads), every `expr` is evaluated by Flink in batch
mode at parallelism 1 in the time zone UTC, and the `=` line after it is (re)written with
Flink's result type and values, or `= ERROR <message>` when Flink fails. The format is
described in tests/functions.rs. Expected values come from Flink only, never from Sluice.
"""
import datetime
import decimal
import glob
import json
import os
import re
import sys
import tempfile

os.environ["TZ"] = "UTC"

from pyflink.table import EnvironmentSettings, TableEnvironment  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def canonical(value, type_text):
    """A Python value from Flink as the table writes it (see tests/functions.rs)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, datetime.datetime):
        m = re.search(r"TIMESTAMP(?:_LTZ)?\((\d)\)", type_text)
        digits = int(m.group(1)) if m else 6
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        if digits > 0:
            text += "." + ("%06d" % value.microsecond)[:min(digits, 6)]
        return text
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return "x'" + bytes(value).hex() + "'"
    if hasattr(value, "as_dict") and hasattr(value, "get_fields_by_names"):
        # A ROW: a JSON object of its fields (tests/functions.rs writes structs alike).
        try:
            fields = value.as_dict()
        except Exception:
            fields = {f"EXPR${i}": v for i, v in enumerate(value)}
        return {str(k): canonical(v, "") for k, v in fields.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v, "") for v in value]
    if isinstance(value, dict):
        return {str(k): canonical(v, "") for k, v in value.items()}
    return str(value)


def one_line(message):
    message = str(message)
    for line in message.splitlines():
        line = line.strip()
        m = re.search(r"(?:Exception|Error): (.+)", line)
        if m:
            return m.group(1)[:200]
    return message.strip().splitlines()[0][:200] if message.strip() else "error"


def evaluate(env, table, exprs):
    """Flink's result line for each expression (one query; one per expression on error)."""
    def run(items):
        select = ", ".join(f"{e} AS v{i}" for i, e in enumerate(items))
        result = env.execute_sql(f"SELECT {select} FROM {table}")
        cols = result._j_table_result.getResolvedSchema().getColumns()
        types = [str(cols.get(i).getDataType().toString()) for i in range(cols.size())]
        rows = [list(r) for r in result.collect()]
        lines = []
        for i, t in enumerate(types):
            values = [canonical(r[i], t) for r in rows]
            lines.append(f"= {t} " + json.dumps(values, ensure_ascii=False))
        return lines
    try:
        return run(exprs)
    except Exception:
        pass
    out = []
    for e in exprs:
        try:
            out.append(run([e])[0])
            continue
        except Exception as err:  # Flink refused or failed: Sluice must fail too
            failure = "= ERROR " + one_line(err)
        try:
            # Values PyFlink cannot hand to Python (TIMESTAMP_LTZ, years past 9999) are
            # taken as Flink's own CAST(... AS STRING) text.
            schema = env.sql_query(f"SELECT {e} AS v0 FROM {table}")._j_table.getResolvedSchema()
            t = str(schema.getColumns().get(0).getDataType().toString())
            if t.startswith(("ARRAY", "MAP", "ROW")):
                # PyFlink cannot hand over an array with NULL elements: Flink's JSON_STRING
                # of the value instead (maps as objects, rows as objects of their fields).
                line = run([f"JSON_STRING({e})"])[0]
                texts = json.loads(line[line.index("["):])
                values = [None if v is None else json.loads(v) for v in texts]
                out.append(f"= {t} " + json.dumps(values, ensure_ascii=False))
                continue
            line = run([f"CAST({e} AS STRING)"])[0]
            out.append(f"= {t} " + line.split(" ", 2)[2])
        except Exception:
            out.append(failure)
    return out


def derive(env, path, tmp):
    lines = open(path).read().splitlines()
    # Drop old results; remember where each block and expression is.
    lines = [l for l in lines if not l.startswith("= ")]
    # A '! reason' / '~ ...' pair (a deliberate difference) stays after the new '=' line.
    blocks = []
    for n, line in enumerate(lines):
        word = line.split(" ", 1)[0]
        if word == "table":
            blocks.append({"columns": line[6:], "rows": [], "exprs": [], "zone": "UTC"})
        elif word == "zone":
            blocks[-1]["zone"] = line[5:].strip()
        elif word == "row":
            blocks[-1]["rows"].append(line[4:])
        elif word == "expr":
            blocks[-1]["exprs"].append((n, line[5:]))
    results = {}
    for b, block in enumerate(blocks):
        data = os.path.join(tmp, f"{os.path.basename(path)}-{b}.json")
        with open(data, "w") as f:
            f.write("\n".join(block["rows"]) + "\n")
        table = f"t{b}_{abs(hash(path)) % 10000}"
        env.execute_sql(
            f"CREATE TEMPORARY TABLE {table} ({block['columns']}) WITH "
            f"('connector' = 'filesystem', 'path' = '{data}', 'format' = 'json')")
        env.get_config().set("table.local-time-zone", block["zone"])
        exprs = [e for _, e in block["exprs"]]
        # Expressions are written against `t`.
        exprs_t = [re.sub(r"\bt\.", f"{table}.", e) for e in exprs]
        for (n, _), line in zip(block["exprs"], evaluate(env, table, exprs_t)):
            results[n] = line
    out = []
    for n, line in enumerate(lines):
        out.append(line)
        if n in results:
            out.append(results[n])
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"{path}: {len(results)} expressions", file=sys.stderr)


def main():
    files = sys.argv[1:] or sorted(glob.glob(os.path.join(HERE, "*.txt")))
    env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    env.get_config().set("parallelism.default", "1")
    env.get_config().set("table.local-time-zone", "UTC")
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            derive(env, path, tmp)


if __name__ == "__main__":
    main()
