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
    let days = ts_ms.div_euclid(86_400_000);
    let ms_of_day = ts_ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let h = ms_of_day / 3_600_000;
    let mi = (ms_of_day / 60_000) % 60;
    let s = (ms_of_day / 1000) % 60;
    let ms = ms_of_day % 1000;
    if ms == 0 {
        format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}")
    } else {
        format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}.{ms:03}")
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
    fn formats_timestamps() {
        assert_eq!(format_timestamp_ms(0), "1970-01-01 00:00:00");
        assert_eq!(format_timestamp_ms(-1), "1969-12-31 23:59:59.999");
        assert_eq!(format_timestamp_ms(1_709_287_199_999), "2024-03-01 09:59:59.999");
        assert_eq!(format_timestamp_ms(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(format_date_days(-1), "1969-12-31");
    }
}
