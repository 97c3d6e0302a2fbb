//! Lookup tables: a `filesystem` table read whole for a lookup join (Flink SQL "Joins >
//! Lookup Join"), and whether its files changed since.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use datafusion_common::arrow::datatypes::SchemaRef;
use datafusion_common::arrow::record_batch::RecordBatch;
use sluice_common::plan::ConnectorOptions;
use sluice_common::{Result, SluiceError};

use super::{create_source, option, resolve, ConnectorContext};
use crate::metrics::JobMetrics;

/// A `filesystem` table a lookup join reads: every row of every file under its `'path'`,
/// read again when a file changed (its list, a length or a modification time).
pub struct LookupFiles {
    table: String,
    options: ConnectorOptions,
    physical_schema: SchemaRef,
    ctx: ConnectorContext,
    path: PathBuf,
    /// (file, length in bytes, modification time) when last read.
    stamps: Vec<(PathBuf, u64, Option<SystemTime>)>,
}

impl LookupFiles {
    /// The lookup table `table` (its `WITH` options and physical columns).
    ///
    /// # Errors
    /// Another connector than `filesystem` (only files can be looked up), no `'path'`.
    pub fn new(
        table: &str,
        options: &ConnectorOptions,
        physical_schema: SchemaRef,
        ctx: &ConnectorContext,
    ) -> Result<Self> {
        let connector = option(options, "connector", table)?;
        if connector != "filesystem" {
            return Err(SluiceError::NotSupported(format!(
                "a lookup join against '{table}' ('connector' = '{connector}'): only \
                 'filesystem' tables can be looked up"
            )));
        }
        let path = resolve(ctx, option(options, "path", table)?);
        let mut ctx = ctx.clone();
        ctx.source_subtask = 0;
        ctx.source_parallelism = 1;
        ctx.batch_size_seed = None;
        Ok(LookupFiles {
            table: table.to_string(),
            options: options.clone(),
            physical_schema,
            ctx,
            path,
            stamps: Vec::new(),
        })
    }

    fn current_stamps(&self) -> Result<Vec<(PathBuf, u64, Option<SystemTime>)>> {
        let mut files = super::filesystem::list_files(&self.path)?;
        files.sort();
        Ok(files
            .into_iter()
            .map(|f| {
                let meta = std::fs::metadata(&f).ok();
                let len = meta.as_ref().map(|m| m.len()).unwrap_or(0);
                let modified = meta.and_then(|m| m.modified().ok());
                (f, len, modified)
            })
            .collect())
    }

    /// Whether the files changed since the last [`Self::read`] (always before the first).
    ///
    /// # Errors
    /// The path cannot be listed.
    pub fn changed(&self) -> Result<bool> {
        Ok(self.stamps.is_empty() || self.current_stamps()? != self.stamps)
    }

    /// Every row of the table now (its physical columns).
    ///
    /// # Errors
    /// What reading the files fails with (with file, line and column).
    pub fn read(&mut self) -> Result<Vec<RecordBatch>> {
        let stamps = self.current_stamps()?;
        // Its own metrics: the table's rows are not the job's input rows.
        let mut source = create_source(
            &self.table,
            &self.options,
            &[],
            Arc::clone(&self.physical_schema),
            None,
            &self.ctx,
            Arc::new(JobMetrics::default()),
        )?;
        let mut batches = Vec::new();
        while let Some(b) = source.next_batch()? {
            batches.push(b);
        }
        self.stamps = stamps;
        Ok(batches)
    }
}
