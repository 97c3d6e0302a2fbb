-- Fire alerts: a sensor reports a temperature above 50 °C and then, within 10 minutes,
-- reports smoke. Over a generated stream of 20 sensors, one reading per second in all
-- (each sensor every 20 s), two hours of event time; random values from a fixed seed, so
-- every run gives the same alerts.
-- Run from the project root:
--   cargo run --release --bin sluice -- run sql-examples/sensor_alerts.sql
CREATE TABLE readings (
  n BIGINT,
  temp_c DOUBLE,
  smoke_level INT,
  sensor AS CAST(n % 20 AS INT),
  smoke AS smoke_level >= 97,
  ts AS TO_TIMESTAMP_LTZ(1704067200000 + n * 1000, 3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH (
  'connector' = 'datagen',
  'seed' = '7',
  'fields.n.kind' = 'sequence',
  'fields.n.start' = '0',
  'fields.n.end' = '7199',
  'fields.temp_c.min' = '15',
  'fields.temp_c.max' = '60',
  'fields.smoke_level.min' = '0',
  'fields.smoke_level.max' = '99'
);

SET 'table.local-time-zone' = 'UTC';

SELECT sensor, hot_at, temp_c, smoke_at
FROM readings
MATCH_RECOGNIZE (
  PARTITION BY sensor
  ORDER BY ts
  MEASURES
    H.ts AS hot_at,
    H.temp_c AS temp_c,
    S.ts AS smoke_at
  ONE ROW PER MATCH
  AFTER MATCH SKIP PAST LAST ROW
  PATTERN (H X*? S) WITHIN INTERVAL '10' MINUTE
  DEFINE
    H AS H.temp_c > 50,
    S AS S.smoke
);
