CREATE TABLE readings (sensor STRING, temp INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ('connector' = 'filesystem', 'path' = 'tests/slt/data/readings.csv', 'format' = 'csv');
EXPLAIN SELECT sensor, s FROM (SELECT sensor, s, ROW_NUMBER() OVER (PARTITION BY sensor ORDER BY s DESC) AS rn FROM (SELECT sensor, SUM(temp) OVER (PARTITION BY sensor ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s FROM readings)) WHERE rn <= 2;
EXPLAIN SELECT sensor, temp FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY sensor ORDER BY ts DESC) AS rn FROM readings) WHERE rn = 1;
EXPLAIN SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY temp DESC) AS rn FROM TABLE(TUMBLE(TABLE readings, DESCRIPTOR(ts), INTERVAL '5' SECOND))) WHERE rn <= 3;
EXPLAIN SELECT sensor, temp, ts FROM readings ORDER BY ts, temp;
EXPLAIN SELECT sensor, temp FROM readings LIMIT 3;
EXPLAIN SELECT sensor, temp FROM readings ORDER BY temp DESC LIMIT 2;
EXPLAIN SELECT * FROM (SELECT sensor, c, ROW_NUMBER() OVER (ORDER BY c DESC) AS rn FROM (SELECT sensor, COUNT(*) AS c FROM readings GROUP BY sensor)) WHERE rn <= 2;
EXPLAIN SELECT * FROM (SELECT sensor, s, ROW_NUMBER() OVER (ORDER BY s DESC) AS rn FROM (SELECT sensor, SUM(temp) AS s FROM readings GROUP BY sensor)) WHERE rn <= 2;
