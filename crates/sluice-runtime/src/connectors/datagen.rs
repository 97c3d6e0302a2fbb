//! The `datagen` connector (Flink's options): generated rows, random or sequences.
//!
//! | option | meaning |
//! |---|---|
//! | `'number-of-rows'` | rows to generate; without it the source is unbounded unless a sequence field ends it |
//! | `'rows-per-second'` | pace (default 10000, as Flink) |
//! | `'seed'` | ours: random values are reproducible from this seed |
//! | `'fields.<f>.kind'` | `'random'` (default) or `'sequence'` |
//! | `'fields.<f>.min'` / `'max'` | bounds of random numbers (defaults: the type's range; 0..1 for FLOAT/DOUBLE... as Flink: full range) |
//! | `'fields.<f>.start'` / `'end'` | inclusive bounds of a sequence (integers, or strings of them) |
//! | `'fields.<f>.length'` | length of random strings (default 100) |
//! | `'fields.<f>.max-past'` | random `TIMESTAMP`s lie in `[now - max-past, now]`: a duration (`'10 s'`, `'500ms'`, `'PT10S'`; default 0: now) |

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion_common::arrow::array::{
    ArrayRef, BooleanArray, Float32Array, Float64Array, Int16Array, Int32Array, Int64Array,
    Int8Array, RecordBatch, StringArray, TimestampMillisecondArray,
};
use datafusion_common::arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use sluice_common::plan::ConnectorOptions;
use sluice_common::{Result, SluiceError};

use crate::connectors::Source;
use crate::metrics::JobMetrics;

/// How one field is generated.
enum FieldGen {
    /// Integers uniform in `[min, max]`.
    RandomInt { min: i64, max: i64 },
    /// Floats uniform in `[min, max)`.
    Random { min: f64, max: f64 },
    /// `start, start + 1, ...` (the row count stops at `end`).
    Sequence { next: i64 },
    /// Random strings of `length` characters from `[a-z0-9]`.
    RandomString { length: usize },
    /// `now - random(0..=max_past_ms)`.
    RandomTimestamp { max_past_ms: i64 },
    /// Random booleans.
    RandomBool,
}

/// Pacing granularity of `'rows-per-second'`: a batch is at most this fraction (1/100) of a
/// second's rows, so rows arrive evenly spread over the second rather than in one burst.
const PACING_TICKS_PER_SECOND: u64 = 100;

/// Generates rows of `schema` as the options say.
pub struct DatagenSource {
    schema: SchemaRef,
    fields: Vec<FieldGen>,
    remaining: Option<u64>,
    rows_per_second: u64,
    batch_size: usize,
    rng: u64,
    started: Instant,
    produced: u64,
    metrics: Arc<JobMetrics>,
}

fn parse_num(options: &ConnectorOptions, key: &str) -> Result<Option<f64>> {
    match options.get(key) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<f64>()
            .map(Some)
            .map_err(|_| SluiceError::Config(format!("'{key}' must be a number, found '{v}'"))),
    }
}

fn parse_int(options: &ConnectorOptions, key: &str) -> Result<Option<i64>> {
    match options.get(key) {
        None => Ok(None),
        Some(v) => {
            v.trim().parse::<i64>().map(Some).map_err(|_| {
                SluiceError::Config(format!("'{key}' must be an integer, found '{v}'"))
            })
        }
    }
}

/// A duration option ([`sluice_common::options::parse_duration_ms`]'s forms), `None` when
/// not set.
///
/// # Errors
/// A value that is not a duration, naming the key.
pub fn parse_duration_ms(options: &ConnectorOptions, key: &str) -> Result<Option<i64>> {
    let Some(v) = options.get(key) else {
        return Ok(None);
    };
    sluice_common::options::parse_duration_ms(v)
        .map(Some)
        .map_err(|_| {
            SluiceError::Config(format!(
                "'{key}' must be a duration such as '10 s', '500ms', '5 min' or 'PT10S', found '{v}'"
            ))
        })
}

fn int_range(dt: &DataType) -> (i64, i64) {
    match dt {
        DataType::Int8 => (i8::MIN as i64, i8::MAX as i64),
        DataType::Int16 => (i16::MIN as i64, i16::MAX as i64),
        DataType::Int32 => (i32::MIN as i64, i32::MAX as i64),
        _ => (i64::MIN, i64::MAX),
    }
}

fn type_range(dt: &DataType) -> (f64, f64) {
    match dt {
        DataType::Float32 => (f32::MIN as f64, f32::MAX as f64),
        _ => (f64::MIN, f64::MAX),
    }
}

impl DatagenSource {
    /// A generator for the table `table` with these `WITH` options.
    ///
    /// # Errors
    /// A field type datagen cannot produce, a sequence without `start`/`end`, numbers that
    /// do not parse, `min` above `max`.
    pub fn new(
        table: &str,
        schema: SchemaRef,
        options: &ConnectorOptions,
        batch_size: usize,
        metrics: Arc<JobMetrics>,
    ) -> Result<Self> {
        let mut fields = Vec::new();
        let mut remaining = parse_int(options, "number-of-rows")?.map(|n| n.max(0) as u64);
        for f in schema.fields() {
            let key = |k: &str| format!("fields.{}.{k}", f.name());
            let kind = options
                .get(&key("kind"))
                .map(|s| s.as_str())
                .unwrap_or("random");
            let gen = match (kind, f.data_type()) {
                (
                    "sequence",
                    DataType::Int8
                    | DataType::Int16
                    | DataType::Int32
                    | DataType::Int64
                    | DataType::Utf8,
                ) => {
                    let (Some(start), Some(end)) = (
                        parse_int(options, &key("start"))?,
                        parse_int(options, &key("end"))?,
                    ) else {
                        return Err(SluiceError::Config(format!(
                            "datagen table '{table}': sequence field '{}' needs '{}' and '{}'",
                            f.name(),
                            key("start"),
                            key("end")
                        )));
                    };
                    let (lo, hi) = int_range(f.data_type());
                    for (name, v) in [("start", start), ("end", end)] {
                        if v < lo || v > hi {
                            return Err(SluiceError::Config(format!(
                                "datagen table '{table}': '{}' ({v}) is out of the range of {} \
                                 ({lo} to {hi})",
                                key(name),
                                f.data_type()
                            )));
                        }
                    }
                    let count = (end as i128 - start as i128 + 1).max(0) as u64;
                    remaining = Some(remaining.map_or(count, |r| r.min(count)));
                    FieldGen::Sequence { next: start }
                }
                ("random", DataType::Utf8) => FieldGen::RandomString {
                    length: parse_int(options, &key("length"))?.unwrap_or(100).max(0) as usize,
                },
                ("random", DataType::Boolean) => FieldGen::RandomBool,
                ("random", DataType::Timestamp(TimeUnit::Millisecond, _)) => {
                    FieldGen::RandomTimestamp {
                        max_past_ms: parse_duration_ms(options, &key("max-past"))?.unwrap_or(0),
                    }
                }
                (
                    "random",
                    dt @ (DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64),
                ) => {
                    let (lo, hi) = int_range(dt);
                    let min = parse_int(options, &key("min"))?.unwrap_or(lo);
                    let max = parse_int(options, &key("max"))?.unwrap_or(hi);
                    for (name, v) in [("min", min), ("max", max)] {
                        if v < lo || v > hi {
                            return Err(SluiceError::Config(format!(
                                "datagen table '{table}': '{}' ({v}) is out of the range of {dt} \
                                 ({lo} to {hi})",
                                key(name)
                            )));
                        }
                    }
                    if min > max {
                        return Err(SluiceError::Config(format!(
                            "datagen table '{table}': '{}' ({min}) is above '{}' ({max})",
                            key("min"),
                            key("max")
                        )));
                    }
                    FieldGen::RandomInt { min, max }
                }
                ("random", dt @ (DataType::Float32 | DataType::Float64)) => {
                    let (lo, hi) = type_range(dt);
                    let min = parse_num(options, &key("min"))?.unwrap_or(lo);
                    let max = parse_num(options, &key("max"))?.unwrap_or(hi);
                    if min > max {
                        return Err(SluiceError::Config(format!(
                            "datagen table '{table}': '{}' ({min}) is above '{}' ({max})",
                            key("min"),
                            key("max")
                        )));
                    }
                    FieldGen::Random { min, max }
                }
                (k, dt) => {
                    return Err(SluiceError::NotSupported(format!(
                        "datagen table '{table}': field '{}' of type {dt} with kind '{k}' \
                         (supported: random for numbers, strings, booleans, TIMESTAMP(3); \
                         sequence for integers and strings)",
                        f.name()
                    )))
                }
            };
            fields.push(gen);
        }
        let rows_per_second = parse_int(options, "rows-per-second")?
            .unwrap_or(10_000)
            .max(1) as u64;
        let seed = match parse_int(options, "seed")? {
            Some(s) => s as u64,
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1),
        };
        Ok(DatagenSource {
            schema,
            fields,
            remaining,
            rows_per_second,
            batch_size,
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            started: Instant::now(),
            produced: 0,
            metrics,
        })
    }

    fn next_u64(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn column(&mut self, i: usize, n: usize) -> ArrayRef {
        let dt = self.schema.field(i).data_type().clone();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        macro_rules! ints {
            ($arr:ty, $t:ty, $f:expr) => {
                Arc::new(<$arr>::from(
                    (0..n).map(|_| $f(self) as $t).collect::<Vec<$t>>(),
                )) as ArrayRef
            };
        }
        match (&self.fields[i], &dt) {
            (FieldGen::Sequence { .. }, dt) => {
                let values: Vec<i64> = (0..n)
                    .map(|_| match &mut self.fields[i] {
                        FieldGen::Sequence { next, .. } => {
                            let v = *next;
                            // The row count ends the sequence at `end`, so only the step
                            // after i64::MAX could wrap, and it is never used.
                            *next = next.wrapping_add(1);
                            v
                        }
                        _ => unreachable!("a sequence field"),
                    })
                    .collect();
                match dt {
                    DataType::Int8 => Arc::new(Int8Array::from(
                        values.iter().map(|v| *v as i8).collect::<Vec<_>>(),
                    )),
                    DataType::Int16 => Arc::new(Int16Array::from(
                        values.iter().map(|v| *v as i16).collect::<Vec<_>>(),
                    )),
                    DataType::Int32 => Arc::new(Int32Array::from(
                        values.iter().map(|v| *v as i32).collect::<Vec<_>>(),
                    )),
                    DataType::Utf8 => Arc::new(StringArray::from(
                        values.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
                    )),
                    _ => Arc::new(Int64Array::from(values)),
                }
            }
            (FieldGen::RandomInt { min, max }, dt) => {
                let (min, max) = (*min as i128, *max as i128);
                let span = (max - min + 1) as u128;
                let int = |s: &mut Self| (min + (s.next_u64() as u128 % span) as i128) as i64;
                match dt {
                    DataType::Int8 => ints!(Int8Array, i8, int),
                    DataType::Int16 => ints!(Int16Array, i16, int),
                    DataType::Int32 => ints!(Int32Array, i32, int),
                    _ => ints!(Int64Array, i64, int),
                }
            }
            (FieldGen::Random { min, max }, dt) => {
                let (min, max) = (*min, *max);
                let float = |s: &mut Self| min + s.next_f64() * (max - min);
                match dt {
                    DataType::Float32 => ints!(Float32Array, f32, float),
                    _ => ints!(Float64Array, f64, float),
                }
            }
            (FieldGen::RandomString { length }, _) => {
                let length = *length;
                const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
                let values: Vec<String> = (0..n)
                    .map(|_| {
                        (0..length)
                            .map(|_| {
                                ALPHABET[(self.next_u64() % ALPHABET.len() as u64) as usize] as char
                            })
                            .collect()
                    })
                    .collect();
                Arc::new(StringArray::from(values))
            }
            (FieldGen::RandomTimestamp { max_past_ms }, dt) => {
                let past = *max_past_ms;
                let values: Vec<i64> = (0..n)
                    .map(|_| {
                        now_ms
                            - if past > 0 {
                                (self.next_u64() % (past as u64 + 1)) as i64
                            } else {
                                0
                            }
                    })
                    .collect();
                let tz = match dt {
                    DataType::Timestamp(_, tz) => tz.clone(),
                    _ => None,
                };
                Arc::new(TimestampMillisecondArray::from(values).with_timezone_opt(tz))
            }
            (FieldGen::RandomBool, _) => Arc::new(BooleanArray::from(
                (0..n).map(|_| self.next_u64() & 1 == 1).collect::<Vec<_>>(),
            )),
        }
    }
}

impl Source for DatagenSource {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        // Rows are paced evenly within each second, as Flink's rate-limited generator lets
        // rows through one at a time: batches of a hundredth of a second's rows (at least
        // one), each due when its first row is.
        let per_tick = (self.rows_per_second / PACING_TICKS_PER_SECOND).max(1) as usize;
        let mut n = self.batch_size.min(per_tick).max(1);
        if let Some(r) = self.remaining {
            if r == 0 {
                return Ok(None);
            }
            n = n.min(r as usize);
            self.remaining = Some(r - n as u64);
        }
        // Pace: the first `produced` rows are due at produced / rows_per_second s.
        let due = Duration::from_secs_f64(self.produced as f64 / self.rows_per_second as f64);
        if let Some(wait) = due.checked_sub(self.started.elapsed()) {
            std::thread::sleep(wait);
        }
        let columns = (0..self.fields.len()).map(|i| self.column(i, n)).collect();
        self.produced += n as u64;
        JobMetrics::add(&self.metrics.rows_in, n as u64);
        Ok(Some(RecordBatch::try_new(
            Arc::clone(&self.schema),
            columns,
        )?))
    }

    fn describe(&self) -> String {
        format!("datagen ({} rows/s)", self.rows_per_second)
    }

    /// `{"produced": rows, "remaining": rows or null, "rng": state, "sequences": [next
    /// value of each sequence field]}`.
    fn position(&self) -> serde_json::Value {
        let sequences: Vec<i64> = self
            .fields
            .iter()
            .filter_map(|f| match f {
                FieldGen::Sequence { next } => Some(*next),
                _ => None,
            })
            .collect();
        serde_json::json!({
            "produced": self.produced,
            "remaining": self.remaining,
            "rng": self.rng,
            "sequences": sequences,
        })
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
        if position.is_null() {
            return Ok(());
        }
        let bad = || {
            SluiceError::Execution(format!(
                "a checkpointed datagen position is unreadable: {position}"
            ))
        };
        self.produced = position["produced"].as_u64().ok_or_else(bad)?;
        self.remaining = position["remaining"].as_u64();
        self.rng = position["rng"].as_u64().ok_or_else(bad)?;
        let mut sequences = position["sequences"].as_array().ok_or_else(bad)?.iter();
        for f in &mut self.fields {
            if let FieldGen::Sequence { next } = f {
                *next = sequences.next().and_then(|v| v.as_i64()).ok_or_else(bad)?;
            }
        }
        // Keep the pace: the rows produced before the restore count as already due.
        let done = Duration::from_secs_f64(self.produced as f64 / self.rows_per_second as f64);
        self.started = Instant::now()
            .checked_sub(done)
            .unwrap_or_else(Instant::now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::datatypes::{Field, Schema};

    fn source(rows_per_second: u64, rows: u64, batch_size: usize) -> DatagenSource {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let options: ConnectorOptions = [
            ("connector", "datagen".to_string()),
            ("rows-per-second", rows_per_second.to_string()),
            ("number-of-rows", rows.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        DatagenSource::new("t", schema, &options, batch_size, Arc::default()).unwrap()
    }

    fn batch_sizes(mut s: DatagenSource) -> Vec<usize> {
        std::iter::from_fn(|| s.next_batch().unwrap().map(|b| b.num_rows())).collect()
    }

    /// `'rows-per-second'` spreads rows over the second in batches of a hundredth of it
    /// (Flink's generator paces row by row), never one burst per second: 5 rows/s come one
    /// at a time, 1,000 rows/s ten at a time, and the batch size still caps a batch.
    #[test]
    fn rows_per_second_paces_small_batches() {
        assert_eq!(batch_sizes(source(5, 3, 8192)), vec![1, 1, 1]);
        assert_eq!(batch_sizes(source(1_000, 25, 8192)), vec![10, 10, 5]);
        assert_eq!(batch_sizes(source(1_000_000, 10, 4)), vec![4, 4, 2]);
    }
}
