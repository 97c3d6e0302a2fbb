//! Sluice embedded in a small tokio service: an ingest task pushes click events into a
//! `channel` table, a continuous query counts clicks per user in 10-second windows, and the
//! service consumes the results as an async stream of Arrow batches.
//!
//! Run: `cargo run --example embedded_service`

use std::sync::Arc;

use sluice::arrow::array::{RecordBatch, StringArray, TimestampMillisecondArray};
use sluice::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use sluice::{Engine, EngineConfig, StatementResult};

#[tokio::main]
async fn main() -> Result<(), sluice::SluiceError> {
    let mut engine = Engine::new(EngineConfig::default());
    engine.execute_script(
        "CREATE TABLE clicks (user_id STRING, ts TIMESTAMP(3), \
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) \
         WITH ('connector' = 'channel')",
    )?;
    let clicks = engine.channel_source("clicks");
    let query = sluice::parse_script(
        "SELECT user_id, window_start, COUNT(*) AS clicks \
         FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '10' SECOND)) \
         GROUP BY user_id, window_start, window_end",
    )?;
    let StatementResult::Query(mut job) = engine.execute(&query[0])? else {
        unreachable!("a SELECT is a query")
    };

    // The ingest side: one minute of clicks from three users, in batches of 50.
    let schema = Arc::new(Schema::new(vec![
        Field::new("user_id", DataType::Utf8, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]));
    let ingest = tokio::task::spawn_blocking(move || -> Result<(), sluice::SluiceError> {
        let users = ["ada", "grace", "linus"];
        for start in (0..600i64).step_by(50) {
            let n = start..start + 50;
            let batch = RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(StringArray::from(
                        n.clone()
                            .map(|i| users[(i % 3) as usize])
                            .collect::<Vec<_>>(),
                    )),
                    Arc::new(TimestampMillisecondArray::from(
                        n.map(|i| 1_700_000_000_000 + i * 100).collect::<Vec<_>>(),
                    )),
                ],
            )?;
            clicks.send(batch)?;
        }
        Ok(()) // dropping `clicks` ends the input
    });

    // The serving side: results as they are produced.
    let mut windows = 0;
    while let Some(batch) = job.next().await {
        let batch = batch?;
        windows += batch.num_rows();
        for row in 0..batch.num_rows() {
            println!("{}", sluice::format::row_values(&batch, row)?.join("  "));
        }
    }
    ingest.await.expect("the ingest task runs")?;
    println!("{windows} window results");
    Ok(())
}
