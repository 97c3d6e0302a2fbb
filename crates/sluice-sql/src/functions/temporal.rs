//! Flink's temporal functions (Flink docs: System (Built-in) Functions > Temporal
//! Functions). `TIMESTAMP(p)` values are wall-clock times; `TIMESTAMP_LTZ(p)` values are
//! instants, seen as wall-clock times in the session time zone.

use std::sync::Arc;

use datafusion_common::arrow::array::{AsArray, TimestampMillisecondArray};
use datafusion_common::arrow::compute::cast;
use datafusion_common::arrow::datatypes::{DataType, Int64Type, TimeUnit};
use datafusion_common::{exec_err, Result, ScalarValue};
use datafusion_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

/// `TO_TIMESTAMP_LTZ(epoch [, precision])` (Flink): the instant `epoch` seconds
/// (precision 0) or milliseconds (precision 3, the default) after 1970-01-01 00:00:00 UTC,
/// as `TIMESTAMP_LTZ(3)`. NULL in, NULL out.
///
/// # Errors
/// A precision other than 0 or 3; a result outside the years 1 to 9999.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ToTimestampLtz {
    signature: Signature,
}

impl ToTimestampLtz {
    /// The function, ready to register.
    pub fn udf() -> Arc<ScalarUDF> {
        Arc::new(ScalarUDF::new_from_impl(ToTimestampLtz {
            signature: Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![DataType::Int64]),
                    TypeSignature::Exact(vec![DataType::Int64, DataType::Int64]),
                ],
                Volatility::Immutable,
            ),
        }))
    }
}

impl ScalarUDFImpl for ToTimestampLtz {
    fn name(&self) -> &str {
        "to_timestamp_ltz"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Timestamp(
            TimeUnit::Millisecond,
            Some("UTC".into()),
        ))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let precision = match args.args.get(1) {
            None => 3,
            Some(ColumnarValue::Scalar(ScalarValue::Int64(Some(p)))) => *p,
            Some(other) => {
                return exec_err!(
                    "TO_TIMESTAMP_LTZ: the precision must be the literal 0 or 3, found {other:?}"
                )
            }
        };
        let factor = match precision {
            0 => 1000,
            3 => 1,
            p => return exec_err!("TO_TIMESTAMP_LTZ: precision must be 0 or 3, found {p}"),
        };
        let epoch = args.args[0].to_array(args.number_rows)?;
        let epoch = cast(&epoch, &DataType::Int64)?;
        let epoch = epoch.as_primitive::<Int64Type>();
        // Years 1 to 9999, as SQL timestamps.
        const MIN_MS: i64 = -62_135_596_800_000;
        const MAX_MS: i64 = 253_402_300_799_999;
        let mut values = Vec::with_capacity(epoch.len());
        for v in epoch.iter() {
            match v {
                None => values.push(None),
                Some(v) => match v
                    .checked_mul(factor)
                    .filter(|ms| (MIN_MS..=MAX_MS).contains(ms))
                {
                    Some(ms) => values.push(Some(ms)),
                    None => {
                        return exec_err!(
                            "TO_TIMESTAMP_LTZ({v}, {precision}) is outside the years 1 to 9999"
                        )
                    }
                },
            }
        }
        let ms = TimestampMillisecondArray::from(values);
        let ms = ms.with_timezone("UTC");
        debug_assert_eq!(ms.len(), args.number_rows);
        Ok(ColumnarValue::Array(Arc::new(ms)))
    }
}

use chrono::{Datelike, NaiveDate, NaiveDateTime, Timelike};
use datafusion_common::arrow::array::{
    Array, ArrayRef, Date32Array, StringBuilder, TimestampMicrosecondArray,
    TimestampNanosecondArray, TimestampSecondArray,
};
use datafusion_common::arrow::datatypes::{
    Date32Type, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType,
};
use datafusion_common::plan_err;

use super::java_time::{parse_default, Pattern, Resolve};
use super::rows::{int32_rows, int64_rows, int_at, ints, str_at, string_rows, strs};
use super::udf::{Arg, Call, Def};
use crate::returns;
use sluice_common::time::Tz;

use Arg::{DateOrTimestamp, Int, Str, Timestamp};

/// The functions of this module (besides [`ToTimestampLtz`]).
pub(crate) const FUNCTIONS: &[Def] = &[
    Def::new(
        "date_format",
        &[&[Str, Str], &[Timestamp, Str]],
        |_, s| {
            check_pattern(s, 1)?;
            Ok(DataType::Utf8)
        },
        date_format,
    ),
    Def::new(
        "year",
        &[&[DateOrTimestamp]],
        returns!(DataType::Int64),
        year,
    ),
    Def::new(
        "quarter",
        &[&[DateOrTimestamp]],
        returns!(DataType::Int64),
        quarter,
    ),
    Def::new(
        "month",
        &[&[DateOrTimestamp]],
        returns!(DataType::Int64),
        month,
    ),
    Def::new(
        "week",
        &[&[DateOrTimestamp]],
        returns!(DataType::Int64),
        week,
    ),
    Def::new(
        "dayofyear",
        &[&[DateOrTimestamp]],
        returns!(DataType::Int64),
        dayofyear,
    ),
    Def::new(
        "dayofmonth",
        &[&[DateOrTimestamp]],
        returns!(DataType::Int64),
        dayofmonth,
    ),
    Def::new(
        "dayofweek",
        &[&[DateOrTimestamp]],
        returns!(DataType::Int64),
        dayofweek,
    ),
    Def::new("hour", &[&[Timestamp]], returns!(DataType::Int64), hour),
    Def::new("minute", &[&[Timestamp]], returns!(DataType::Int64), minute),
    Def::new("second", &[&[Timestamp]], returns!(DataType::Int64), second),
    Def::new(
        "$extract",
        &[&[Str, DateOrTimestamp]],
        returns!(DataType::Int64),
        extract,
    ),
    Def::new(
        "$floor_to",
        &[&[DateOrTimestamp, Str]],
        |t, _| Ok(t[0].clone()),
        floor_to,
    ),
    Def::new(
        "$ceil_to",
        &[&[DateOrTimestamp, Str]],
        |t, _| Ok(t[0].clone()),
        ceil_to,
    ),
    Def::new(
        "timestampadd",
        &[&[Str, Int, DateOrTimestamp]],
        |t, _| Ok(t[2].clone()),
        timestampadd,
    ),
    Def::new(
        "timestampdiff",
        &[&[Str, DateOrTimestamp, DateOrTimestamp]],
        returns!(DataType::Int32),
        timestampdiff,
    ),
    Def::new(
        "unix_timestamp",
        &[&[], &[Str], &[Str, Str]],
        returns!(DataType::Int64),
        unix_timestamp,
    )
    .volatile(),
    Def::new(
        "from_unixtime",
        &[&[Int], &[Int, Str]],
        returns!(DataType::Utf8),
        from_unixtime,
    ),
    Def::new(
        "to_timestamp",
        &[&[Str], &[Str, Str]],
        returns!(DataType::Timestamp(TimeUnit::Millisecond, None)),
        to_timestamp,
    ),
    Def::new(
        "to_date",
        &[&[Str], &[Str, Str]],
        returns!(DataType::Date32),
        to_date,
    ),
    Def::new(
        "now",
        &[&[]],
        returns!(DataType::Timestamp(
            TimeUnit::Millisecond,
            Some("UTC".into())
        )),
        now,
    )
    .volatile(),
    Def::new(
        "current_timestamp",
        &[&[]],
        returns!(DataType::Timestamp(
            TimeUnit::Millisecond,
            Some("UTC".into())
        )),
        now,
    )
    .volatile(),
    // `PROCTIME()` declares a processing-time attribute (`pt AS PROCTIME()` in CREATE
    // TABLE, or in a view's or subquery's select list); the source fills it from the
    // job's processing clock (`sluice_common::types::PROCTIME_KEY`). Evaluated anywhere
    // else it is the current instant.
    Def::new(
        "proctime",
        &[&[]],
        returns!(DataType::Timestamp(
            TimeUnit::Millisecond,
            Some("UTC".into())
        )),
        now,
    )
    .volatile()
    .processing_time_attribute(),
    Def::new(
        "localtimestamp",
        &[&[]],
        returns!(DataType::Timestamp(TimeUnit::Millisecond, None)),
        localtimestamp,
    )
    .volatile(),
    Def::new(
        "current_time",
        &[&[]],
        returns!(DataType::Time64(TimeUnit::Nanosecond)),
        local_time,
    )
    .volatile(),
    Def::new(
        "localtime",
        &[&[]],
        returns!(DataType::Time64(TimeUnit::Nanosecond)),
        local_time,
    )
    .volatile(),
    Def::new(
        "current_date",
        &[&[]],
        returns!(DataType::Date32),
        current_date,
    )
    .volatile(),
    Def::new(
        "convert_tz",
        &[&[Str, Str, Str]],
        returns!(DataType::Utf8),
        convert_tz,
    ),
];

const MICROS_PER_DAY: i64 = 86_400_000_000;
const UNIX_EPOCH_DAYS_FROM_CE: i32 = 719_163;

/// Epoch microseconds of row `i` of a timestamp or date column (an instant for LTZ).
fn epoch_micros(a: &ArrayRef, i: usize) -> Option<i64> {
    if a.is_null(i) {
        return None;
    }
    Some(match a.data_type() {
        DataType::Timestamp(TimeUnit::Second, _) => {
            a.as_primitive::<TimestampSecondType>().value(i) * 1_000_000
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            a.as_primitive::<TimestampMillisecondType>().value(i) * 1000
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            a.as_primitive::<TimestampMicrosecondType>().value(i)
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => a
            .as_primitive::<TimestampNanosecondType>()
            .value(i)
            .div_euclid(1000),
        DataType::Date32 => a.as_primitive::<Date32Type>().value(i) as i64 * MICROS_PER_DAY,
        _ => return None,
    })
}

/// Wall-clock microseconds of row `i` (LTZ instants shifted into `zone`).
pub(crate) fn local_micros(a: &ArrayRef, i: usize, zone: &Tz) -> Option<i64> {
    let us = epoch_micros(a, i)?;
    Some(match a.data_type() {
        DataType::Timestamp(_, Some(_)) => {
            let ms = us.div_euclid(1000);
            us + (sluice_common::time::utc_to_local_ms(zone, ms) - ms) * 1000
        }
        _ => us,
    })
}

fn naive(us: i64) -> Option<NaiveDateTime> {
    chrono::DateTime::from_timestamp_micros(us).map(|d| d.naive_utc())
}

fn micros_of(t: &NaiveDateTime) -> i64 {
    t.and_utc().timestamp_micros()
}

/// Wall-clock date-time of row `i`.
fn wall_clock(a: &ArrayRef, i: usize, zone: &Tz) -> Option<NaiveDateTime> {
    naive(local_micros(a, i, zone)?)
}

/// The instant (epoch µs) of wall-clock microseconds `us` in `zone`.
fn local_to_instant(zone: &Tz, us: i64) -> i64 {
    let ms = us.div_euclid(1000);
    us + (sluice_common::time::local_to_utc_ms(zone, ms) - ms) * 1000
}

/// Builds a column of `like`'s type from wall-clock microseconds (LTZ: back to instants).
fn temporal_rows(like: &DataType, zone: &Tz, values: Vec<Option<i64>>) -> Result<ArrayRef> {
    let ltz = matches!(like, DataType::Timestamp(_, Some(_)));
    let instants = values
        .into_iter()
        .map(|o| o.map(|us| if ltz { local_to_instant(zone, us) } else { us }))
        .collect();
    instant_rows(like, instants)
}

/// Builds a column of `like`'s type from epoch microseconds (for a type without a zone,
/// the wall-clock time read as UTC).
pub(crate) fn instant_rows(like: &DataType, values: Vec<Option<i64>>) -> Result<ArrayRef> {
    let v = values.into_iter();
    Ok(match like {
        DataType::Date32 => Arc::new(
            v.map(|o| o.map(|us| us.div_euclid(MICROS_PER_DAY) as i32))
                .collect::<Date32Array>(),
        ),
        DataType::Timestamp(unit, tz) => {
            let a: ArrayRef = match unit {
                TimeUnit::Second => Arc::new(
                    v.map(|o| o.map(|us| us.div_euclid(1_000_000)))
                        .collect::<TimestampSecondArray>(),
                ),
                TimeUnit::Millisecond => Arc::new(
                    v.map(|o| o.map(|us| us.div_euclid(1000)))
                        .collect::<TimestampMillisecondArray>(),
                ),
                TimeUnit::Microsecond => Arc::new(v.collect::<TimestampMicrosecondArray>()),
                TimeUnit::Nanosecond => Arc::new(
                    v.map(|o| o.map(|us| us * 1000))
                        .collect::<TimestampNanosecondArray>(),
                ),
            };
            match tz {
                Some(_) => cast(&a, like)?,
                None => a,
            }
        }
        other => return exec_err!("not a temporal type: {other}"),
    })
}

/// A pattern argument: compiled once when constant.
fn patterns(c: &Call, arg: usize) -> Result<Vec<Option<Arc<Pattern>>>> {
    let a = strs(&c.args[arg]);
    let mut cache: Vec<(String, Arc<Pattern>)> = Vec::new();
    let mut out = Vec::with_capacity(c.rows);
    for i in 0..c.rows {
        let Some(p) = str_at(a, i) else {
            out.push(None);
            continue;
        };
        if let Some((_, compiled)) = cache.iter().find(|(t, _)| t == p) {
            out.push(Some(compiled.clone()));
            continue;
        }
        let compiled = Arc::new(Pattern::compile(p).or_else(|e| exec_err!("{e}"))?);
        cache.push((p.to_string(), Arc::clone(&compiled)));
        out.push(Some(compiled));
    }
    Ok(out)
}

/// Checks a constant pattern argument when the query is planned.
fn check_pattern(scalars: &[Option<&ScalarValue>], arg: usize) -> Result<()> {
    if let Some(Some(v)) = scalars.get(arg) {
        if let Some(Some(p)) = v.try_as_str() {
            if let Err(e) = Pattern::compile(p) {
                return plan_err!("{e}");
            }
        }
    }
    Ok(())
}

/// `DATE_FORMAT(ts, pattern)`: `ts` (a string is read as a timestamp) formatted with a Java
/// `DateTimeFormatter` pattern; an LTZ instant in the session time zone.
fn date_format(c: &Call) -> Result<ArrayRef> {
    let p = patterns(c, 1)?;
    let ts = &c.args[0];
    let text = match ts.data_type() {
        DataType::Utf8 => Some(parse_rows(c, 2, Reading::Strict)?),
        _ => None,
    };
    let mut out = StringBuilder::with_capacity(c.rows, c.rows * 16);
    let mut one = String::new();
    // The last text and what made it: the pattern and the date-time cut to the pattern's
    // finest field (rows of one day or minute print alike: formatted once).
    let mut last: Option<(&Arc<Pattern>, NaiveDateTime)> = None;
    for (i, pattern) in p.iter().enumerate() {
        let t = match &text {
            Some(t) => t[i],
            None => wall_clock(ts, i, &c.zone),
        };
        match (t, pattern) {
            (Some(t), Some(pattern)) => {
                let key = pattern.truncate(&t);
                if !last.is_some_and(|(p, k)| Arc::ptr_eq(p, pattern) && k == key) {
                    one.clear();
                    pattern.format_into(&mut one, &t);
                    last = Some((pattern, key));
                }
                out.append_value(&one);
            }
            _ => out.append_null(),
        }
    }
    Ok(Arc::new(out.finish()))
}

fn field_rows(c: &Call, f: fn(&NaiveDateTime) -> i64) -> Result<ArrayRef> {
    let a = &c.args[0];
    Ok(int64_rows(c.rows, |i| Some(f(&wall_clock(a, i, &c.zone)?))))
}

fn year(c: &Call) -> Result<ArrayRef> {
    field_rows(c, |t| t.year() as i64)
}
fn quarter(c: &Call) -> Result<ArrayRef> {
    field_rows(c, |t| (t.month0() / 3 + 1) as i64)
}
fn month(c: &Call) -> Result<ArrayRef> {
    field_rows(c, |t| t.month() as i64)
}
/// ISO-8601 week of the year.
fn week(c: &Call) -> Result<ArrayRef> {
    field_rows(c, |t| t.iso_week().week() as i64)
}
fn dayofyear(c: &Call) -> Result<ArrayRef> {
    field_rows(c, |t| t.ordinal() as i64)
}
fn dayofmonth(c: &Call) -> Result<ArrayRef> {
    field_rows(c, |t| t.day() as i64)
}
/// 1 = Sunday ... 7 = Saturday.
fn dayofweek(c: &Call) -> Result<ArrayRef> {
    field_rows(c, |t| t.weekday().num_days_from_sunday() as i64 + 1)
}
fn hour(c: &Call) -> Result<ArrayRef> {
    field_rows(c, |t| t.hour() as i64)
}
fn minute(c: &Call) -> Result<ArrayRef> {
    field_rows(c, |t| t.minute() as i64)
}
fn second(c: &Call) -> Result<ArrayRef> {
    field_rows(c, |t| t.second() as i64)
}

/// The value of `unit` (Calcite's `TimeUnitRange` names) in `t`.
fn unit_value(unit: &str, t: &NaiveDateTime, us: i64) -> Result<i64> {
    let y = t.year() as i64;
    Ok(match unit {
        "MILLENNIUM" => (y - 1).div_euclid(1000) + 1,
        "CENTURY" => (y - 1).div_euclid(100) + 1,
        "DECADE" => y.div_euclid(10),
        "YEAR" => y,
        "ISOYEAR" => t.iso_week().year() as i64,
        "QUARTER" => (t.month0() / 3 + 1) as i64,
        "MONTH" => t.month() as i64,
        "WEEK" => t.iso_week().week() as i64,
        "DAY" => t.day() as i64,
        "DOY" => t.ordinal() as i64,
        "DOW" => t.weekday().num_days_from_sunday() as i64 + 1,
        "ISODOW" => t.weekday().number_from_monday() as i64,
        "HOUR" => t.hour() as i64,
        "MINUTE" => t.minute() as i64,
        "SECOND" => t.second() as i64,
        // Flink: the part below a second only.
        "MILLISECOND" => (t.nanosecond() / 1_000_000) as i64,
        "MICROSECOND" => (t.nanosecond() / 1000) as i64,
        "NANOSECOND" => t.nanosecond() as i64,
        "EPOCH" => us.div_euclid(1_000_000),
        other => return exec_err!("EXTRACT: unknown time unit {other}"),
    })
}

/// `EXTRACT(unit FROM t)`, planned as `$extract('UNIT', t)`.
fn extract(c: &Call) -> Result<ArrayRef> {
    let units = strs(&c.args[0]);
    let a = &c.args[1];
    let mut out = Vec::with_capacity(c.rows);
    for i in 0..c.rows {
        let (Some(unit), Some(us)) = (str_at(units, i), local_micros(a, i, &c.zone)) else {
            out.push(None);
            continue;
        };
        let t =
            naive(us).ok_or_else(|| DataFusionError::Execution("timestamp out of range".into()))?;
        out.push(Some(unit_value(&unit.to_ascii_uppercase(), &t, us)?));
    }
    Ok(int64_rows(c.rows, |i| out[i]))
}

use datafusion_common::DataFusionError;

/// Truncates wall-clock `t` to `unit` (`floor`), or rounds it up (`ceil`).
fn truncate(unit: &str, t: &NaiveDateTime, ceil: bool) -> Result<Option<NaiveDateTime>> {
    let date = t.date();
    let floor = match unit {
        "MILLENNIUM" | "CENTURY" | "DECADE" | "YEAR" => {
            let step = match unit {
                "MILLENNIUM" => 1000,
                "CENTURY" => 100,
                "DECADE" => 10,
                _ => 1,
            };
            let y = match unit {
                "MILLENNIUM" | "CENTURY" => ((date.year() - 1).div_euclid(step)) * step + 1,
                _ => date.year().div_euclid(step) * step,
            };
            NaiveDate::from_ymd_opt(y, 1, 1).map(|d| d.and_hms_opt(0, 0, 0).unwrap())
        }
        "QUARTER" => NaiveDate::from_ymd_opt(date.year(), date.month0() / 3 * 3 + 1, 1)
            .map(|d| d.and_hms_opt(0, 0, 0).unwrap()),
        "MONTH" => NaiveDate::from_ymd_opt(date.year(), date.month(), 1)
            .map(|d| d.and_hms_opt(0, 0, 0).unwrap()),
        "WEEK" => {
            // Weeks start on Sunday (Calcite's FLOOR TO WEEK).
            let back = date.weekday().num_days_from_sunday() as i64;
            date.checked_sub_signed(chrono::Duration::days(back))
                .map(|d| d.and_hms_opt(0, 0, 0).unwrap())
        }
        "DAY" => Some(date.and_hms_opt(0, 0, 0).unwrap()),
        "HOUR" | "MINUTE" | "SECOND" | "MILLISECOND" | "MICROSECOND" => {
            let step = match unit {
                "HOUR" => 3_600_000_000,
                "MINUTE" => 60_000_000,
                "SECOND" => 1_000_000,
                "MILLISECOND" => 1000,
                _ => 1,
            };
            let us = micros_of(t);
            let f = us.div_euclid(step) * step;
            let v = if ceil && f != us { f + step } else { f };
            return Ok(naive(v));
        }
        other => return exec_err!("FLOOR/CEIL: unknown time unit {other}"),
    };
    let Some(floor) = floor else { return Ok(None) };
    if !ceil || floor == *t {
        return Ok(Some(floor));
    }
    Ok(match unit {
        "MILLENNIUM" | "CENTURY" | "DECADE" | "YEAR" | "QUARTER" | "MONTH" => {
            let months = match unit {
                "MILLENNIUM" => 12_000,
                "CENTURY" => 1200,
                "DECADE" => 120,
                "YEAR" => 12,
                "QUARTER" => 3,
                _ => 1,
            };
            floor.checked_add_months(chrono::Months::new(months))
        }
        "WEEK" => floor.checked_add_signed(chrono::Duration::days(7)),
        _ => floor.checked_add_signed(chrono::Duration::days(1)),
    })
}

fn floor_ceil(c: &Call, ceil: bool) -> Result<ArrayRef> {
    let a = &c.args[0];
    let units = strs(&c.args[1]);
    let mut out = Vec::with_capacity(c.rows);
    for i in 0..c.rows {
        let (Some(t), Some(unit)) = (wall_clock(a, i, &c.zone), str_at(units, i)) else {
            out.push(None);
            continue;
        };
        out.push(truncate(&unit.to_ascii_uppercase(), &t, ceil)?.map(|t| micros_of(&t)));
    }
    temporal_rows(a.data_type(), &c.zone, out)
}

/// `FLOOR(t TO unit)`, planned as `$floor_to(t, 'UNIT')`.
fn floor_to(c: &Call) -> Result<ArrayRef> {
    floor_ceil(c, false)
}

/// `CEIL(t TO unit)`, planned as `$ceil_to(t, 'UNIT')`.
fn ceil_to(c: &Call) -> Result<ArrayRef> {
    floor_ceil(c, true)
}

/// `TIMESTAMPADD(unit, n, t)`: `t` plus `n` units (months clamp the day to the month's end;
/// weeks and smaller units of a TIMESTAMP_LTZ are elapsed time, as Flink).
fn timestampadd(c: &Call) -> Result<ArrayRef> {
    let units = strs(&c.args[0]);
    let n = ints(&c.args[1]);
    let a = &c.args[2];
    let ltz = matches!(a.data_type(), DataType::Timestamp(_, Some(_)));
    // Epoch microseconds of each result (for a type without a zone, the wall-clock time).
    let mut out = Vec::with_capacity(c.rows);
    for i in 0..c.rows {
        let (Some(unit), Some(n)) = (str_at(units, i), int_at(n, i)) else {
            out.push(None);
            continue;
        };
        let unit = unit.to_ascii_uppercase();
        let months = match unit.as_str() {
            "YEAR" => Some(12),
            "QUARTER" => Some(3),
            "MONTH" => Some(1),
            _ => None,
        };
        // Weeks and smaller are elapsed time, for an instant also across a DST change
        // (Flink: 01:30 EDT + 1 hour is 01:30 EST, + 1 day is 00:30 EST the next day).
        let step = match unit.as_str() {
            "WEEK" => Some(7 * MICROS_PER_DAY),
            "DAY" => Some(MICROS_PER_DAY),
            "HOUR" => Some(3_600_000_000),
            "MINUTE" => Some(60_000_000),
            "SECOND" => Some(1_000_000),
            "MILLISECOND" => Some(1000),
            "MICROSECOND" => Some(1),
            _ => None,
        };
        let r = match (months, step) {
            (Some(per), _) => wall_clock(a, i, &c.zone).and_then(|t| {
                let m = n.checked_mul(per)?;
                let t = if m >= 0 {
                    t.checked_add_months(chrono::Months::new(u32::try_from(m).ok()?))
                } else {
                    t.checked_sub_months(chrono::Months::new(u32::try_from(-m).ok()?))
                }?;
                let us = micros_of(&t);
                Some(if ltz {
                    local_to_instant(&c.zone, us)
                } else {
                    us
                })
            }),
            (None, Some(step)) => {
                epoch_micros(a, i).and_then(|us| us.checked_add(n.checked_mul(step)?))
            }
            (None, None) => return exec_err!("TIMESTAMPADD: unknown time unit {unit}"),
        };
        out.push(r);
    }
    instant_rows(a.data_type(), out)
}

/// `TIMESTAMPDIFF(unit, t1, t2)`: whole units from `t1` to `t2` (months by calendar).
fn timestampdiff(c: &Call) -> Result<ArrayRef> {
    let units = strs(&c.args[0]);
    let (a, b) = (&c.args[1], &c.args[2]);
    let mut out = Vec::with_capacity(c.rows);
    for i in 0..c.rows {
        let (Some(unit), Some(x), Some(y)) = (
            str_at(units, i),
            local_micros(a, i, &c.zone),
            local_micros(b, i, &c.zone),
        ) else {
            out.push(None);
            continue;
        };
        let months = || -> Option<i64> {
            let (tx, ty) = (naive(x)?, naive(y)?);
            let mut m =
                (ty.year() as i64 - tx.year() as i64) * 12 + ty.month() as i64 - tx.month() as i64;
            // A month is whole only when the day and time have been reached.
            let (rest_x, rest_y) = (
                micros_of(&tx) - micros_of(&month_start(&tx)?),
                micros_of(&ty) - micros_of(&month_start(&ty)?),
            );
            if m > 0 && rest_y < rest_x {
                m -= 1;
            } else if m < 0 && rest_y > rest_x {
                m += 1;
            }
            Some(m)
        };
        // Weeks and smaller between instants are elapsed time (across a DST change too).
        let elapsed_units = matches!(
            unit.to_ascii_uppercase().as_str(),
            "WEEK" | "DAY" | "HOUR" | "MINUTE" | "SECOND" | "MILLISECOND" | "MICROSECOND"
        );
        let instants = matches!(a.data_type(), DataType::Timestamp(_, Some(_)))
            && matches!(b.data_type(), DataType::Timestamp(_, Some(_)));
        let d = match (
            elapsed_units && instants,
            epoch_micros(a, i),
            epoch_micros(b, i),
        ) {
            (true, Some(ex), Some(ey)) => ey - ex,
            _ => y - x,
        };
        let v = match unit.to_ascii_uppercase().as_str() {
            "YEAR" => months().map(|m| m / 12),
            "QUARTER" => months().map(|m| m / 3),
            "MONTH" => months(),
            "WEEK" => Some(d / (7 * MICROS_PER_DAY)),
            "DAY" => Some(d / MICROS_PER_DAY),
            "HOUR" => Some(d / 3_600_000_000),
            "MINUTE" => Some(d / 60_000_000),
            "SECOND" => Some(d / 1_000_000),
            "MILLISECOND" => Some(d / 1000),
            "MICROSECOND" => Some(d),
            other => return exec_err!("TIMESTAMPDIFF: unknown time unit {other}"),
        };
        out.push(v.map(|v| v as i32));
    }
    Ok(int32_rows(c.rows, |i| out[i]))
}

fn month_start(t: &NaiveDateTime) -> Option<NaiveDateTime> {
    NaiveDate::from_ymd_opt(t.year(), t.month(), 1)?.and_hms_opt(0, 0, 0)
}

/// How a function reads timestamp text.
#[derive(Clone, Copy)]
enum Reading {
    /// `TO_TIMESTAMP`, `TO_DATE`: the pattern (Java `DateTimeFormatter`, SMART), else
    /// Flink's default reading, which takes a date alone.
    Formatter,
    /// `UNIX_TIMESTAMP`: Java `SimpleDateFormat` (a prefix of the text, lenient dates),
    /// default pattern `yyyy-MM-dd HH:mm:ss`.
    Simple,
    /// `DATE_FORMAT` and `CONVERT_TZ` of a string: `yyyy-MM-dd HH:mm:ss[.fraction]`.
    Strict,
}

/// Row `i` of string argument 0 read as a wall-clock time, with the pattern of argument
/// `fmt` when there is one.
fn parse_rows(c: &Call, fmt: usize, reading: Reading) -> Result<Vec<Option<NaiveDateTime>>> {
    let s = strs(&c.args[0]);
    let p = if fmt < c.args.len() {
        Some(patterns(c, fmt)?)
    } else {
        None
    };
    let simple_default = Pattern::compile("yyyy-MM-dd HH:mm:ss").expect("valid");
    Ok((0..c.rows)
        .map(|i| {
            let text = str_at(s, i)?;
            let pattern = match &p {
                Some(p) => Some(p[i].as_deref()?),
                None => None,
            };
            match (reading, pattern) {
                (Reading::Formatter, Some(p)) => p
                    .parse(text, false, Resolve::Smart)
                    .or_else(|| parse_default(text, true)),
                (Reading::Formatter, None) => parse_default(text, true),
                (Reading::Simple, p) => {
                    p.unwrap_or(&simple_default)
                        .parse(text, true, Resolve::Lenient)
                }
                (Reading::Strict, _) => parse_default(text, false),
            }
        })
        .collect())
}

fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// `UNIX_TIMESTAMP()`: now, in seconds; `UNIX_TIMESTAMP(s [, pattern])`: `s` read as a
/// wall-clock time in the session time zone, in seconds since the epoch; `-2^63` (Java's
/// `Long.MIN_VALUE`, as Flink) when `s` does not parse.
fn unix_timestamp(c: &Call) -> Result<ArrayRef> {
    if c.args.is_empty() {
        let now = now_micros().div_euclid(1_000_000);
        return Ok(int64_rows(c.rows, |_| Some(now)));
    }
    let t = parse_rows(c, 1, Reading::Simple)?;
    Ok(int64_rows(c.rows, |i| {
        if c.args.iter().any(|a| a.is_null(i)) {
            return None;
        }
        // Flink: Long.MIN_VALUE for text that does not parse.
        let Some(t) = t[i] else { return Some(i64::MIN) };
        Some(utc_ms_preferring_later(&c.zone, &t).div_euclid(1000))
    }))
}

/// `FROM_UNIXTIME(seconds [, pattern])`: the instant as wall-clock text in the session time
/// zone (default pattern `yyyy-MM-dd HH:mm:ss`).
fn from_unixtime(c: &Call) -> Result<ArrayRef> {
    let secs = ints(&c.args[0]);
    let p = if c.args.len() > 1 {
        patterns(c, 1)?
    } else {
        vec![
            Some(Arc::new(
                Pattern::compile("yyyy-MM-dd HH:mm:ss").expect("valid")
            ));
            c.rows
        ]
    };
    Ok(string_rows(c.rows, |i| {
        let ms = int_at(secs, i)?.checked_mul(1000)?;
        let local = sluice_common::time::utc_to_local_ms(&c.zone, ms);
        Some(p[i].as_ref()?.format(&naive(local * 1000)?))
    }))
}

/// `TO_TIMESTAMP(s [, pattern])`: `TIMESTAMP(3)`, NULL when `s` does not parse.
fn to_timestamp(c: &Call) -> Result<ArrayRef> {
    let t = parse_rows(c, 1, Reading::Formatter)?;
    Ok(Arc::new(
        t.iter()
            .map(|t| t.map(|t| t.and_utc().timestamp_millis()))
            .collect::<TimestampMillisecondArray>(),
    ))
}

/// `TO_DATE(s [, pattern])`: `DATE`, NULL when `s` does not parse.
fn to_date(c: &Call) -> Result<ArrayRef> {
    let t = parse_rows(c, 1, Reading::Formatter)?;
    Ok(Arc::new(
        t.iter()
            .map(|t| t.map(|t| t.date().num_days_from_ce() - UNIX_EPOCH_DAYS_FROM_CE))
            .collect::<Date32Array>(),
    ))
}

/// `NOW()`, `CURRENT_TIMESTAMP`: the current instant, read for every batch of rows (Flink
/// evaluates it per record in streaming).
fn now(c: &Call) -> Result<ArrayRef> {
    let ms = now_micros().div_euclid(1000);
    let a: ArrayRef =
        Arc::new(TimestampMillisecondArray::from(vec![ms; c.rows]).with_timezone("UTC"));
    Ok(a)
}

/// `LOCALTIMESTAMP`: the current wall-clock time in the session time zone.
fn localtimestamp(c: &Call) -> Result<ArrayRef> {
    let ms = sluice_common::time::utc_to_local_ms(&c.zone, now_micros().div_euclid(1000));
    Ok(Arc::new(TimestampMillisecondArray::from(vec![ms; c.rows])))
}

/// `CURRENT_TIME`, `LOCALTIME`: the wall-clock time of day in the session time zone, in
/// whole seconds (Flink's `TIME(0)`; Arrow `Time64(ns)`, as a `TIME` literal and `CAST(...
/// AS TIME)` are).
fn local_time(c: &Call) -> Result<ArrayRef> {
    let ms = sluice_common::time::utc_to_local_ms(&c.zone, now_micros().div_euclid(1000));
    let of_day_ns = ms.rem_euclid(86_400_000) / 1000 * 1_000_000_000;
    Ok(Arc::new(
        datafusion_common::arrow::array::Time64NanosecondArray::from(vec![of_day_ns; c.rows]),
    ))
}

/// `CURRENT_DATE`: today in the session time zone.
fn current_date(c: &Call) -> Result<ArrayRef> {
    let ms = sluice_common::time::utc_to_local_ms(&c.zone, now_micros().div_euclid(1000));
    let days = ms.div_euclid(86_400_000) as i32;
    Ok(Arc::new(Date32Array::from(vec![days; c.rows])))
}

/// The instant of wall-clock `t` in `zone`; in a DST overlap the later one (Java's
/// `SimpleDateFormat`, which Flink's `CONVERT_TZ` uses).
fn utc_ms_preferring_later(zone: &Tz, t: &NaiveDateTime) -> i64 {
    use chrono::{LocalResult, TimeZone};
    match zone.from_local_datetime(t) {
        LocalResult::Ambiguous(_, later) => later.timestamp_millis(),
        _ => sluice_common::time::local_to_utc_ms(zone, t.and_utc().timestamp_millis()),
    }
}

/// `CONVERT_TZ(s, from, to)`: the wall-clock text `s` (`yyyy-MM-dd HH:mm:ss`) in zone
/// `from`, as wall-clock text in zone `to`.
fn convert_tz(c: &Call) -> Result<ArrayRef> {
    let t = parse_rows(c, 3, Reading::Strict)?;
    let from = strs(&c.args[1]);
    let to = strs(&c.args[2]);
    let fmt = Pattern::compile("yyyy-MM-dd HH:mm:ss").expect("valid");
    let mut out = Vec::with_capacity(c.rows);
    for i in 0..c.rows {
        let (Some(t), Some(f), Some(z)) = (t[i], str_at(from, i), str_at(to, i)) else {
            out.push(None);
            continue;
        };
        let zone = |name: &str| {
            sluice_common::time::parse_time_zone(name).or_else(|e| exec_err!("CONVERT_TZ: {e}"))
        };
        let (f, z) = (zone(f)?, zone(z)?);
        let utc = utc_ms_preferring_later(&f, &t);
        let local = sluice_common::time::utc_to_local_ms(&z, utc);
        out.push(naive(local * 1000).map(|t| fmt.format(&t)));
    }
    Ok(string_rows(c.rows, |i| out[i].clone()))
}
