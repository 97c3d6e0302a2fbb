//! The `nexmark` connector: the Nexmark benchmark's event stream (an online auction's
//! persons, auctions and bids), generated deterministically by the `nexmark` crate (a port
//! of the Beam/Flink Nexmark generator), under Flink-Nexmark's table options
//! (`sluice_common::options::CONNECTORS`, "nexmark").
//!
//! The table has Flink-Nexmark's columns, each optional and matched by name:
//!
//! | column | type | value |
//! |---|---|---|
//! | `event_type` | `INT` | 0 person, 1 auction, 2 bid |
//! | `person` | `ROW<id BIGINT, name, emailAddress, creditCard, city, state VARCHAR, dateTime TIMESTAMP(3), extra VARCHAR>` | NULL unless a person |
//! | `auction` | `ROW<id BIGINT, itemName, description VARCHAR, initialBid, reserve BIGINT, dateTime, expires TIMESTAMP(3), seller, category BIGINT, extra VARCHAR>` | NULL unless an auction |
//! | `bid` | `ROW<auction, bidder, price BIGINT, channel, url VARCHAR, dateTime TIMESTAMP(3), extra VARCHAR>` | NULL unless a bid |
//!
//! Times are UTC milliseconds from `'base-time'` (ours, fixed by default so that a run and
//! its replay after a failure see the same events; Flink-Nexmark starts at the wall clock),
//! spaced by `'first-event.rate'` / `'next-event.rate'` events per second. With
//! `'scan.parallelism'` = n, subtask i generates events i, i + n, i + 2n, ... (the
//! generator's offset and step), so the events do not depend on the parallelism. The
//! source offset is the next event's number.

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion_common::arrow::array::{
    Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringBuilder, StructArray,
    TimestampMillisecondArray,
};
use datafusion_common::arrow::buffer::NullBuffer;
use datafusion_common::arrow::compute::cast;
use datafusion_common::arrow::datatypes::{DataType, Field, Fields, SchemaRef};
use nexmark::config::{NexmarkConfig, RateShape};
use nexmark::event::{Event, EventType};
use nexmark::EventGenerator;
use sluice_common::plan::ConnectorOptions;
use sluice_common::{Result, SluiceError};

use crate::connectors::Source;
use crate::metrics::JobMetrics;

/// The event time of the first event when `'base-time'` is not set: 2015-07-15 00:00:00 UTC
/// (ms).
const DEFAULT_BASE_TIME_MS: u64 = 1_436_918_400_000;

/// How one declared column is filled.
enum Column {
    EventType,
    /// A `ROW` of one event kind; its fields in declared order.
    Row(EventType, Fields),
}

/// Generates Nexmark events as batches of the table's columns.
pub struct NexmarkSource {
    table: String,
    schema: SchemaRef,
    columns: Vec<Column>,
    config: NexmarkConfig,
    /// Next event number this subtask generates.
    next: u64,
    /// Subtasks generating the stream (the step between this subtask's events).
    step: u64,
    /// Events in the whole stream (`None`: unbounded).
    limit: Option<u64>,
    batch_size: usize,
    /// `'rate.limited'`: pace events in wall-clock time by their `dateTime`.
    paced: bool,
    /// When pacing: the wall-clock instant and event time (ms) of the first event generated
    /// since the source started or was restored.
    pace_origin: Option<(Instant, u64)>,
    metrics: Arc<JobMetrics>,
}

fn get<'a>(options: &'a ConnectorOptions, key: &str) -> Option<&'a str> {
    options.get(key).map(|s| s.trim())
}

fn number<T: std::str::FromStr>(options: &ConnectorOptions, key: &str, default: T) -> Result<T> {
    match get(options, key) {
        None => Ok(default),
        Some(v) => v.parse().map_err(|_| {
            SluiceError::Config(format!("'{key}' must be a whole number, found '{v}'"))
        }),
    }
}

fn size(options: &ConnectorOptions, key: &str, default: usize) -> Result<usize> {
    match get(options, key) {
        None => Ok(default),
        Some(v) => match sluice_common::options::parse_memory_size(v) {
            Ok(b) if b <= MAX_AVG_SIZE => Ok(b as usize),
            Ok(_) => Err(SluiceError::Config(format!(
                "'{key}' must be at most 1 mb (an event of that size on average), found '{v}'"
            ))),
            Err(e) => Err(SluiceError::Config(format!("'{key}': {e}"))),
        },
    }
}

/// The largest `'*.avg-size'` (bytes): a batch holds thousands of events.
const MAX_AVG_SIZE: u64 = 1 << 20;

/// The latest `'base-time'` (ms): 9999-12-31 23:59:59.999 UTC, so that event times stay
/// far from overflowing.
const MAX_BASE_TIME_MS: u64 = 253_402_300_799_999;

/// `'base-time'`: a UTC timestamp (`2015-07-15 00:00:00[.fff]`, `T` allowed) or epoch ms.
fn base_time(options: &ConnectorOptions) -> Result<u64> {
    let Some(v) = get(options, "base-time") else {
        return Ok(DEFAULT_BASE_TIME_MS);
    };
    let ms = v.parse::<u64>().ok().or_else(|| {
        let text = v.replace('T', " ");
        chrono::NaiveDateTime::parse_from_str(&text, "%Y-%m-%d %H:%M:%S%.f")
            .ok()
            .and_then(|t| u64::try_from(t.and_utc().timestamp_millis()).ok())
    });
    ms.filter(|ms| *ms <= MAX_BASE_TIME_MS).ok_or_else(|| {
        SluiceError::Config(format!(
            "'base-time' must be a UTC time from 1970 to 9999 such as '2015-07-15 00:00:00', \
             or epoch milliseconds, found '{v}'"
        ))
    })
}

/// The generator's configuration from the table's options (Flink-Nexmark's defaults).
fn config(options: &ConnectorOptions) -> Result<NexmarkConfig> {
    let defaults = NexmarkConfig::default();
    let rate_shape = match get(options, "rate.shape").map(|s| s.to_ascii_lowercase()) {
        None => RateShape::Square,
        Some(s) if s == "square" => RateShape::Square,
        Some(s) if s == "sine" => RateShape::Sine,
        Some(s) => {
            return Err(SluiceError::Config(format!(
                "'rate.shape' must be 'square' or 'sine', found '{s}'"
            )))
        }
    };
    let rate_period_s = match get(options, "rate.period") {
        None => 600,
        Some(v) => {
            sluice_common::options::parse_duration_ms(v)
                .map_err(|e| SluiceError::Config(format!("'rate.period': {e}")))?
                / 1000
        }
    };
    let positive = |key: &str, default: usize| -> Result<usize> {
        let n: usize = number(options, key, default)?;
        if n == 0 {
            return Err(SluiceError::Config(format!("'{key}' must be at least 1")));
        }
        Ok(n)
    };
    let first_rate = positive("first-event.rate", 10_000)?;
    let next_rate = positive("next-event.rate", first_rate)?;
    if next_rate != first_rate {
        // The nexmark crate (0.2) mis-times a changing rate: event times run at the first
        // rate through each epoch and jump back at its end (Beam's GeneratorConfig
        // compares the event number, the crate the out-of-order group size).
        return Err(SluiceError::Config(format!(
            "'next-event.rate' ({next_rate}) must equal 'first-event.rate' ({first_rate}): a \
             changing event rate is not supported yet"
        )));
    }
    Ok(NexmarkConfig {
        base_time: base_time(options)?,
        first_rate,
        next_rate,
        rate_shape,
        rate_period: rate_period_s.max(1) as usize,
        person_proportion: positive("person.proportion", 1)?,
        auction_proportion: positive("auction.proportion", 3)?,
        bid_proportion: positive("bid.proportion", 46)?,
        avg_person_byte_size: size(options, "person.avg-size", 200)?,
        avg_auction_byte_size: size(options, "auction.avg-size", 500)?,
        avg_bid_byte_size: size(options, "bid.avg-size", 100)?,
        hot_auction_ratio: positive("bid.hot-ratio.auctions", 2)?,
        hot_bidder_ratio: positive("bid.hot-ratio.bidders", 4)?,
        hot_seller_ratio: positive("auction.hot-ratio.sellers", 4)?,
        out_of_order_group_size: positive("out-of-order.group-size", 1)?,
        // Flink-Nexmark's spellings (PersonGenerator): the crate lower-cases them, and
        // Nexmark q3 looks for persons in 'OR', 'ID' and 'CA'.
        us_states: words("AZ,CA,ID,OR,WA,WY"),
        us_cities: words(
            "Phoenix,Los Angeles,San Francisco,Boise,Portland,Bend,Redmond,Seattle,Kent,Cheyenne",
        ),
        first_names: words("Peter,Paul,Luke,John,Saul,Vicky,Kate,Julie,Sarah,Deiter,Walter"),
        last_names: words("Shultz,Abrams,Spencer,White,Bartels,Walton,Smith,Jones,Noris"),
        ..defaults
    })
}

fn words(list: &str) -> Vec<String> {
    list.split(',').map(str::to_string).collect()
}

/// The fields of each event kind, with the type the generator gives them.
fn known_fields(kind: EventType) -> &'static [(&'static str, DataType)] {
    const TS: DataType = DataType::Timestamp(
        datafusion_common::arrow::datatypes::TimeUnit::Millisecond,
        None,
    );
    match kind {
        EventType::Person => &[
            ("id", DataType::Int64),
            ("name", DataType::Utf8),
            ("emailAddress", DataType::Utf8),
            ("creditCard", DataType::Utf8),
            ("city", DataType::Utf8),
            ("state", DataType::Utf8),
            ("dateTime", TS),
            ("extra", DataType::Utf8),
        ],
        EventType::Auction => &[
            ("id", DataType::Int64),
            ("itemName", DataType::Utf8),
            ("description", DataType::Utf8),
            ("initialBid", DataType::Int64),
            ("reserve", DataType::Int64),
            ("dateTime", TS),
            ("expires", TS),
            ("seller", DataType::Int64),
            ("category", DataType::Int64),
            ("extra", DataType::Utf8),
        ],
        EventType::Bid => &[
            ("auction", DataType::Int64),
            ("bidder", DataType::Int64),
            ("price", DataType::Int64),
            ("channel", DataType::Utf8),
            ("url", DataType::Utf8),
            ("dateTime", TS),
            ("extra", DataType::Utf8),
        ],
    }
}

fn kind_name(kind: EventType) -> &'static str {
    match kind {
        EventType::Person => "person",
        EventType::Auction => "auction",
        EventType::Bid => "bid",
    }
}

/// The generator's name for a declared field (exact, else ignoring case), or an error that
/// lists the fields there are.
fn field_name(table: &str, kind: EventType, declared: &str) -> Result<&'static str> {
    let fields = known_fields(kind);
    fields
        .iter()
        .find(|(n, _)| *n == declared)
        .or_else(|| {
            fields
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(declared))
        })
        .map(|(n, _)| *n)
        .ok_or_else(|| {
            let names: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
            SluiceError::Plan(format!(
                "field '{declared}' of column '{}' of nexmark table '{table}' is not a {} \
                 field (there are: {})",
                kind_name(kind),
                kind_name(kind),
                names.join(", ")
            ))
        })
}

fn plan_columns(table: &str, schema: &SchemaRef) -> Result<Vec<Column>> {
    schema
        .fields()
        .iter()
        .map(|f| {
            let kind = match f.name().to_ascii_lowercase().as_str() {
                "event_type" => return Ok(Column::EventType),
                "person" => EventType::Person,
                "auction" => EventType::Auction,
                "bid" => EventType::Bid,
                other => {
                    return Err(SluiceError::Plan(format!(
                        "column '{other}' of nexmark table '{table}' is not one the generator \
                         fills (there are: event_type, person, auction, bid)"
                    )))
                }
            };
            let DataType::Struct(fields) = f.data_type() else {
                return Err(SluiceError::Plan(format!(
                    "column '{}' of nexmark table '{table}' must be a ROW<...> of {} fields",
                    f.name(),
                    kind_name(kind)
                )));
            };
            for field in fields {
                let known = field_name(table, kind, field.name())?;
                let (_, generated) = known_fields(kind)
                    .iter()
                    .find(|(n, _)| *n == known)
                    .expect("a known field");
                if !datafusion_common::arrow::compute::can_cast_types(generated, field.data_type())
                {
                    return Err(SluiceError::Plan(format!(
                        "field '{}' of column '{}' of nexmark table '{table}' is {}, which a \
                         generated {} cannot become",
                        field.name(),
                        f.name(),
                        sluice_common::types::flink_type_name(field.data_type()),
                        sluice_common::types::flink_type_name(generated)
                    )));
                }
            }
            Ok(Column::Row(kind, fields.clone()))
        })
        .collect()
}

/// One field of `kind` over the events, NULL for events of other kinds.
fn field_array(events: &[Event], kind: EventType, name: &str) -> ArrayRef {
    macro_rules! ints {
        ($variant:ident, $field:ident) => {
            Arc::new(Int64Array::from_iter(events.iter().map(|e| match e {
                Event::$variant(x) => Some(x.$field as i64),
                _ => None,
            }))) as ArrayRef
        };
    }
    macro_rules! times {
        ($variant:ident, $field:ident) => {
            Arc::new(TimestampMillisecondArray::from_iter(events.iter().map(
                |e| match e {
                    Event::$variant(x) => Some(x.$field as i64),
                    _ => None,
                },
            ))) as ArrayRef
        };
    }
    macro_rules! texts {
        ($variant:ident, $field:ident) => {{
            let mut b = StringBuilder::with_capacity(events.len(), events.len() * 16);
            for e in events {
                match e {
                    Event::$variant(x) => b.append_value(&x.$field),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish()) as ArrayRef
        }};
    }
    match (kind, name) {
        (EventType::Person, "id") => ints!(Person, id),
        (EventType::Person, "name") => texts!(Person, name),
        (EventType::Person, "emailAddress") => {
            texts!(Person, email_address)
        }
        (EventType::Person, "creditCard") => texts!(Person, credit_card),
        (EventType::Person, "city") => texts!(Person, city),
        (EventType::Person, "state") => texts!(Person, state),
        (EventType::Person, "dateTime") => times!(Person, date_time),
        (EventType::Person, _) => texts!(Person, extra),
        (EventType::Auction, "id") => ints!(Auction, id),
        (EventType::Auction, "itemName") => texts!(Auction, item_name),
        (EventType::Auction, "description") => {
            texts!(Auction, description)
        }
        (EventType::Auction, "initialBid") => ints!(Auction, initial_bid),
        (EventType::Auction, "reserve") => ints!(Auction, reserve),
        (EventType::Auction, "dateTime") => times!(Auction, date_time),
        (EventType::Auction, "expires") => times!(Auction, expires),
        (EventType::Auction, "seller") => ints!(Auction, seller),
        (EventType::Auction, "category") => ints!(Auction, category),
        (EventType::Auction, _) => texts!(Auction, extra),
        (EventType::Bid, "auction") => ints!(Bid, auction),
        (EventType::Bid, "bidder") => ints!(Bid, bidder),
        (EventType::Bid, "price") => ints!(Bid, price),
        (EventType::Bid, "channel") => texts!(Bid, channel),
        (EventType::Bid, "url") => texts!(Bid, url),
        (EventType::Bid, "dateTime") => times!(Bid, date_time),
        (EventType::Bid, _) => texts!(Bid, extra),
    }
}

impl NexmarkSource {
    /// The generator for `table` (its physical `schema`), as subtask `subtask` of
    /// `parallelism`.
    ///
    /// # Errors
    /// A column or `ROW` field the generator does not fill, or a type it cannot give; an
    /// option value that does not parse.
    pub fn new(
        table: &str,
        schema: SchemaRef,
        options: &ConnectorOptions,
        subtask: usize,
        parallelism: usize,
        batch_size: usize,
        metrics: Arc<JobMetrics>,
    ) -> Result<Self> {
        let columns = plan_columns(table, &schema)?;
        let limit: u64 = number(options, "events.num", 0)?;
        let paced = get(options, "rate.limited").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let config = config(options)?;
        // Paced, a batch holds a hundredth of a second's events (as datagen's does), so
        // that events are not held back and barriers pass between batches.
        let batch_size = if paced {
            batch_size.min(config.first_rate.div_ceil(100))
        } else {
            batch_size
        };
        Ok(NexmarkSource {
            table: table.to_string(),
            schema,
            columns,
            config,
            next: subtask as u64,
            step: parallelism.max(1) as u64,
            limit: (limit > 0).then_some(limit),
            batch_size: batch_size.max(1),
            paced,
            pace_origin: None,
            metrics,
        })
    }

    fn events(&mut self) -> Vec<Event> {
        let end = self.limit.unwrap_or(u64::MAX);
        let available = end.saturating_sub(self.next).div_ceil(self.step);
        let n = (self.batch_size as u64).min(available) as usize;
        let generator = EventGenerator::new(self.config.clone())
            .with_offset(self.next)
            .with_step(self.step);
        let events: Vec<Event> = generator.take(n).collect();
        self.next += n as u64 * self.step;
        events
    }

    /// Sleeps until the wall clock has advanced, since the first event generated after the
    /// start or a restore, as far as the events' times have (`'rate.limited'`).
    fn pace(&mut self, events: &[Event]) {
        let (true, Some(first), Some(last)) = (self.paced, events.first(), events.last()) else {
            return;
        };
        let (start, origin) = *self
            .pace_origin
            .get_or_insert_with(|| (Instant::now(), first.timestamp()));
        let due = start + Duration::from_millis(last.timestamp().saturating_sub(origin));
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
    }
}

impl Source for NexmarkSource {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let events = self.events();
        if events.is_empty() {
            return Ok(None);
        }
        self.pace(&events);
        JobMetrics::add(&self.metrics.rows_in, events.len() as u64);
        let mut arrays = Vec::with_capacity(self.columns.len());
        for (column, declared) in self.columns.iter().zip(self.schema.fields()) {
            let array: ArrayRef = match column {
                Column::EventType => Arc::new(Int32Array::from_iter_values(events.iter().map(
                    |e| match e.event_type() {
                        EventType::Person => 0,
                        EventType::Auction => 1,
                        EventType::Bid => 2,
                    },
                ))),
                Column::Row(kind, fields) => {
                    let valid =
                        NullBuffer::from_iter(events.iter().map(|e| e.event_type() == *kind));
                    let children = fields
                        .iter()
                        .map(|f| {
                            let name = field_name(&self.table, *kind, f.name())?;
                            cast_to(field_array(&events, *kind, name), f)
                        })
                        .collect::<Result<Vec<_>>>()?;
                    Arc::new(StructArray::try_new(fields.clone(), children, Some(valid))?)
                }
            };
            arrays.push(cast_to(array, declared)?);
        }
        Ok(Some(RecordBatch::try_new(
            Arc::clone(&self.schema),
            arrays,
        )?))
    }

    fn describe(&self) -> String {
        format!(
            "nexmark table '{}' (events {} + k*{})",
            self.table,
            self.next % self.step,
            self.step
        )
    }

    fn position(&self) -> serde_json::Value {
        serde_json::json!({ "next_event": self.next })
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
        if position.is_null() {
            return Ok(());
        }
        let next = position
            .get("next_event")
            .and_then(|v| v.as_u64())
            .filter(|n| n % self.step == self.next % self.step)
            .ok_or_else(|| {
                SluiceError::Config(format!(
                    "the source offset {position} of nexmark table '{}' is not one of this \
                     subtask's events",
                    self.table
                ))
            })?;
        self.next = next;
        self.pace_origin = None;
        Ok(())
    }
}

/// `array` as the declared field's type (a no-op when it already is).
fn cast_to(array: ArrayRef, field: &Field) -> Result<ArrayRef> {
    if array.data_type() == field.data_type() {
        return Ok(array);
    }
    Ok(cast(&array, field.data_type())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::array::AsArray;
    use datafusion_common::arrow::datatypes::{Int64Type, Schema};

    fn bid_schema() -> SchemaRef {
        let ts = DataType::Timestamp(
            datafusion_common::arrow::datatypes::TimeUnit::Millisecond,
            None,
        );
        Arc::new(Schema::new(vec![
            Field::new("event_type", DataType::Int32, true),
            Field::new(
                "bid",
                DataType::Struct(Fields::from(vec![
                    Field::new("auction", DataType::Int64, true),
                    Field::new("dateTime", ts, true),
                ])),
                true,
            ),
        ]))
    }

    fn metrics() -> Arc<JobMetrics> {
        Arc::new(JobMetrics::default())
    }

    fn options(pairs: &[(&str, &str)]) -> ConnectorOptions {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn all(mut s: NexmarkSource) -> Vec<(i32, Option<i64>, Option<i64>)> {
        let mut out = Vec::new();
        while let Some(b) = s.next_batch().unwrap() {
            let kinds = b
                .column(0)
                .as_primitive::<datafusion_common::arrow::datatypes::Int32Type>();
            let bid = b.column(1).as_struct();
            let auction = bid.column(0).as_primitive::<Int64Type>();
            let time = bid
                .column(1)
                .as_primitive::<datafusion_common::arrow::datatypes::TimestampMillisecondType>();
            for i in 0..b.num_rows() {
                out.push((
                    kinds.value(i),
                    bid.is_valid(i).then(|| auction.value(i)),
                    bid.is_valid(i).then(|| time.value(i)),
                ));
            }
        }
        out
    }

    #[test]
    fn fifty_events_are_one_person_three_auctions_and_46_bids_at_10000_per_second() {
        let opts = options(&[("events.num", "50")]);
        let events = all(NexmarkSource::new("t", bid_schema(), &opts, 0, 1, 7, metrics()).unwrap());
        assert_eq!(events.len(), 50);
        let kinds: Vec<i32> = events.iter().map(|e| e.0).collect();
        assert_eq!(&kinds[..5], &[0, 1, 1, 1, 2]);
        assert_eq!(kinds.iter().filter(|k| **k == 2).count(), 46);
        // Event n is at base + n * 0.1 ms, rounded: event 4 (the first bid) at +0 ms, the
        // last (49) at +5 ms.
        assert_eq!(events[4].2, Some(DEFAULT_BASE_TIME_MS as i64));
        assert_eq!(events[49].2, Some(DEFAULT_BASE_TIME_MS as i64 + 5));
        assert!(events[..4].iter().all(|e| e.1.is_none()));
    }

    #[test]
    fn split_subtasks_generate_the_same_events_between_them() {
        let opts = options(&[("events.num", "1000")]);
        let whole = all(NexmarkSource::new("t", bid_schema(), &opts, 0, 1, 64, metrics()).unwrap());
        let mut parts: Vec<_> = (0..3)
            .flat_map(|i| {
                let part =
                    all(NexmarkSource::new("t", bid_schema(), &opts, i, 3, 50, metrics()).unwrap());
                part.into_iter()
                    .enumerate()
                    .map(move |(k, e)| (i + 3 * k, e))
            })
            .collect();
        parts.sort_by_key(|(n, _)| *n);
        let parts: Vec<_> = parts.into_iter().map(|(_, e)| e).collect();
        assert_eq!(whole, parts);
    }

    #[test]
    fn seeking_resumes_at_the_next_event() {
        let opts = options(&[("events.num", "300")]);
        let whole =
            all(NexmarkSource::new("t", bid_schema(), &opts, 0, 1, 100, metrics()).unwrap());
        let mut first = NexmarkSource::new("t", bid_schema(), &opts, 0, 1, 100, metrics()).unwrap();
        first.next_batch().unwrap();
        let position = first.position();
        let mut resumed =
            NexmarkSource::new("t", bid_schema(), &opts, 0, 1, 100, metrics()).unwrap();
        resumed.seek(&position).unwrap();
        assert_eq!(all(resumed), whole[100..].to_vec());
    }

    /// Flink-Nexmark's PersonGenerator spells states upper-case and cities and names
    /// capitalized (the crate lower-cases them): Nexmark q3 filters on 'OR', 'ID', 'CA'.
    #[test]
    fn persons_are_spelled_as_flink_nexmark_spells_them() {
        let text = Field::new("state", DataType::Utf8, true);
        let schema = Arc::new(Schema::new(vec![Field::new(
            "person",
            DataType::Struct(Fields::from(vec![
                Field::new("name", DataType::Utf8, true),
                Field::new("city", DataType::Utf8, true),
                text,
            ])),
            true,
        )]));
        let opts = options(&[("events.num", "5000")]);
        let mut source = NexmarkSource::new("t", schema, &opts, 0, 1, 5000, metrics()).unwrap();
        let batch = source.next_batch().unwrap().unwrap();
        let persons = batch.column(0).as_struct();
        let mut states = std::collections::BTreeSet::new();
        for i in (0..batch.num_rows()).filter(|&i| persons.is_valid(i)) {
            let name = persons.column(0).as_string::<i32>().value(i);
            let first = name.split(' ').next().unwrap();
            assert!(
                [
                    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah",
                    "Deiter", "Walter"
                ]
                .contains(&first),
                "{name}"
            );
            let city = persons.column(1).as_string::<i32>().value(i);
            assert!(city.starts_with(|c: char| c.is_ascii_uppercase()), "{city}");
            states.insert(persons.column(2).as_string::<i32>().value(i).to_string());
        }
        let all: Vec<&str> = states.iter().map(String::as_str).collect();
        assert_eq!(all, ["AZ", "CA", "ID", "OR", "WA", "WY"]);
    }

    /// Values the generator cannot honour are refused with the reason, not run wrongly
    /// (a changing rate: the crate mis-times it) or into an overflow or out of memory.
    #[test]
    fn values_the_generator_cannot_honour_are_refused() {
        let err = |pairs: &[(&str, &str)]| {
            NexmarkSource::new("t", bid_schema(), &options(pairs), 0, 1, 10, metrics())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let e = err(&[("first-event.rate", "1000"), ("next-event.rate", "5000")]);
        assert!(e.contains("must equal 'first-event.rate'"), "{e}");
        assert_eq!(
            err(&[("first-event.rate", "1000")]),
            "",
            "next follows first"
        );
        let e = err(&[("base-time", "18446744073709551615")]);
        assert!(
            e.contains("'base-time' must be a UTC time from 1970 to 9999"),
            "{e}"
        );
        let e = err(&[("bid.avg-size", "1gb")]);
        assert!(e.contains("'bid.avg-size' must be at most 1 mb"), "{e}");
    }

    /// Paced, a batch is a hundredth of a second's events, and a restored source paces from
    /// its first event on (not from the base time: it would wait as long as the first run).
    #[test]
    fn paced_batches_are_short_and_restart_pacing_at_a_restore() {
        let opts = options(&[
            ("events.num", "400"),
            ("first-event.rate", "1000"),
            ("rate.limited", "true"),
        ]);
        let mut source =
            NexmarkSource::new("t", bid_schema(), &opts, 0, 1, 8192, metrics()).unwrap();
        source
            .seek(&serde_json::json!({ "next_event": 300 }))
            .unwrap();
        let mut batches = 0;
        while let Some(b) = source.next_batch().unwrap() {
            assert_eq!(b.num_rows(), 10);
            batches += 1;
        }
        assert_eq!(batches, 10);
        // Paced from event 300 (300 ms after the base time at 1,000 per second), so the
        // 100 events take 0.1 s rather than the 0.4 s since the base time.
        let (_, origin) = source.pace_origin.expect("paced");
        assert_eq!(origin, DEFAULT_BASE_TIME_MS + 300);
    }

    #[test]
    fn unknown_columns_and_fields_are_refused_with_the_known_ones() {
        let schema = Arc::new(Schema::new(vec![Field::new("bids", DataType::Int32, true)]));
        let err = NexmarkSource::new("t", schema, &options(&[]), 0, 1, 10, metrics())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("event_type, person, auction, bid"), "{err}");
        let schema = Arc::new(Schema::new(vec![Field::new(
            "bid",
            DataType::Struct(Fields::from(vec![Field::new(
                "cost",
                DataType::Int64,
                true,
            )])),
            true,
        )]));
        let err = NexmarkSource::new("t", schema, &options(&[]), 0, 1, 10, metrics())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("auction, bidder, price"), "{err}");
    }
}
