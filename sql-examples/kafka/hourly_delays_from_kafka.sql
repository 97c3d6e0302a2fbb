-- Departures per origin airport per scheduled hour, read from the Kafka topic `flights`
-- (written by flights_to_kafka.sql) and written to the topic `hourly_delays`: the same
-- result as ../flights_hourly.sql, through Kafka. The flights of an origin are in one
-- partition (keyed by origin), and watermarks are generated per partition, so no flight
-- is late although the partitions are read in turn.
-- Needs the topics (README, "Kafka"):
--   scripts/kafka-test-server tansu topic create hourly_delays --partitions 1 --broker tcp://$BOOTSTRAP
--   cargo run --release --bin sluice -- run sql-examples/kafka/hourly_delays_from_kafka.sql
CREATE TABLE flights (
  origin STRING,
  carrier STRING,
  flight INT,
  dest STRING,
  dep_delay DOUBLE,
  sched_dep_ts TIMESTAMP(3),
  WATERMARK FOR sched_dep_ts AS sched_dep_ts - INTERVAL '5' MINUTE
) WITH (
  'connector' = 'kafka',
  'topic' = 'flights',
  'properties.bootstrap.servers' = '127.0.0.1:9094',
  'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = 'latest-offset',
  'value.format' = 'json'
);

CREATE TABLE hourly_delays (
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  origin STRING,
  departures BIGINT,
  avg_dep_delay DOUBLE,
  max_dep_delay DOUBLE
) WITH (
  'connector' = 'kafka',
  'topic' = 'hourly_delays',
  'properties.bootstrap.servers' = '127.0.0.1:9094',
  'format' = 'json'
);

INSERT INTO hourly_delays
SELECT window_start, window_end, origin, COUNT(*) AS departures,
       AVG(dep_delay) AS avg_dep_delay, MAX(dep_delay) AS max_dep_delay
FROM TABLE(TUMBLE(TABLE flights, DESCRIPTOR(sched_dep_ts), INTERVAL '1' HOUR))
GROUP BY window_start, window_end, origin;
