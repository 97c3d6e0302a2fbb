#!/usr/bin/env python3
"""Derives the expected results of the sql-examples with an independent engine (SQLite,
from Python's standard library), as batch GROUP BYs over the same input file.

Writes tests/expected/<example>.csv.gz, compared by tests/examples.rs as multisets
(floats with a relative tolerance). Rerun only when an example's query or data changes:
  python3 tests/expected/derive_expected.py
"""
import csv
import datetime
import gzip
import io
import os
import sqlite3
import zoneinfo

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
src = os.path.join(root, "sql-examples", "data", "flights_2013.csv.gz")

db = sqlite3.connect(":memory:")
with gzip.open(src, "rt", newline="") as f:
    reader = csv.reader(f)
    header = next(reader)
    db.execute("CREATE TABLE flights (%s)" % ", ".join('"%s"' % h for h in header))
    num = {"dep_time", "dep_delay", "arr_delay"}

    def conv(name, v):
        if v == "NA" or v == "":
            return None
        if name in num:
            return float(v)
        return v

    db.executemany(
        "INSERT INTO flights VALUES (%s)" % ", ".join("?" * len(header)),
        ([conv(h, v) for h, v in zip(header, row)] for row in reader),
    )


def fmt(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write(name, columns, rows):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([fmt(v) for v in r])
    path = os.path.join(here, name + ".csv.gz")
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename=name + ".csv", mode="wb", fileobj=raw, mtime=0) as gz:
            gz.write(buf.getvalue().encode())
    print(f"{name}: {len(rows)} rows")


# flights_hourly.sql: one-hour tumbling windows by origin.
rows = db.execute(
    """
    SELECT strftime('%Y-%m-%d %H:00:00', sched_dep_ts) AS ws,
           strftime('%Y-%m-%d %H:00:00', sched_dep_ts, '+1 hour') AS we,
           origin, COUNT(*), AVG(dep_delay), MAX(dep_delay)
    FROM flights GROUP BY ws, we, origin ORDER BY ws, origin
    """
).fetchall()
write("flights_hourly",
      ["window_start", "window_end", "origin", "departures", "avg_dep_delay", "max_dep_delay"], rows)

# flights_hop.sql: 3-hour windows every hour, JFK only, by carrier.
rows = db.execute(
    """
    WITH w AS (
      SELECT f.*, strftime('%Y-%m-%d %H:00:00', sched_dep_ts, '-' || k.k || ' hours') AS ws
      FROM flights f, (SELECT 0 AS k UNION ALL SELECT 1 UNION ALL SELECT 2) k
      WHERE origin = 'JFK'
    )
    SELECT ws, strftime('%Y-%m-%d %H:%M:%S', ws, '+3 hours') AS we, carrier,
           COUNT(*), COUNT(*) - COUNT(dep_time), COUNT(DISTINCT dest)
    FROM w GROUP BY ws, we, carrier ORDER BY ws, carrier
    """
).fetchall()
write("flights_hop", ["window_start", "window_end", "carrier", "departures", "cancelled", "destinations"], rows)

# flights_daily_to_files.sql: daily windows by origin, written without a header.
rows = db.execute(
    """
    SELECT strftime('%Y-%m-%d 00:00:00', sched_dep_ts) AS ds, origin, COUNT(*),
           SUM(CASE WHEN dep_delay > 15 THEN 1 ELSE 0 END), AVG(dep_delay)
    FROM flights GROUP BY ds, origin ORDER BY ds, origin
    """
).fetchall()
write("flights_daily_to_files", ["day_start", "origin", "departures", "late_departures", "avg_dep_delay"], rows)

# flights_most_delayed.sql: per day and origin, the three largest departure delays
# (window Top-N; ties in file order, which is rowid order here).
rows = db.execute(
    """
    SELECT ds, origin, carrier, flight, dep_delay, rn FROM (
      SELECT strftime('%Y-%m-%d 00:00:00', sched_dep_ts) AS ds, origin, carrier, flight,
             dep_delay,
             ROW_NUMBER() OVER (PARTITION BY strftime('%Y-%m-%d', sched_dep_ts), origin
                                ORDER BY dep_delay DESC, rowid) AS rn
      FROM flights WHERE dep_delay IS NOT NULL)
    WHERE rn <= 3 ORDER BY ds, origin, rn
    """
).fetchall()
write("flights_most_delayed", ["day_start", "origin", "carrier", "flight", "dep_delay", "rn"], rows)

# flights_late_streaks.sql (MATCH_RECOGNIZE, PATTERN (L{3,}), L: dep_delay > 60, skip past
# last row): per tailnum, in file order (the file is in scheduled-departure order; ties
# keep file order), every maximal run of three or more rows with dep_delay > 60. A row
# with no dep_delay (cancelled) ends a run. Plain Python, no SQL engine needed.
runs = []
by_tail = {}
with gzip.open(src, "rt", newline="") as f:
    reader = csv.DictReader(f)
    for row in reader:
        if row["tailnum"] in ("NA", ""):
            continue
        by_tail.setdefault(row["tailnum"], []).append(row)


def late(r):
    return r["dep_delay"] not in ("NA", "") and float(r["dep_delay"]) > 60


for tail, rows_of in by_tail.items():
    rows_of.sort(key=lambda r: r["sched_dep_ts"])  # stable: ties keep file order
    run = []
    for r in rows_of + [None]:
        if r is not None and late(r):
            run.append(r)
            continue
        if len(run) >= 3:
            runs.append((tail, run[0]["sched_dep_ts"], run[-1]["sched_dep_ts"],
                         int(run[0]["flight"]), int(run[-1]["flight"]), len(run),
                         max(float(x["dep_delay"]) for x in run)))
        run = []
runs.sort()
write("flights_late_streaks",
      ["tailnum", "first_departure", "last_departure", "first_flight", "last_flight",
       "departures", "max_delay"], runs)


# The lookup tables of the join examples (sql-examples/data/{planes,airlines,airports}.csv):
# as Sluice reads them, an empty field and 'NA' are NULL for every type; the columns the
# examples read as INT or DOUBLE become numbers.
def load_lookup(table, numeric):
    path = os.path.join(root, "sql-examples", "data", table + ".csv")
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        db.execute("CREATE TABLE %s (%s)" % (table, ", ".join('"%s"' % h for h in header)))

        def conv(name, v):
            if v == "NA" or v == "":
                return None
            if name in numeric:
                return float(v) if "." in v else int(v)
            return v

        db.executemany(
            "INSERT INTO %s VALUES (%s)" % (table, ", ".join("?" * len(header))),
            ([conv(h, v) for h, v in zip(header, row)] for row in reader),
        )


load_lookup("planes", {"year", "engines", "seats", "speed"})
load_lookup("airlines", set())
load_lookup("airports", {"lat", "lon", "alt", "tz"})

# flights_late_by_manufacturer.sql: departures over 60 minutes late, LEFT JOIN planes on
# tailnum (a NULL tailnum matches no plane), per manufacturer (NULL: no plane row).
rows = db.execute(
    """
    SELECT p.manufacturer, COUNT(*), AVG(f.dep_delay)
    FROM flights f LEFT JOIN planes p ON f.tailnum = p.tailnum
    WHERE f.dep_delay > 60
    GROUP BY p.manufacturer ORDER BY p.manufacturer
    """
).fetchall()
write("flights_late_by_manufacturer", ["manufacturer", "late_departures", "avg_dep_delay"], rows)

# flights_delay_by_airline.sql: inner join with airlines on carrier, per airline name;
# AVG skips the flights without an arrival delay.
rows = db.execute(
    """
    SELECT a.name, COUNT(*), AVG(f.arr_delay)
    FROM flights f JOIN airlines a ON f.carrier = a.carrier
    GROUP BY a.name ORDER BY a.name
    """
).fetchall()
write("flights_delay_by_airline", ["airline", "num_flights", "avg_arr_delay"], rows)

# flights_unknown_destinations.sql: dest NOT IN (SELECT faa FROM airports), per dest.
# SQLite's NOT IN is null-aware as SQL's (and airports has no NULL faa).
rows = db.execute(
    """
    SELECT dest, COUNT(*) FROM flights
    WHERE dest NOT IN (SELECT faa FROM airports)
    GROUP BY dest ORDER BY dest
    """
).fetchall()
write("flights_unknown_destinations", ["dest", "num_flights"], rows)

# flights_weather_before_departure.sql: an interval join of the flights with the weather
# at their origin, observations from one hour before the scheduled departure up to it (both
# ends included), per origin and month. The weather's obs_ts is UTC and the flights' time
# is New York wall-clock time: obs_ts is converted here with Python's time zone database
# (the example converts it with 2013's daylight saving dates), as a naive local time.
new_york = zoneinfo.ZoneInfo("America/New_York")
weather_src = os.path.join(root, "sql-examples", "data", "weather_2013.csv.gz")
db.execute("CREATE TABLE weather (origin, obs_local, pressure, wind_speed, wind_gust)")
with gzip.open(weather_src, "rt", newline="") as f:
    reader = csv.DictReader(f)

    def weather_row(r):
        utc = datetime.datetime.strptime(r["obs_ts"], "%Y-%m-%d %H:%M:%S").replace(
            tzinfo=datetime.timezone.utc)
        local = utc.astimezone(new_york).strftime("%Y-%m-%d %H:%M:%S")
        num = [None if r[c] in ("NA", "") else float(r[c])
               for c in ("pressure", "wind_speed", "wind_gust")]
        return [r["origin"], local] + num

    db.executemany("INSERT INTO weather VALUES (?, ?, ?, ?, ?)", (weather_row(r) for r in reader))
db.execute("CREATE INDEX weather_origin_time ON weather (origin, obs_local)")
rows = db.execute(
    """
    SELECT f.origin, CAST(f.month AS INTEGER) AS m, COUNT(*), AVG(w.wind_speed),
           MAX(w.wind_gust), AVG(w.pressure)
    FROM flights f JOIN weather w
      ON f.origin = w.origin
      AND w.obs_local BETWEEN datetime(f.sched_dep_ts, '-1 hour') AND f.sched_dep_ts
    GROUP BY f.origin, m ORDER BY f.origin, m
    """
).fetchall()
write("flights_weather_before_departure",
      ["origin", "month", "pairs", "avg_wind_speed", "max_wind_gust", "avg_pressure"], rows)

# flights_weather_at_departure.sql: a temporal join of the flights with the weather at
# their origin valid at the scheduled departure: the observation with the latest local
# time at or before it (of two with the same local time, in the hour the clocks go back,
# the later one in UTC), per origin and month.
db.execute("CREATE TABLE weather_v (origin, obs_local, obs_ts, pressure, wind_speed, wind_gust)")
with gzip.open(weather_src, "rt", newline="") as f:
    reader = csv.DictReader(f)
    db.executemany(
        "INSERT INTO weather_v VALUES (?, ?, ?, ?, ?, ?)",
        ((w[0], w[1], r["obs_ts"], w[2], w[3], w[4])
         for r in reader for w in [weather_row(r)]),
    )
db.execute("CREATE INDEX weather_v_origin_time ON weather_v (origin, obs_local, obs_ts)")
rows = db.execute(
    """
    SELECT f.origin, CAST(f.month AS INTEGER) AS m, COUNT(*), AVG(f.dep_delay),
           AVG(w.wind_speed), MAX(w.wind_gust), AVG(w.pressure)
    FROM flights f JOIN weather_v w ON w.rowid = (
      SELECT v.rowid FROM weather_v v
      WHERE v.origin = f.origin AND v.obs_local <= f.sched_dep_ts
      ORDER BY v.obs_local DESC, v.obs_ts DESC LIMIT 1)
    GROUP BY f.origin, m ORDER BY f.origin, m
    """
).fetchall()
write("flights_weather_at_departure",
      ["origin", "month", "departures", "avg_dep_delay", "avg_wind_speed", "max_wind_gust",
       "avg_pressure"], rows)
