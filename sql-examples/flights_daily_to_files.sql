-- Writes a daily delay report per origin into CSV part files under
-- target/sql-examples/daily_delays/ (the filesystem sink writes a directory).
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

CREATE TABLE daily_delays (
  day_start TIMESTAMP(3),
  origin STRING,
  departures BIGINT,
  late_departures BIGINT,
  avg_dep_delay DOUBLE
) WITH (
  'connector' = 'filesystem',
  'path' = 'target/sql-examples/daily_delays',
  'format' = 'csv'
);

INSERT INTO daily_delays
SELECT window_start, origin, COUNT(*), COUNT(*) FILTER (WHERE dep_delay > 15), AVG(dep_delay)
FROM TABLE(TUMBLE(TABLE flights, DESCRIPTOR(sched_dep_ts), INTERVAL '1' DAY))
GROUP BY window_start, window_end, origin;
