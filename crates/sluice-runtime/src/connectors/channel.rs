//! The `channel` connector: a source an embedding application feeds with Arrow batches
//! (`Engine::channel_source`). The table's declared columns are the batches' schema;
//! watermarks come from the table's `WATERMARK` clause, as for any source.
//!
//! Guarantee: the application's batches are not replayable, so a restart cannot rewind
//! this source: restoring a checkpoint of a job that reads a channel fails with a clear
//! error, and a job with a channel source should not enable restarts.

use std::collections::HashMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

use datafusion_common::arrow::array::RecordBatch;
use datafusion_common::arrow::datatypes::SchemaRef;
use sluice_common::{Result, SluiceError};

use crate::connectors::Source;
use crate::metrics::JobMetrics;

/// Channels registered by the application, by table name, waiting for a job to read them.
pub type ChannelRegistry = Arc<Mutex<HashMap<String, Receiver<RecordBatch>>>>;

/// The application's end of a `channel` table: pushes batches into the job that reads
/// the table. Dropping it ends the input (the job then fires its last windows).
#[derive(Debug, Clone)]
pub struct ChannelSender {
    table: String,
    tx: SyncSender<RecordBatch>,
}

impl ChannelSender {
    /// Pushes a batch of rows (the table's declared columns, by position); waits while
    /// the job is 16 batches behind (backpressure).
    ///
    /// # Errors
    /// The job reading the table has stopped.
    pub fn send(&self, batch: RecordBatch) -> Result<()> {
        self.tx.send(batch).map_err(|_| {
            SluiceError::Execution(format!(
                "no running job reads channel table '{}' any more",
                self.table
            ))
        })
    }
}

/// Registers a new channel for table `table`, replacing one not yet taken by a job.
pub fn register(registry: &ChannelRegistry, table: &str) -> ChannelSender {
    let (tx, rx) = sync_channel(16);
    registry
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(table.to_string(), rx);
    ChannelSender {
        table: table.to_string(),
        tx,
    }
}

/// Reads the batches an application pushes (see the module docs).
pub struct ChannelSource {
    table: String,
    rx: Receiver<RecordBatch>,
    schema: SchemaRef,
    rows: u64,
    metrics: Arc<JobMetrics>,
}

impl ChannelSource {
    /// Takes the channel registered for `table`.
    ///
    /// # Errors
    /// No channel is registered for it (call `Engine::channel_source` before starting
    /// the job), or another job already reads it.
    pub fn take(
        registry: &ChannelRegistry,
        table: &str,
        schema: SchemaRef,
        metrics: Arc<JobMetrics>,
    ) -> Result<Self> {
        let rx = registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(table)
            .ok_or_else(|| {
                SluiceError::Config(format!(
                    "table '{table}' uses the 'channel' connector, but no channel is open for \
                     it: call Engine::channel_source(\"{table}\") before starting the job (a \
                     channel feeds one job)"
                ))
            })?;
        Ok(ChannelSource {
            table: table.to_string(),
            rx,
            schema,
            rows: 0,
            metrics,
        })
    }
}

impl Source for ChannelSource {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let Ok(batch) = self.rx.recv() else {
            return Ok(None); // every sender dropped: the input ended
        };
        if batch.num_columns() != self.schema.fields().len() {
            return Err(SluiceError::Data(format!(
                "a batch pushed into channel table '{}' has {} columns; the table declares {}",
                self.table,
                batch.num_columns(),
                self.schema.fields().len()
            )));
        }
        let columns = batch
            .columns()
            .iter()
            .zip(self.schema.fields())
            .map(|(c, f)| {
                if c.data_type() == f.data_type() {
                    Ok(std::sync::Arc::clone(c))
                } else {
                    datafusion_common::arrow::compute::cast(c, f.data_type()).map_err(|e| {
                        SluiceError::Data(format!(
                            "column '{}' of a batch pushed into channel table '{}': {e}",
                            f.name(),
                            self.table
                        ))
                    })
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new(std::sync::Arc::clone(&self.schema), columns)?;
        self.rows += batch.num_rows() as u64;
        JobMetrics::add(&self.metrics.rows_in, batch.num_rows() as u64);
        Ok(Some(batch))
    }

    fn describe(&self) -> String {
        format!("channel '{}'", self.table)
    }

    fn position(&self) -> serde_json::Value {
        serde_json::json!({ "rows": self.rows })
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
        if position.is_null() || position["rows"].as_u64() == Some(0) {
            return Ok(());
        }
        Err(SluiceError::Execution(format!(
            "channel table '{}' cannot be rewound to a checkpoint: the application's batches \
             are not replayable",
            self.table
        )))
    }
}
