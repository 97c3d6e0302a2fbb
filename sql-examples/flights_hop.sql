-- Sliding view of departures: for every 3-hour window starting each hour, per carrier,
-- the departures, the cancelled flights (no dep_time) and the distinct destinations.
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

SELECT window_start, window_end, carrier,
       COUNT(*) AS departures,
       COUNT(*) - COUNT(dep_time) AS cancelled,
       COUNT(DISTINCT dest) AS destinations
FROM TABLE(HOP(TABLE flights, DESCRIPTOR(sched_dep_ts), INTERVAL '1' HOUR, INTERVAL '3' HOUR))
WHERE origin = 'JFK'
GROUP BY window_start, window_end, carrier;
