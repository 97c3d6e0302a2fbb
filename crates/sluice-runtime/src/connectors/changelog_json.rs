//! Change-data-capture formats: `'format' = 'debezium-json'` and `'canal-json'`, JSON
//! lines whose every line is one change event of a database table, read as a changelog.
//!
//! Output: batches of the table's physical columns plus a last `Int8` column
//! ([`OP_COLUMN`]) holding each row's [`RowKind`] code; the source task moves it into
//! [`crate::message::StreamBatch::ops`].
//!
//! - **Debezium** (Flink SQL "Debezium Format"): `{"before": {...}, "after": {...}, "op":
//!   "c|r|u|d", ...}`, or that envelope under `"payload"` with `'debezium-json.schema-include'
//!   = 'true'`. `c` (create) and `r` (snapshot read) give `+I` of `after`; `u` gives `-U` of
//!   `before` then `+U` of `after`; `d` gives `-D` of `before`. An update or delete without a
//!   `before` image is an error, as in Flink (Debezium's Postgres connector sends one only
//!   with `REPLICA IDENTITY FULL`).
//! - **Canal** (Flink SQL "Canal Format"): `{"data": [{...}], "old": [{...}], "type":
//!   "INSERT|UPDATE|DELETE", "database": ..., "table": ...}`, several rows per event.
//!   `INSERT` gives `+I` of each `data` row; `UPDATE` gives, per row, `-U` of the old row
//!   (the `data` row with the fields `old` lists replaced) then `+U` of the `data` row;
//!   `DELETE` gives `-D` of each `data` row. `CREATE` events (DDL) are skipped, and any
//!   other type is an error (as in Flink: an `ALTER` event fails the job); `'canal-json.database.include'` / `'canal-json.table.include'` (regular
//!   expressions over the whole name) keep only the events of matching tables.
//!
//! Row fields are read as by `'format' = 'json'` (by name; missing fields NULL; numbers may
//! be JSON strings, as Canal writes them). A line that is not such an event is reported as
//! `file:line:1` or, with `'<format>.ignore-parse-errors' = 'true'`, skipped and counted;
//! any other event kind is an error, as in Flink.

use std::sync::Arc;

use datafusion_common::arrow::array::{ArrayRef, Int8Array, RecordBatch};
use datafusion_common::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use regex::Regex;
use serde_json::{Map, Value};
use sluice_common::plan::ConnectorOptions;
use sluice_common::time::Tz;
use sluice_common::{Result, SluiceError};

use crate::connectors::csv_source::{decode_records, Chunk, ChunkFormat};
use crate::connectors::filesystem::bool_option;
use crate::connectors::json_format::JsonFormat;
use crate::message::RowKind;

/// Name of the row-kind column a changelog format appends to the physical columns.
pub const OP_COLUMN: &str = "$op";

/// Which change-data-capture envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Envelope {
    Debezium,
    Canal,
}

impl Envelope {
    /// The `'format'` value.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Envelope::Debezium => "debezium-json",
            Envelope::Canal => "canal-json",
        }
    }
}

/// Decodes chunks of change events into batches of the physical columns and `$op`.
pub(crate) struct ChangelogJsonFormat {
    envelope: Envelope,
    /// Reads the row objects of the events.
    rows: JsonFormat,
    /// Physical columns + `$op`.
    schema: SchemaRef,
    ignore_parse_errors: bool,
    /// Debezium: the envelope is under `"payload"`.
    schema_include: bool,
    /// Canal: keep only events of these databases / tables.
    database_include: Option<Regex>,
    table_include: Option<Regex>,
}

impl ChangelogJsonFormat {
    /// # Errors
    /// Bad format options (a boolean that is not one, a regular expression that does not
    /// compile).
    pub(crate) fn new(
        envelope: Envelope,
        physical: SchemaRef,
        time_zone: Tz,
        options: &ConnectorOptions,
    ) -> Result<Self> {
        let prefix = envelope.name();
        let ignore_parse_errors =
            bool_option(options, &format!("{prefix}.ignore-parse-errors"), false)?;
        let schema_include = bool_option(options, &format!("{prefix}.schema-include"), false)?;
        let pattern = |key: &str| -> Result<Option<Regex>> {
            options
                .get(&format!("{prefix}.{key}"))
                .map(|p| {
                    Regex::new(&format!("^(?:{p})$"))
                        .map_err(|e| SluiceError::Config(format!("'{prefix}.{key}' = '{p}': {e}")))
                })
                .transpose()
        };
        let mut fields: Vec<Arc<Field>> = physical.fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(OP_COLUMN, DataType::Int8, false)));
        Ok(ChangelogJsonFormat {
            envelope,
            schema: Arc::new(Schema::new(fields)),
            rows: JsonFormat::new(physical, None, time_zone, false),
            ignore_parse_errors,
            schema_include,
            database_include: pattern("database.include")?,
            table_include: pattern("table.include")?,
        })
    }

    /// The rows of one event line, with their kinds (none for a skipped event).
    fn changes(
        &self,
        line: &[u8],
    ) -> std::result::Result<Vec<(RowKind, Map<String, Value>)>, String> {
        let event: Value = serde_json::from_slice(line).map_err(|e| e.to_string())?;
        match self.envelope {
            Envelope::Debezium => self.debezium(event),
            Envelope::Canal => self.canal(event),
        }
    }

    fn debezium(
        &self,
        event: Value,
    ) -> std::result::Result<Vec<(RowKind, Map<String, Value>)>, String> {
        let Value::Object(mut event) = event else {
            return Err("a Debezium event must be a JSON object".into());
        };
        if self.schema_include {
            match event.remove("payload") {
                Some(Value::Object(p)) => event = p,
                _ => {
                    return Err(
                        "no \"payload\" object ('debezium-json.schema-include' is 'true')".into(),
                    )
                }
            }
        } else if event.contains_key("schema") && event.contains_key("payload") {
            return Err("the event has \"schema\" and \"payload\": set \
                        'debezium-json.schema-include' = 'true'"
                .into());
        }
        let image = |event: &mut Map<String, Value>, key: &str, op: &str| match event.remove(key) {
            Some(Value::Object(row)) => Ok(row),
            _ => Err(format!(
                "the \"{key}\" of an \"op\": \"{op}\" event is null or missing (Debezium's \
                 Postgres connector sends it only for tables with REPLICA IDENTITY FULL)"
            )),
        };
        let op = match event.get("op") {
            Some(Value::String(op)) => op.clone(),
            _ => return Err("no \"op\" field".into()),
        };
        Ok(match op.as_str() {
            "c" | "r" => vec![(RowKind::Insert, image(&mut event, "after", &op)?)],
            "u" => {
                let before = image(&mut event, "before", &op)?;
                let after = image(&mut event, "after", &op)?;
                vec![
                    (RowKind::UpdateBefore, before),
                    (RowKind::UpdateAfter, after),
                ]
            }
            "d" => vec![(RowKind::Delete, image(&mut event, "before", &op)?)],
            other => return Err(format!("unknown \"op\" value \"{other}\"")),
        })
    }

    fn canal(
        &self,
        event: Value,
    ) -> std::result::Result<Vec<(RowKind, Map<String, Value>)>, String> {
        let Value::Object(event) = event else {
            return Err("a Canal event must be a JSON object".into());
        };
        let included = |key: &str, filter: &Option<Regex>| match filter {
            None => true,
            Some(re) => matches!(event.get(key), Some(Value::String(s)) if re.is_match(s)),
        };
        if !included("database", &self.database_include) || !included("table", &self.table_include)
        {
            return Ok(Vec::new());
        }
        let kind = match event.get("type") {
            Some(Value::String(t)) => t.clone(),
            _ => return Err("no \"type\" field".into()),
        };
        let rows = |key: &str| -> std::result::Result<Vec<Map<String, Value>>, String> {
            match event.get(key) {
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| match v {
                        Value::Object(row) => Ok(row.clone()),
                        _ => Err(format!("\"{key}\" must be an array of objects")),
                    })
                    .collect(),
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(_) => Err(format!("\"{key}\" must be an array of objects")),
            }
        };
        Ok(match kind.as_str() {
            "INSERT" => rows("data")?
                .into_iter()
                .map(|r| (RowKind::Insert, r))
                .collect(),
            "DELETE" => rows("data")?
                .into_iter()
                .map(|r| (RowKind::Delete, r))
                .collect(),
            "UPDATE" => {
                let data = rows("data")?;
                let old = rows("old")?;
                if old.len() != data.len() {
                    return Err("an UPDATE needs one \"old\" row per \"data\" row".into());
                }
                let mut out = Vec::with_capacity(2 * data.len());
                for (after, changed) in data.into_iter().zip(old) {
                    let mut before = after.clone();
                    before.extend(changed);
                    out.push((RowKind::UpdateBefore, before));
                    out.push((RowKind::UpdateAfter, after));
                }
                out
            }
            "CREATE" => Vec::new(),
            other => return Err(format!("unknown \"type\" value \"{other}\"")),
        })
    }

    /// `bytes`: whole event lines. The batch of their rows, `$op` last.
    fn parse(&self, bytes: &[u8]) -> std::result::Result<Option<RecordBatch>, String> {
        let mut text = Vec::with_capacity(bytes.len());
        let mut kinds = Vec::new();
        for line in bytes.split(|b| *b == b'\n') {
            if line.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            for (kind, row) in self.changes(line)? {
                serde_json::to_writer(&mut text, &row).map_err(|e| e.to_string())?;
                text.push(b'\n');
                kinds.push(kind as i8);
            }
        }
        if kinds.is_empty() {
            return Ok(None);
        }
        let Some(rows) = self.rows.parse(&text, kinds.len())? else {
            return Ok(None);
        };
        let mut columns: Vec<ArrayRef> = rows.columns().to_vec();
        columns.push(Arc::new(Int8Array::from(kinds)));
        RecordBatch::try_new(Arc::clone(&self.schema), columns)
            .map(Some)
            .map_err(|e| e.to_string())
    }
}

impl ChunkFormat for ChangelogJsonFormat {
    fn decode(&self, chunk: &Chunk) -> Result<(Option<RecordBatch>, u64)> {
        let option = format!("{}.ignore-parse-errors", self.envelope.name());
        decode_records(
            chunk,
            &self.schema,
            self.ignore_parse_errors,
            &option,
            |bytes, _records, line| {
                self.parse(bytes).map_err(|e| {
                    let what = super::csv_source::describe_missing_field(&self.schema, &e);
                    format!(
                        "{}:{line}:1: {} event: {}",
                        chunk.file,
                        self.envelope.name(),
                        what.as_deref()
                            .unwrap_or(e.trim_start_matches("Json error: "))
                    )
                })
            },
        )
    }
}
