//! The `channel` connector: a source an embedding application feeds with Arrow batches
//! (`Engine::channel_source`). The table's declared columns are the batches' schema;
//! watermarks come from the table's `WATERMARK` clause, as for any source.
//!
//! A `channel` table written by `INSERT INTO` calls the application's callback
//! (`Engine::sink_callback`) with each batch of result rows.
//!
//! Guarantee: the application's batches are not replayable, so a restart after a failure
//! cannot rewind this source (it fails with a clear error; a job with a channel source
//! should not enable restarts). A new job started from a checkpoint (after
//! `stop_with_checkpoint`) resumes: the application asks the sender where
//! (`ChannelSender::resume_after`) and pushes the rows from there.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};

use datafusion_common::arrow::array::RecordBatch;
use datafusion_common::arrow::datatypes::SchemaRef;
use sluice_common::{Result, SluiceError};

use crate::connectors::{BatchSink, Committable, Source};
use crate::message::StreamBatch;
use crate::metrics::JobMetrics;

/// Channels registered by the application, by table name, waiting for a job to read them.
pub type ChannelRegistry = Arc<Mutex<HashMap<String, (Receiver<ChannelItem>, Arc<AtomicU64>)>>>;

/// What travels from the application to a channel source.
#[derive(Debug)]
pub enum ChannelItem {
    /// Rows (the table's declared columns, by position).
    Rows(RecordBatch),
    /// A watermark (ms since the epoch; for a `TIMESTAMP(3)` rowtime, the wall-clock
    /// time read as UTC): no later row of this channel is earlier.
    Watermark(i64),
}

/// The application's end of a `channel` table: pushes batches into the job that reads
/// the table. Dropping it ends the input (the job then fires its last windows).
#[derive(Debug, Clone)]
pub struct ChannelSender {
    table: String,
    tx: SyncSender<ChannelItem>,
    /// Rows of the channel a restored checkpoint had already read (set when the job
    /// starts).
    resume_after: Arc<AtomicU64>,
}

impl ChannelSender {
    /// Pushes a batch of rows (the table's declared columns, by position); waits while
    /// the job is 16 batches behind (backpressure).
    ///
    /// # Errors
    /// The job reading the table has stopped.
    pub fn send(&self, batch: RecordBatch) -> Result<()> {
        self.push(ChannelItem::Rows(batch))
    }

    /// Pushes a watermark (ms since the epoch): event time has reached `watermark_ms`,
    /// so windows ending at or before it fire even if no row follows. A row pushed later
    /// with an earlier event time is late. A watermark below the current one is ignored.
    ///
    /// # Errors
    /// The job reading the table has stopped.
    pub fn send_watermark(&self, watermark_ms: i64) -> Result<()> {
        self.push(ChannelItem::Watermark(watermark_ms))
    }

    /// How many rows of this channel the checkpoint the job started from had read
    /// (0 when it started without one): after `stop_with_checkpoint` and a restart from
    /// that checkpoint in a new engine, the application pushes its rows from this
    /// index on, and the job continues exactly where it stopped. Known once the job
    /// reading the table has started.
    pub fn resume_after(&self) -> u64 {
        self.resume_after.load(Ordering::SeqCst)
    }

    fn push(&self, item: ChannelItem) -> Result<()> {
        self.tx.send(item).map_err(|_| {
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
    let resume_after = Arc::new(AtomicU64::new(0));
    registry
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(table.to_string(), (rx, Arc::clone(&resume_after)));
    ChannelSender {
        table: table.to_string(),
        tx,
        resume_after,
    }
}

/// Reads the batches an application pushes (see the module docs).
pub struct ChannelSource {
    table: String,
    rx: Receiver<ChannelItem>,
    schema: SchemaRef,
    /// The latest watermark pushed and not yet taken by the driver.
    watermark: Option<i64>,
    /// Shared with the sender: rows a restored checkpoint had read.
    resume_after: Arc<AtomicU64>,
    /// The job was restarted after a failure (attempt > 0): what the channel delivered
    /// before is gone, so it cannot resume.
    restarted: bool,
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
        attempt: u32,
    ) -> Result<Self> {
        let (rx, resume_after) = registry
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
            watermark: None,
            resume_after,
            restarted: attempt > 0,
            rows: 0,
            metrics,
        })
    }
}

impl Source for ChannelSource {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        // Waits at most 50 ms, so that checkpoints and stops are not held up while the
        // application pushes nothing (an empty batch carries no rows).
        let batch = match self.rx.recv_timeout(std::time::Duration::from_millis(50)) {
            Err(RecvTimeoutError::Disconnected) => return Ok(None), // the input ended
            Err(RecvTimeoutError::Timeout) => {
                return Ok(Some(RecordBatch::new_empty(std::sync::Arc::clone(
                    &self.schema,
                ))))
            }
            Ok(ChannelItem::Rows(batch)) => batch,
            Ok(ChannelItem::Watermark(ms)) => {
                self.watermark = Some(self.watermark.map_or(ms, |w| w.max(ms)));
                return Ok(Some(RecordBatch::new_empty(std::sync::Arc::clone(
                    &self.schema,
                ))));
            }
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

    fn take_watermark(&mut self) -> Option<i64> {
        self.watermark.take()
    }

    fn position(&self) -> serde_json::Value {
        serde_json::json!({ "rows": self.rows })
    }

    /// A new job starting from a checkpoint resumes after the rows it had read (the
    /// application pushes the rest, see [`ChannelSender::resume_after`]); a restart after
    /// a failure cannot, since the rows the channel delivered are gone.
    fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
        let rows = position["rows"].as_u64().unwrap_or(0);
        if position.is_null() || rows == 0 {
            return Ok(());
        }
        if self.restarted {
            return Err(SluiceError::Execution(format!(
                "channel table '{}' cannot be rewound to a checkpoint after a failure: the \
                 application's batches are not replayable",
                self.table
            )));
        }
        self.rows = rows;
        self.resume_after.store(rows, Ordering::SeqCst);
        Ok(())
    }
}

/// A function an application registered to receive the rows written to a `channel`
/// table. Called from the job's sink subtasks (one call at a time per table); an `Err`
/// fails the job.
pub type SinkCallback = Box<dyn FnMut(&RecordBatch) -> Result<()> + Send>;

/// Callbacks registered by the application, by table name (shared by the engine and its
/// jobs).
#[derive(Clone, Default)]
pub struct SinkRegistry(Arc<Mutex<HashMap<String, Arc<Mutex<SinkCallback>>>>>);

impl std::fmt::Debug for SinkRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tables: Vec<String> = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        f.debug_struct("SinkRegistry")
            .field("tables", &tables)
            .finish()
    }
}

/// Registers `callback` as the receiver of the rows written to `table`, replacing an
/// earlier one. Every job writing the table calls it, from its sink subtasks.
pub fn register_sink(registry: &SinkRegistry, table: &str, callback: SinkCallback) {
    registry
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(table.to_string(), Arc::new(Mutex::new(callback)));
}

/// Hands the rows written to a `channel` table to the application's callback: the
/// sink's columns, after a leading `op` column (`+I`, `-U`, `+U`, `-D`) when the query's
/// result is updating.
///
/// Guarantee: rows are delivered as they are written (at least once): after a restart
/// from a checkpoint, rows written after it are delivered again.
pub struct CallbackSink {
    callback: Arc<Mutex<SinkCallback>>,
    updating: bool,
}

impl CallbackSink {
    /// The sink of `table`, calling the callback registered for it.
    ///
    /// # Errors
    /// No callback is registered for the table.
    pub fn take(registry: &SinkRegistry, table: &str, updating: bool) -> Result<Self> {
        let callback = registry
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(table)
            .cloned()
            .ok_or_else(|| {
                SluiceError::Config(format!(
                    "table '{table}' uses the 'channel' connector, but no callback receives its \
                     rows: call Engine::sink_callback(\"{table}\", ...) before INSERT INTO it"
                ))
            })?;
        Ok(CallbackSink { callback, updating })
    }
}

impl BatchSink for CallbackSink {
    fn write(&mut self, batch: &StreamBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let rows = if self.updating {
            crate::tasks::with_op_column(batch)?
        } else {
            batch.data.clone()
        };
        let mut callback = self.callback.lock().unwrap_or_else(|e| e.into_inner());
        (*callback)(&rows)
    }

    fn finish(&mut self) -> Result<Committable> {
        Ok(Committable::Nothing)
    }
}
