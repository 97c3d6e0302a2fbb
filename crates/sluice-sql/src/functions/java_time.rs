//! Java `DateTimeFormatter` patterns (`yyyy-MM-dd HH:mm:ss.SSS`), as Flink's `DATE_FORMAT`,
//! `TO_TIMESTAMP`, `UNIX_TIMESTAMP`, `FROM_UNIXTIME` and `TO_DATE` read them: formatting and
//! parsing of wall-clock date-times. Pattern letters Sluice does not know are an error,
//! never literal text (DataFusion's `date_format` printed `yyyy` as it stands).

use chrono::{Datelike, NaiveDate, NaiveDateTime, NaiveTime, Timelike};

/// One piece of a compiled pattern.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    /// A pattern letter repeated `count` times.
    Field(char, usize),
}

/// A compiled pattern.
#[derive(Debug, Clone)]
pub(crate) struct Pattern(Vec<Piece>);

const KNOWN: &str = "yuMLdDHhkKmsSaEn";

impl Pattern {
    /// Compiles `pattern`.
    ///
    /// # Errors
    /// An unterminated quote, or a pattern letter Sluice does not support (time zones,
    /// week-based fields, ...), naming it.
    pub(crate) fn compile(pattern: &str) -> Result<Pattern, String> {
        let chars: Vec<char> = pattern.chars().collect();
        let mut pieces = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '\'' {
                if chars.get(i + 1) == Some(&'\'') {
                    pieces.push(Piece::Text("'".into()));
                    i += 2;
                    continue;
                }
                let mut text = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(format!("unterminated quote in pattern '{pattern}'")),
                        Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                            text.push('\'');
                            i += 2;
                        }
                        Some('\'') => {
                            i += 1;
                            break;
                        }
                        Some(ch) => {
                            text.push(*ch);
                            i += 1;
                        }
                    }
                }
                pieces.push(Piece::Text(text));
            } else if c.is_ascii_alphabetic() {
                if !KNOWN.contains(c) {
                    return Err(format!(
                        "pattern letter '{c}' in '{pattern}' is not supported (supported: {KNOWN})"
                    ));
                }
                let mut n = 1;
                while chars.get(i + n) == Some(&c) {
                    n += 1;
                }
                if c == 'S' && n > 9 {
                    return Err(format!(
                        "more than 9 fraction digits ('S' x {n}) in '{pattern}' (nanoseconds are the finest)"
                    ));
                }
                pieces.push(Piece::Field(c, n));
                i += n;
            } else {
                pieces.push(Piece::Text(c.to_string()));
                i += 1;
            }
        }
        Ok(Pattern(pieces))
    }

    /// `t` cut to the finest field the pattern prints (a day for `yyyy-MM-dd`, a minute
    /// for `HH:mm`): two date-times cut alike format alike, so a caller can reuse the
    /// text of the last one.
    pub(crate) fn truncate(&self, t: &NaiveDateTime) -> NaiveDateTime {
        let finest = self
            .0
            .iter()
            .map(|p| match p {
                Piece::Text(_) => 0,
                Piece::Field('H' | 'k' | 'K' | 'h' | 'a', _) => 1,
                Piece::Field('m', _) => 2,
                Piece::Field('s', _) => 3,
                Piece::Field('S' | 'n', _) => 4,
                Piece::Field(..) => 0,
            })
            .max()
            .unwrap_or(0);
        let time = match finest {
            0 => NaiveTime::MIN,
            1 => NaiveTime::from_hms_opt(t.hour(), 0, 0).unwrap_or(NaiveTime::MIN),
            2 => NaiveTime::from_hms_opt(t.hour(), t.minute(), 0).unwrap_or(NaiveTime::MIN),
            3 => {
                NaiveTime::from_hms_opt(t.hour(), t.minute(), t.second()).unwrap_or(NaiveTime::MIN)
            }
            _ => return *t,
        };
        NaiveDateTime::new(t.date(), time)
    }

    /// `t` formatted.
    pub(crate) fn format(&self, t: &NaiveDateTime) -> String {
        let mut out = String::new();
        self.format_into(&mut out, t);
        out
    }

    /// Appends [`Pattern::format`]'s text to `out`.
    pub(crate) fn format_into(&self, out: &mut String, t: &NaiveDateTime) {
        for p in &self.0 {
            match p {
                Piece::Text(s) => out.push_str(s),
                Piece::Field(c, n) => format_field(out, *c, *n, t),
            }
        }
    }

    /// `s` parsed. Missing fields default to 1970-01-01 00:00:00. With `prefix`, text
    /// after the pattern is ignored (Java's `SimpleDateFormat.parse`); otherwise the whole
    /// text must match. `None` when `s` does not match.
    pub(crate) fn parse(&self, s: &str, prefix: bool, resolve: Resolve) -> Option<NaiveDateTime> {
        let b = s.as_bytes();
        let mut pos = 0;
        let (mut year, mut month, mut day) = (1970i32, 1u32, 1u32);
        let (mut hour, mut minute, mut second, mut nanos) = (0u32, 0u32, 0u32, 0u32);
        let mut pm: Option<bool> = None;
        let mut hour12 = false;
        for (k, p) in self.0.iter().enumerate() {
            match p {
                Piece::Text(t) => {
                    if !s[pos..].starts_with(t.as_str()) {
                        return None;
                    }
                    pos += t.len();
                }
                Piece::Field('a', _) => {
                    let rest = s[pos..].to_ascii_uppercase();
                    if rest.starts_with("AM") {
                        pm = Some(false);
                    } else if rest.starts_with("PM") {
                        pm = Some(true);
                    } else {
                        return None;
                    }
                    pos += 2;
                }
                Piece::Field(c, n) => {
                    // Next to another number field a field takes exactly its width.
                    let adjacent =
                        matches!(self.0.get(k + 1), Some(Piece::Field(d, _)) if *d != 'a');
                    // DateTimeFormatter: a letter repeated is a fixed width (a year at
                    // least that wide); SimpleDateFormat: any width unless adjacent.
                    let (min, max) = match (resolve, *c) {
                        (_, 'S') => (*n, *n),
                        (_, _) if adjacent => (*n, *n),
                        (Resolve::Lenient, _) => (1, 9.max(*n)),
                        (Resolve::Smart, 'y' | 'u') if *n >= 4 => (*n, 9.max(*n)),
                        (Resolve::Smart, _) if *n >= 2 => (*n, *n),
                        (Resolve::Smart, _) => (1, 9),
                    };
                    let start = pos;
                    while pos < b.len() && pos - start < max && b[pos].is_ascii_digit() {
                        pos += 1;
                    }
                    let digits = &s[start..pos];
                    if digits.len() < min {
                        return None;
                    }
                    let v: i64 = digits.parse().ok()?;
                    match c {
                        'y' | 'u' => {
                            year = if *n == 2 && digits.len() == 2 {
                                2000 + v as i32
                            } else {
                                v as i32
                            }
                        }
                        'M' | 'L' => month = v as u32,
                        'd' => day = v as u32,
                        'H' | 'k' => hour = v as u32 % 24,
                        'h' | 'K' => {
                            hour = v as u32 % 12;
                            hour12 = true;
                        }
                        'm' => minute = v as u32,
                        's' => second = v as u32,
                        'S' => nanos = (v as u32) * 10u32.pow(9 - digits.len() as u32),
                        _ => return None,
                    }
                }
            }
        }
        if pos != s.len() && !prefix {
            return None;
        }
        if hour12 && pm == Some(true) {
            hour += 12;
        }
        let time = NaiveTime::from_hms_nano_opt(hour, minute, second, nanos)?;
        Some(NaiveDateTime::new(resolve.date(year, month, day)?, time))
    }
}

/// How out-of-range day and month numbers resolve (Java's resolver styles).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Resolve {
    /// `DateTimeFormatter`'s SMART: a day 29 to 31 past the month's end is its last day.
    Smart,
    /// `SimpleDateFormat`'s lenient rollover: February 30 is March 1.
    Lenient,
}

impl Resolve {
    pub(crate) fn date(self, year: i32, month: u32, day: u32) -> Option<NaiveDate> {
        match self {
            Resolve::Smart => {
                if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
                    return None;
                }
                (1..=day)
                    .rev()
                    .take(4)
                    .find_map(|d| NaiveDate::from_ymd_opt(year, month, d))
            }
            Resolve::Lenient => {
                let first = NaiveDate::from_ymd_opt(year, 1, 1)?;
                let months = chrono::Months::new(month.checked_sub(1)?);
                first
                    .checked_add_months(months)?
                    .checked_add_days(chrono::Days::new(day.checked_sub(1)? as u64))
            }
        }
    }
}

/// Flink's reading of a timestamp string without a pattern: `yyyy-MM-dd HH:mm:ss` with an
/// optional fraction (`T` also separates), or, when `date_only` allows, `yyyy-MM-dd` and
/// `yyyy-MM-dd HH:mm`. Days past a month's end resolve as [`Resolve::Smart`].
pub(crate) fn parse_default(s: &str, date_only: bool) -> Option<NaiveDateTime> {
    let s = s.trim();
    let (date, time) = match s.find([' ', 'T']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let mut d = date.splitn(3, '-');
    let num = |t: Option<&str>| -> Option<u32> {
        let t = t?;
        (!t.is_empty() && t.len() <= 4 && t.bytes().all(|b| b.is_ascii_digit()))
            .then(|| t.parse().ok())?
    };
    let year = date
        .split('-')
        .next()
        .filter(|y| y.len() == 4)?
        .parse()
        .ok()?;
    d.next();
    let (month, day) = (num(d.next())?, num(d.next())?);
    let date = Resolve::Smart.date(year, month, day)?;
    let time = match time {
        None if date_only => NaiveTime::MIN,
        None => return None,
        Some(t) => {
            let (hms, frac) = match t.split_once('.') {
                Some((a, f)) => (a, Some(f)),
                None => (t, None),
            };
            let mut parts = hms.split(':');
            let h = num(parts.next())?;
            let m = num(parts.next())?;
            let sec = match parts.next() {
                Some(x) => num(Some(x))?,
                None if date_only && frac.is_none() => 0,
                None => return None,
            };
            if parts.next().is_some() {
                return None;
            }
            let nanos = match frac {
                None => 0,
                Some(f)
                    if !f.is_empty() && f.len() <= 9 && f.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    f.parse::<u32>().ok()? * 10u32.pow(9 - f.len() as u32)
                }
                Some(_) => return None,
            };
            NaiveTime::from_hms_nano_opt(h, m, sec, nanos)?
        }
    };
    Some(NaiveDateTime::new(date, time))
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

fn pad(out: &mut String, v: i64, n: usize) {
    if v < 0 {
        out.push('-');
    }
    sluice_common::time::push_padded(out, v.unsigned_abs(), n);
}

fn format_field(out: &mut String, c: char, n: usize, t: &NaiveDateTime) {
    match c {
        'y' | 'u' if n == 2 => pad(out, (t.year() % 100) as i64, 2),
        'y' | 'u' => pad(out, t.year() as i64, n),
        'M' | 'L' if n >= 4 => out.push_str(MONTHS[t.month0() as usize]),
        'M' | 'L' if n == 3 => out.push_str(&MONTHS[t.month0() as usize][..3]),
        'M' | 'L' => pad(out, t.month() as i64, n),
        'd' => pad(out, t.day() as i64, n),
        'D' => pad(out, t.ordinal() as i64, n),
        'H' => pad(out, t.hour() as i64, n),
        'k' => pad(out, if t.hour() == 0 { 24 } else { t.hour() as i64 }, n),
        'K' => pad(out, (t.hour() % 12) as i64, n),
        'h' => pad(
            out,
            if t.hour() % 12 == 0 {
                12
            } else {
                (t.hour() % 12) as i64
            },
            n,
        ),
        'm' => pad(out, t.minute() as i64, n),
        's' => pad(out, t.second() as i64, n),
        'S' => {
            let start = out.len();
            sluice_common::time::push_padded(out, t.nanosecond().min(999_999_999) as u64, 9);
            if n <= 9 {
                out.truncate(start + n);
            } else {
                out.extend(std::iter::repeat_n('0', n - 9));
            }
        }
        'n' => pad(out, t.nanosecond() as i64, n),
        'a' => out.push_str(if t.hour() < 12 { "AM" } else { "PM" }),
        'E' if n >= 4 => out.push_str(DAYS[t.weekday().num_days_from_monday() as usize]),
        'E' => out.push_str(&DAYS[t.weekday().num_days_from_monday() as usize][..3]),
        _ => unreachable!("compile() accepts only known letters"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").unwrap()
    }

    /// A date-time cut by `truncate` formats as the date-time itself, for patterns of
    /// every finest field (so `DATE_FORMAT` may reuse the text of rows cut alike), and
    /// the cut is as coarse as the pattern allows.
    #[test]
    fn a_truncated_date_time_formats_alike() {
        let patterns = [
            "yyyy-MM-dd",
            "EEE D",
            "HH:mm",
            "h a",
            "k K",
            "yyyy-MM-dd HH:mm:ss",
            "ss.SSS",
            "nnnnnnnnn",
            "'at' HH 'o''clock'",
        ];
        let times = [
            "2015-07-15 00:00:00",
            "2015-07-15 23:59:59.999",
            "2016-02-29 12:30:05.123456789",
            "1969-12-31 11:59:58.5",
        ];
        for p in patterns {
            let pattern = Pattern::compile(p).unwrap();
            for s in times {
                let at = t(s);
                let cut = pattern.truncate(&at);
                assert_eq!(pattern.format(&cut), pattern.format(&at), "{p} {s}");
            }
        }
        let day = Pattern::compile("yyyy-MM-dd").unwrap();
        assert_eq!(
            day.truncate(&t("2015-07-15 23:59:59.999")),
            t("2015-07-15 00:00:00")
        );
        let minute = Pattern::compile("HH:mm").unwrap();
        assert_eq!(
            minute.truncate(&t("2015-07-15 23:59:59.999")),
            t("2015-07-15 23:59:00")
        );
    }

    #[test]
    fn formats_and_parses_javas_letters() {
        let p = Pattern::compile("yyyy-MM-dd HH:mm:ss.SSS").unwrap();
        assert_eq!(
            p.format(&t("2024-02-29 13:05:09.120")),
            "2024-02-29 13:05:09.120"
        );
        assert_eq!(
            p.parse("2024-02-29 13:05:09.120", false, Resolve::Smart),
            Some(t("2024-02-29 13:05:09.120"))
        );
        let p = Pattern::compile("EEE, d MMM yy h:mm a 'o''clock'").unwrap();
        assert_eq!(
            p.format(&t("2024-02-29 13:05:09")),
            "Thu, 29 Feb 24 1:05 PM o'clock"
        );
        let p = Pattern::compile("yyyyMMddHHmmss").unwrap();
        assert_eq!(
            p.parse("20240229130509", false, Resolve::Smart),
            Some(t("2024-02-29 13:05:09"))
        );
        assert_eq!(p.parse("2024022913050", false, Resolve::Smart), None);
        let p = Pattern::compile("yyyy-MM-dd").unwrap();
        assert_eq!(
            p.parse("2024-02-30 x", true, Resolve::Lenient),
            Some(t("2024-03-01 00:00:00"))
        );
        assert_eq!(
            p.parse("2024-02-30", false, Resolve::Smart),
            Some(t("2024-02-29 00:00:00"))
        );
        assert_eq!(
            parse_default("2024-02-30 01:02:03.5", false),
            Some(t("2024-02-29 01:02:03.5"))
        );
        assert_eq!(parse_default("2024-02-29", false), None);
        assert_eq!(
            parse_default("2024-02-29", true),
            Some(t("2024-02-29 00:00:00"))
        );
        assert!(Pattern::compile("yyyy-MM-dd'T'HH:mm:ssXXX").is_err());
        assert!(Pattern::compile("ss.SSSSSSSSSS").is_err());
    }
}
