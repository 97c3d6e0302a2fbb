//! Flink's string functions (Flink docs, "System (Built-in) Functions > String Functions").
//! Positions count characters (Unicode code points) from 1, as Flink's `BinaryStringData`.

use std::sync::Arc;

use datafusion_common::arrow::array::{ArrayRef, StringArray};
use datafusion_common::arrow::datatypes::DataType;
use datafusion_common::{exec_err, Result};

use super::rows::{
    bool_rows, int32_rows, int_at, ints, str_at, string_rows, string_rows_into, strs,
};
use super::udf::{Arg, Call, Def};
use crate::returns;

use Arg::{Int, Str};

/// The functions of this module.
pub(crate) const FUNCTIONS: &[Def] = &[
    Def::new("concat", &[&[Str]], returns!(DataType::Utf8), concat).variadic(),
    Def::new(
        "concat_ws",
        &[&[Str, Str]],
        returns!(DataType::Utf8),
        concat_ws,
    )
    .variadic(),
    Def::new(
        "substring",
        &[&[Str, Int], &[Str, Int, Int]],
        returns!(DataType::Utf8),
        substring,
    ),
    Def::new(
        "substr",
        &[&[Str, Int], &[Str, Int, Int]],
        returns!(DataType::Utf8),
        substring,
    ),
    Def::new(
        "char_length",
        &[&[Str]],
        returns!(DataType::Int32),
        char_length,
    ),
    Def::new(
        "character_length",
        &[&[Str]],
        returns!(DataType::Int32),
        char_length,
    ),
    Def::new("upper", &[&[Str]], returns!(DataType::Utf8), upper),
    Def::new("lower", &[&[Str]], returns!(DataType::Utf8), lower),
    Def::new("initcap", &[&[Str]], returns!(DataType::Utf8), initcap),
    Def::new(
        "position",
        &[&[Str, Str]],
        returns!(DataType::Int32),
        position,
    ),
    Def::new(
        "locate",
        &[&[Str, Str], &[Str, Str, Int]],
        returns!(DataType::Int32),
        locate,
    ),
    Def::new("instr", &[&[Str, Str]], returns!(DataType::Int32), instr),
    Def::new(
        "trim",
        &[&[Str], &[Str, Str]],
        returns!(DataType::Utf8),
        trim_both,
    ),
    Def::new(
        "btrim",
        &[&[Str], &[Str, Str]],
        returns!(DataType::Utf8),
        trim_both,
    ),
    Def::new(
        "ltrim",
        &[&[Str], &[Str, Str]],
        returns!(DataType::Utf8),
        trim_leading,
    ),
    Def::new(
        "rtrim",
        &[&[Str], &[Str, Str]],
        returns!(DataType::Utf8),
        trim_trailing,
    ),
    Def::new("repeat", &[&[Str, Int]], returns!(DataType::Utf8), repeat),
    Def::new(
        "replace",
        &[&[Str, Str, Str]],
        returns!(DataType::Utf8),
        replace,
    ),
    Def::new("reverse", &[&[Str]], returns!(DataType::Utf8), reverse),
    Def::new("lpad", &[&[Str, Int, Str]], returns!(DataType::Utf8), lpad),
    Def::new("rpad", &[&[Str, Int, Str]], returns!(DataType::Utf8), rpad),
    Def::new("left", &[&[Str, Int]], returns!(DataType::Utf8), left),
    Def::new("right", &[&[Str, Int]], returns!(DataType::Utf8), right),
    Def::new("ascii", &[&[Str]], returns!(DataType::Int32), ascii),
    Def::new("chr", &[&[Int]], returns!(DataType::Utf8), chr),
    Def::new(
        "overlay",
        &[&[Str, Str, Int], &[Str, Str, Int, Int]],
        returns!(DataType::Utf8),
        overlay,
    ),
    Def::new(
        "split_index",
        &[&[Str, Str, Int]],
        returns!(DataType::Utf8),
        split_index,
    ),
    Def::new(
        "startswith",
        &[&[Str, Str]],
        returns!(DataType::Boolean),
        starts_with,
    ),
    Def::new(
        "endswith",
        &[&[Str, Str]],
        returns!(DataType::Boolean),
        ends_with,
    ),
];

fn concat(c: &Call) -> Result<ArrayRef> {
    let args: Vec<_> = c.args.iter().map(strs).collect();
    Ok(string_rows(c.rows, |i| {
        let mut out = String::new();
        for a in &args {
            out.push_str(str_at(a, i)?);
        }
        Some(out)
    }))
}

/// `CONCAT_WS(sep, s1, ...)`: NULL when `sep` is NULL; NULL arguments are skipped.
fn concat_ws(c: &Call) -> Result<ArrayRef> {
    let args: Vec<_> = c.args.iter().map(strs).collect();
    Ok(string_rows(c.rows, |i| {
        let sep = str_at(args[0], i)?;
        let parts: Vec<&str> = args[1..].iter().filter_map(|a| str_at(a, i)).collect();
        Some(parts.join(sep))
    }))
}

/// Character `start` (1-based) and `len` characters from it, Flink's
/// `BinaryStringData.substringSQL`: start 0 counts as 1, a negative start counts from the
/// end; NULL for a negative length.
fn substring(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let start = ints(&c.args[1]);
    let len = c.args.get(2).map(ints);
    Ok(string_rows(c.rows, |i| {
        let s = str_at(s, i)?;
        let pos = int_at(start, i)?;
        let length = match len {
            Some(l) => int_at(l, i)?,
            None => i64::MAX,
        };
        if length < 0 {
            return None;
        }
        let chars: Vec<char> = s.chars().collect();
        let n = chars.len() as i64;
        let begin = if pos > 0 {
            pos - 1
        } else if pos < 0 {
            n + pos
        } else {
            0
        };
        let end = begin.saturating_add(length).min(n);
        let begin = begin.max(0);
        if begin >= end {
            return Some(String::new());
        }
        Some(chars[begin as usize..end as usize].iter().collect())
    }))
}

fn char_length(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    Ok(int32_rows(c.rows, |i| {
        Some(str_at(s, i)?.chars().count() as i32)
    }))
}

fn upper(c: &Call) -> Result<ArrayRef> {
    case_mapped(c, str::make_ascii_uppercase, str::to_uppercase)
}

fn lower(c: &Call) -> Result<ArrayRef> {
    case_mapped(c, str::make_ascii_lowercase, str::to_lowercase)
}

/// Each value of the first argument case-mapped: an ASCII value (nearly every one) by
/// `ascii` in one reused buffer, any other by Unicode's full mapping `full`.
fn case_mapped(c: &Call, ascii: fn(&mut str), full: fn(&str) -> String) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    Ok(string_rows_into(c.rows, |i, out| {
        let Some(v) = str_at(s, i) else {
            return false;
        };
        if v.is_ascii() {
            out.push_str(v);
            ascii(out.as_mut_str());
        } else {
            out.push_str(&full(v));
        }
        true
    }))
}

/// The first character of each word upper case, the others lower case; words are runs of
/// ASCII letters and digits (Flink: `é` ends a word).
fn initcap(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    Ok(string_rows(c.rows, |i| {
        let mut out = String::new();
        let mut in_word = false;
        for ch in str_at(s, i)?.chars() {
            if ch.is_ascii_alphanumeric() {
                if in_word {
                    out.extend(ch.to_lowercase());
                } else {
                    out.extend(ch.to_uppercase());
                }
                in_word = true;
            } else {
                out.push(ch);
                in_word = false;
            }
        }
        Some(out)
    }))
}

/// 1-based character position of `needle` in `hay` from character `from` (1-based), 0 when
/// absent.
fn find_from(needle: &str, hay: &str, from: usize) -> i32 {
    let byte_from = match hay.char_indices().nth(from - 1) {
        Some((b, _)) => b,
        None if from - 1 == hay.chars().count() => hay.len(),
        None => return 0,
    };
    match hay[byte_from..].find(needle) {
        Some(b) => (hay[..byte_from + b].chars().count() + 1) as i32,
        None => 0,
    }
}

/// `POSITION(needle IN hay)`.
fn position(c: &Call) -> Result<ArrayRef> {
    let needle = strs(&c.args[0]);
    let hay = strs(&c.args[1]);
    Ok(int32_rows(c.rows, |i| {
        Some(find_from(str_at(needle, i)?, str_at(hay, i)?, 1))
    }))
}

/// `LOCATE(needle, hay [, from])`: a `from` below 1 searches from the start.
fn locate(c: &Call) -> Result<ArrayRef> {
    let needle = strs(&c.args[0]);
    let hay = strs(&c.args[1]);
    let from = c.args.get(2).map(ints);
    Ok(int32_rows(c.rows, |i| {
        let start = match from {
            Some(f) => int_at(f, i)?,
            None => 1,
        };
        Some(find_from(
            str_at(needle, i)?,
            str_at(hay, i)?,
            start.max(1) as usize,
        ))
    }))
}

/// `INSTR(hay, needle)`.
fn instr(c: &Call) -> Result<ArrayRef> {
    let hay = strs(&c.args[0]);
    let needle = strs(&c.args[1]);
    Ok(int32_rows(c.rows, |i| {
        Some(find_from(str_at(needle, i)?, str_at(hay, i)?, 1))
    }))
}

fn trim_with(c: &Call, leading: bool, trailing: bool) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let chars = c.args.get(1).map(strs);
    Ok(string_rows(c.rows, |i| {
        let s = str_at(s, i)?;
        let set: Vec<char> = match chars {
            Some(a) => str_at(a, i)?.chars().collect(),
            None => vec![' '],
        };
        let mut t = s;
        if leading {
            t = t.trim_start_matches(|ch| set.contains(&ch));
        }
        if trailing {
            t = t.trim_end_matches(|ch| set.contains(&ch));
        }
        Some(t.to_string())
    }))
}

fn trim_both(c: &Call) -> Result<ArrayRef> {
    trim_with(c, true, true)
}

fn trim_leading(c: &Call) -> Result<ArrayRef> {
    trim_with(c, true, false)
}

fn trim_trailing(c: &Call) -> Result<ArrayRef> {
    trim_with(c, false, true)
}

/// `REPEAT(s, n)`: empty for `n <= 0`.
fn repeat(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let n = ints(&c.args[1]);
    const MAX_BYTES: i64 = 1 << 30;
    for i in 0..c.rows {
        if let (Some(s), Some(n)) = (str_at(s, i), int_at(n, i)) {
            if n > 0 && (s.len() as i64).saturating_mul(n) > MAX_BYTES {
                return exec_err!("REPEAT: the result would exceed {MAX_BYTES} bytes");
            }
        }
    }
    Ok(string_rows(c.rows, |i| {
        let n = int_at(n, i)?;
        Some(str_at(s, i)?.repeat(n.max(0) as usize))
    }))
}

/// `REPLACE(s, from, to)`: every occurrence of `from` (Java's `String.replace`: an empty
/// `from` matches before every character and at the end).
fn replace(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let from = strs(&c.args[1]);
    let to = strs(&c.args[2]);
    Ok(string_rows(c.rows, |i| {
        Some(str_at(s, i)?.replace(str_at(from, i)?, str_at(to, i)?))
    }))
}

fn reverse(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    Ok(string_rows(c.rows, |i| {
        Some(str_at(s, i)?.chars().rev().collect())
    }))
}

/// `LPAD(s, len, pad)` / `RPAD`: `s` padded (or cut) to `len` characters; NULL for a
/// negative `len` or an empty `pad` (Flink 2.3, even when nothing is padded).
fn pad(c: &Call, at_left: bool) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let len = ints(&c.args[1]);
    let p = strs(&c.args[2]);
    Ok(string_rows(c.rows, |i| {
        let (s, len, p) = (str_at(s, i)?, int_at(len, i)?, str_at(p, i)?);
        if len < 0 {
            return None;
        }
        if p.is_empty() {
            return None;
        }
        let len = len as usize;
        let chars: Vec<char> = s.chars().collect();
        if chars.len() >= len {
            return Some(chars[..len].iter().collect());
        }
        let fill: String = p.chars().cycle().take(len - chars.len()).collect();
        Some(if at_left {
            fill + s
        } else {
            s.to_string() + &fill
        })
    }))
}

fn lpad(c: &Call) -> Result<ArrayRef> {
    pad(c, true)
}

fn rpad(c: &Call) -> Result<ArrayRef> {
    pad(c, false)
}

/// `LEFT(s, n)`: the first `n` characters, empty for `n <= 0`.
fn left(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let n = ints(&c.args[1]);
    Ok(string_rows(c.rows, |i| {
        let n = int_at(n, i)?.max(0) as usize;
        Some(str_at(s, i)?.chars().take(n).collect())
    }))
}

/// `RIGHT(s, n)`: the last `n` characters, empty for `n <= 0`.
fn right(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let n = ints(&c.args[1]);
    Ok(string_rows(c.rows, |i| {
        let s = str_at(s, i)?;
        let n = int_at(n, i)?.max(0) as usize;
        let total = s.chars().count();
        Some(s.chars().skip(total.saturating_sub(n)).collect())
    }))
}

/// `ASCII(s)`: the first byte of `s`'s UTF-8 encoding as a signed byte (Flink 2.3: 'Ü'
/// gives -61), 0 for an empty string.
fn ascii(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    Ok(int32_rows(c.rows, |i| {
        Some(
            str_at(s, i)?
                .as_bytes()
                .first()
                .map_or(0, |b| *b as i8 as i32),
        )
    }))
}

/// `CHR(n)`: the character with code `n` modulo 256; empty for a negative `n`.
fn chr(c: &Call) -> Result<ArrayRef> {
    let n = ints(&c.args[0]);
    Ok(string_rows(c.rows, |i| {
        let n = int_at(n, i)?;
        if n < 0 {
            return Some(String::new());
        }
        char::from_u32((n % 256) as u32).map(String::from)
    }))
}

/// `OVERLAY(s PLACING r FROM pos [FOR len])`: `len` defaults to the length of `r`. As
/// Flink 2.3 computes it: `s` unchanged when `pos` is not a character position of `s`;
/// nothing of `s` after `r` when `len <= 0`.
fn overlay(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let r = strs(&c.args[1]);
    let pos = ints(&c.args[2]);
    let len = c.args.get(3).map(ints);
    Ok(string_rows(c.rows, |i| {
        let s: Vec<char> = str_at(s, i)?.chars().collect();
        let r = str_at(r, i)?;
        let pos = int_at(pos, i)?;
        let len = match len {
            Some(l) => int_at(l, i)?,
            None => r.chars().count() as i64,
        };
        let n = s.len() as i64;
        if pos < 1 || pos > n {
            return Some(s.iter().collect());
        }
        let mut out: String = s[..(pos - 1) as usize].iter().collect();
        out.push_str(r);
        if len > 0 {
            let tail = (pos - 1).saturating_add(len).min(n) as usize;
            out.extend(&s[tail..]);
        }
        Some(out)
    }))
}

/// `SPLIT_INDEX(s, delim, index)`: the `index`-th (0-based) piece of `s` split at `delim`;
/// NULL when there is no such piece or `index` is negative.
fn split_index(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let d = strs(&c.args[1]);
    let idx = ints(&c.args[2]);
    // Pieces are slices of `s`: no String per row.
    let pieces = (0..c.rows).map(|i| {
        let (s, d, idx) = (str_at(s, i)?, str_at(d, i)?, int_at(idx, i)?);
        let idx = usize::try_from(idx).ok()?;
        match d.as_bytes() {
            // Flink: an empty delimiter splits at every whitespace character.
            [] => s.split(char::is_whitespace).nth(idx),
            // One ASCII byte: a byte scan, not a searcher per row.
            &[b] if b.is_ascii() => nth_piece(s, b, idx),
            _ => s.split(d).nth(idx),
        }
    });
    Ok(Arc::new(pieces.collect::<StringArray>()))
}

/// Piece `idx` (from 0) of `s` split at every `byte` (ASCII, so every piece is whole
/// UTF-8), as `s.split(byte as char).nth(idx)` gives it; one pass over the bytes, which
/// beats a memchr call per piece when pieces are short (URL path segments).
fn nth_piece(s: &str, byte: u8, idx: usize) -> Option<&str> {
    let mut start = 0;
    let mut seen = 0;
    for (i, &b) in s.as_bytes().iter().enumerate() {
        if b == byte {
            if seen == idx {
                return Some(&s[start..i]);
            }
            seen += 1;
            start = i + 1;
        }
    }
    (seen == idx).then(|| &s[start..])
}

fn starts_with(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let p = strs(&c.args[1]);
    Ok(bool_rows(c.rows, |i| {
        Some(str_at(s, i)?.starts_with(str_at(p, i)?))
    }))
}

fn ends_with(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let p = strs(&c.args[1]);
    Ok(bool_rows(c.rows, |i| {
        Some(str_at(s, i)?.ends_with(str_at(p, i)?))
    }))
}

#[cfg(test)]
mod tests {
    /// The byte scan gives the piece `str::split` gives, at every index, for delimiters
    /// at either end, doubled, absent, and among multi-byte characters.
    #[test]
    fn nth_piece_is_splits_nth() {
        let texts = [
            "",
            "/",
            "//",
            "a",
            "/a/",
            "a//b",
            "https://www.nexmark.com/rswp/bsu/_gzj/item.htm?query=1",
            "é/ü//ñ/",
        ];
        for s in texts {
            for idx in 0..10 {
                assert_eq!(
                    super::nth_piece(s, b'/', idx),
                    s.split('/').nth(idx),
                    "{s:?} {idx}"
                );
            }
        }
    }
}
