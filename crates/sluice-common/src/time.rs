//! Event time: milliseconds since the Unix epoch, signed 64-bit.
//!
//! Sluice keeps event time, watermarks and window bounds in one unit, milliseconds, the
//! unit of Flink's `TIMESTAMP(3)` and of its window firing rule (`end - 1 ms`). Every raw
//! integer that holds a time says its unit in its name (`size_ms`, `gap_ms`).

/// The watermark before any row has been seen: no row is late against it.
pub const WATERMARK_MIN: i64 = i64::MIN;
/// The final watermark of a bounded input: every window fires against it.
pub const WATERMARK_MAX: i64 = i64::MAX;

/// Start (ms) of the epoch-aligned window of `size_ms` (shifted by `offset_ms`) that holds
/// `ts_ms`: `ts - floor_mod(ts - offset, size)`.
///
/// Correct for timestamps before 1970 too (Flink's FLINK-26334 used a truncating `%`,
/// which shifted pre-epoch rows into the next window). `size_ms` must be positive.
#[inline]
pub fn window_start_ms(ts_ms: i64, offset_ms: i64, size_ms: i64) -> i64 {
    ts_ms - (ts_ms - offset_ms).rem_euclid(size_ms)
}

/// Whether a window ending at `end_ms` (exclusive) has fired under `watermark_ms`.
///
/// A window `[start, end)` fires once, when the watermark reaches `end - 1 ms` (Flink's
/// window TVF aggregation: `WindowOperatorBase`, timer at `end - 1`).
#[inline]
pub fn window_fired(end_ms: i64, watermark_ms: i64) -> bool {
    watermark_ms >= end_ms.saturating_sub(1)
}

/// Formats an epoch-millisecond timestamp as `YYYY-MM-DD HH:MM:SS`, plus `.fff` when the
/// milliseconds are not zero (the convention of `sluice run` output).
pub fn format_timestamp_ms(ts_ms: i64) -> String {
    let mut out = String::with_capacity(23);
    push_timestamp_ms(&mut out, ts_ms);
    out
}

/// Appends [`format_timestamp_ms`]'s text to `out` (no allocation once `out` has room:
/// a sink formats every row's timestamps into one buffer).
pub fn push_timestamp_ms(out: &mut String, ts_ms: i64) {
    let days = ts_ms.div_euclid(86_400_000);
    let ms_of_day = ts_ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    if (0..=9999).contains(&y) {
        push_padded(out, y as u64, 4);
    } else {
        // Outside 0..=9999, as `format!("{y:04}")` writes it (the sign counts in the width).
        if y < 0 {
            out.push('-');
            push_padded(out, y.unsigned_abs(), 3);
        } else {
            push_padded(out, y as u64, 4);
        }
    }
    out.push('-');
    push_padded(out, m as u64, 2);
    out.push('-');
    push_padded(out, d as u64, 2);
    out.push(' ');
    push_padded(out, (ms_of_day / 3_600_000) as u64, 2);
    out.push(':');
    push_padded(out, ((ms_of_day / 60_000) % 60) as u64, 2);
    out.push(':');
    push_padded(out, ((ms_of_day / 1000) % 60) as u64, 2);
    let ms = ms_of_day % 1000;
    if ms != 0 {
        out.push('.');
        push_padded(out, ms as u64, 3);
    }
}

/// Appends `v` in decimal, zero-padded on the left to at least `width` digits.
pub fn push_padded(out: &mut String, v: u64, width: usize) {
    let mut digits = [0u8; 20];
    let mut n = 0;
    let mut rest = v;
    loop {
        digits[19 - n] = b'0' + (rest % 10) as u8;
        n += 1;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for _ in n..width {
        out.push('0');
    }
    for d in &digits[20 - n..] {
        out.push(char::from(*d));
    }
}

/// Formats a day count since 1970-01-01 as `YYYY-MM-DD`.
pub fn format_date_days(days: i64) -> String {
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_start_is_floor_aligned_before_and_after_epoch() {
        assert_eq!(window_start_ms(-10_001, 0, 10_000), -20_000);
        assert_eq!(window_start_ms(-10_000, 0, 10_000), -10_000);
        assert_eq!(window_start_ms(-1, 0, 10_000), -10_000);
        assert_eq!(window_start_ms(0, 0, 10_000), 0);
        assert_eq!(window_start_ms(9_999, 0, 10_000), 0);
        assert_eq!(window_start_ms(12_000, 5_000, 10_000), 5_000);
        assert_eq!(window_start_ms(4_000, 5_000, 10_000), -5_000);
    }

    #[test]
    fn window_fires_at_end_minus_one_ms() {
        assert!(!window_fired(10_000, 9_998));
        assert!(window_fired(10_000, 9_999));
        assert!(!window_fired(10_000, WATERMARK_MIN));
        assert!(window_fired(i64::MAX, WATERMARK_MAX));
    }

    #[test]
    fn pushed_timestamps_spell_as_format_does() {
        // The reference: the same fields through `format!`, for instants around the
        // epoch, leap days, and years of other than four digits.
        let reference = |ts_ms: i64| {
            let days = ts_ms.div_euclid(86_400_000);
            let ms_of_day = ts_ms.rem_euclid(86_400_000);
            let (y, m, d) = civil_from_days(days);
            let (h, mi) = (ms_of_day / 3_600_000, (ms_of_day / 60_000) % 60);
            let (s, ms) = ((ms_of_day / 1000) % 60, ms_of_day % 1000);
            if ms == 0 {
                format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}")
            } else {
                format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}.{ms:03}")
            }
        };
        let year_ms = 31_556_952_000i64;
        for ts in [
            0,
            -1,
            1,
            999,
            86_399_999,
            951_782_400_000,
            -62_167_219_200_001, // 1 ms before 0000-01-01
            -62_198_755_200_000, // year -1
            -70_000 * year_ms,
            253_402_300_800_000, // 10000-01-01
            300_000 * year_ms + 7,
        ] {
            let mut pushed = String::from("x");
            push_timestamp_ms(&mut pushed, ts);
            assert_eq!(pushed, format!("x{}", reference(ts)), "{ts}");
        }
        assert_eq!(
            format_timestamp_ms(-62_198_755_200_000),
            "-001-01-01 00:00:00"
        );
    }

    #[test]
    fn formats_timestamps() {
        assert_eq!(format_timestamp_ms(0), "1970-01-01 00:00:00");
        assert_eq!(format_timestamp_ms(-1), "1969-12-31 23:59:59.999");
        assert_eq!(
            format_timestamp_ms(1_709_287_199_999),
            "2024-03-01 09:59:59.999"
        );
        assert_eq!(format_timestamp_ms(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(format_date_days(-1), "1969-12-31");
    }
}

/// A time zone (IANA name such as `Europe/Berlin`, or a fixed offset such as `+08:00`),
/// from chrono-tz through arrow.
pub use datafusion_common::arrow::array::timezone::Tz;

/// The spelling of a time zone that Arrow accepts: `GMT+08:00` / `UTC-05:00` (Flink's
/// offset forms) become `+08:00` / `-05:00`; names stay.
///
/// # Errors
/// An unknown zone.
pub fn normalize_time_zone(name: &str) -> Result<String, String> {
    parse_time_zone(name)?;
    let offset = ["GMT", "UTC"]
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .filter(|rest| rest.starts_with(['+', '-']));
    Ok(offset.unwrap_or(name).to_string())
}

/// Parses a session time zone (`'table.local-time-zone'`).
///
/// # Errors
/// An unknown zone name, with what is accepted.
pub fn parse_time_zone(name: &str) -> Result<Tz, String> {
    // Flink also accepts 'GMT+08:00' / 'UTC-05:00'.
    let offset = ["GMT", "UTC"]
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .filter(|rest| rest.starts_with(['+', '-']));
    offset.unwrap_or(name).parse::<Tz>().map_err(|_| {
        format!(
            "unknown time zone '{name}': use an IANA name such as 'UTC', 'Europe/Berlin', \
             'America/New_York', or an offset such as '+08:00'"
        )
    })
}

fn offset_ms_at_utc(tz: &Tz, utc_ms: i64) -> i64 {
    use chrono::{Offset, TimeZone};
    let Some(dt) = chrono::DateTime::from_timestamp_millis(utc_ms) else {
        return 0;
    };
    tz.offset_from_utc_datetime(&dt.naive_utc())
        .fix()
        .local_minus_utc() as i64
        * 1000
}

/// The wall-clock time (ms since the epoch, as if UTC) of the instant `utc_ms` in `tz`.
pub fn utc_to_local_ms(tz: &Tz, utc_ms: i64) -> i64 {
    utc_ms + offset_ms_at_utc(tz, utc_ms)
}

/// The instant (UTC ms) of the wall-clock time `local_ms` in `tz`. A time in a DST gap is
/// moved forward by the gap; a time in a DST overlap takes the earlier instant (as Java's
/// `ZonedDateTime.of`, which Flink's window code uses).
pub fn local_to_utc_ms(tz: &Tz, local_ms: i64) -> i64 {
    use chrono::{LocalResult, Offset, TimeZone};
    let Some(dt) = chrono::DateTime::from_timestamp_millis(local_ms) else {
        return local_ms;
    };
    match tz.offset_from_local_datetime(&dt.naive_utc()) {
        LocalResult::Single(o) => local_ms - o.fix().local_minus_utc() as i64 * 1000,
        LocalResult::Ambiguous(a, b) => {
            let (a, b) = (a.fix().local_minus_utc(), b.fix().local_minus_utc());
            local_ms - a.max(b) as i64 * 1000
        }
        // In a gap: the offset from before the transition moves it forward.
        LocalResult::None => local_ms - offset_ms_at_utc(tz, local_ms - 86_400_000),
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    if y >= 0 {
        // The common case, with plain (faster) division.
        let era = y / 400;
        let yoe = y - era * 400;
        let mp = (m as i64 + 9) % 12;
        let doy = (153 * mp + 2) / 5 + d as i64 - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        return era * 146_097 + doe - 719_468;
    }
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses `YYYY-MM-DD HH:MM:SS[.f...]` (or with `T` instead of the space, or a date alone)
/// into epoch milliseconds, digits beyond milliseconds truncated. `None` for anything
/// else, including impossible dates (callers fall back to a general parser).
///
/// The fast path for the common CSV timestamp spelling: a few integer operations instead
/// of a general date-time parser.
pub fn parse_timestamp_ms(s: &[u8]) -> Option<i64> {
    fn digits(s: &[u8]) -> Option<u32> {
        let mut v = 0u32;
        for &b in s {
            if !b.is_ascii_digit() {
                return None;
            }
            v = v * 10 + (b - b'0') as u32;
        }
        Some(v)
    }
    if s.len() < 10 || s[4] != b'-' || s[7] != b'-' {
        return None;
    }
    let y = digits(&s[0..4])? as i64;
    let m = digits(&s[5..7])?;
    let d = digits(&s[8..10])?;
    let days_in_month = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => return None,
    };
    if d == 0 || d > days_in_month {
        return None;
    }
    let day_ms = days_from_civil(y, m, d) * 86_400_000;
    if s.len() == 10 {
        return Some(day_ms);
    }
    if s.len() < 19 || (s[10] != b' ' && s[10] != b'T') || s[13] != b':' || s[16] != b':' {
        return None;
    }
    let h = digits(&s[11..13])?;
    let mi = digits(&s[14..16])?;
    let sec = digits(&s[17..19])?;
    if h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    let mut ms = 0i64;
    if s.len() > 19 {
        let frac = &s[20..];
        if s[19] != b'.' || frac.is_empty() || frac.len() > 9 {
            return None;
        }
        digits(frac)?;
        for i in 0..3 {
            ms = ms * 10 + frac.get(i).map(|b| (b - b'0') as i64).unwrap_or(0);
        }
    }
    Some(day_ms + (h as i64 * 3600 + mi as i64 * 60 + sec as i64) * 1000 + ms)
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    #[test]
    fn local_time_across_dst() {
        let berlin = parse_time_zone("Europe/Berlin").unwrap();
        let ms = |s: &str| parse_timestamp_ms(s.as_bytes()).unwrap();
        // Winter (+1) and summer (+2).
        assert_eq!(
            utc_to_local_ms(&berlin, ms("2024-01-10 12:00:00")),
            ms("2024-01-10 13:00:00")
        );
        assert_eq!(
            local_to_utc_ms(&berlin, ms("2024-07-10 14:00:00")),
            ms("2024-07-10 12:00:00")
        );
        // 2024-03-31 02:30 does not exist in Berlin: moved forward to 03:30 CEST = 01:30Z.
        assert_eq!(
            local_to_utc_ms(&berlin, ms("2024-03-31 02:30:00")),
            ms("2024-03-31 01:30:00")
        );
        // 2024-10-27 02:30 happens twice: the earlier instant (CEST) = 00:30Z.
        assert_eq!(
            local_to_utc_ms(&berlin, ms("2024-10-27 02:30:00")),
            ms("2024-10-27 00:30:00")
        );
        assert!(parse_time_zone("Mars/Olympus").is_err());
        assert_eq!(
            utc_to_local_ms(&parse_time_zone("+08:00").unwrap(), 0),
            8 * 3_600_000
        );
        assert_eq!(
            utc_to_local_ms(&parse_time_zone("GMT+08:00").unwrap(), 0),
            8 * 3_600_000
        );
        assert!(parse_time_zone("UTC").is_ok());
    }

    #[test]
    fn parses_the_common_spellings() {
        assert_eq!(parse_timestamp_ms(b"1970-01-01 00:00:00"), Some(0));
        assert_eq!(parse_timestamp_ms(b"1969-12-31 23:59:59.999"), Some(-1));
        assert_eq!(
            parse_timestamp_ms(b"2024-02-29T12:00:00.5"),
            Some(1_709_208_000_500)
        );
        assert_eq!(
            parse_timestamp_ms(b"2024-03-01 09:59:59.999999"),
            Some(1_709_287_199_999)
        );
        assert_eq!(parse_timestamp_ms(b"2013-01-01"), Some(1_356_998_400_000));
        for ms in [-86_400_001i64, 0, 951_782_400_123, 4_102_444_799_999] {
            assert_eq!(
                parse_timestamp_ms(format_timestamp_ms(ms).as_bytes()),
                Some(ms)
            );
        }
    }

    #[test]
    fn rejects_what_it_does_not_know() {
        for bad in [
            "2023-02-29 00:00:00",
            "2024-13-01 00:00:00",
            "2024-01-01 24:00:00",
            "2024-01-01 00:00",
            "2024-01-01 00:00:00.",
            "2024-01-01 00:00:00Z",
            "amount",
            "",
        ] {
            assert_eq!(parse_timestamp_ms(bad.as_bytes()), None, "{bad}");
        }
    }
}
