//! Functions of `BYTES` values (Flink docs: System (Built-in) Functions > String Functions:
//! `ENCODE`, `DECODE`, `UNHEX`).

use std::sync::Arc;

use datafusion_common::arrow::array::{Array, ArrayRef, AsArray, BinaryArray, StringArray};
use datafusion_common::arrow::compute::cast;
use datafusion_common::arrow::datatypes::DataType;
use datafusion_common::{exec_err, Result};

use super::udf::{Arg, Call, Def};
use crate::returns;

pub(crate) const FUNCTIONS: &[Def] = &[
    Def::new(
        "encode",
        &[&[Arg::Str, Arg::Str]],
        returns!(DataType::Binary),
        encode,
    ),
    Def::new(
        "decode",
        &[&[Arg::Bytes, Arg::Str]],
        returns!(DataType::Utf8),
        decode,
    ),
    Def::new("unhex", &[&[Arg::Str]], returns!(DataType::Binary), unhex),
];

/// The charsets Flink's `ENCODE` / `DECODE` take (Java's standard charsets).
#[derive(Clone, Copy)]
enum Charset {
    UsAscii,
    Iso8859_1,
    Utf8,
    Utf16Be,
    Utf16Le,
    /// UTF-16 with a byte order mark (big-endian when written).
    Utf16,
}

fn charset(name: &str) -> Result<Charset> {
    Ok(match name.to_ascii_uppercase().as_str() {
        "US-ASCII" => Charset::UsAscii,
        "ISO-8859-1" => Charset::Iso8859_1,
        "UTF-8" => Charset::Utf8,
        "UTF-16BE" => Charset::Utf16Be,
        "UTF-16LE" => Charset::Utf16Le,
        "UTF-16" => Charset::Utf16,
        other => {
            return exec_err!(
                "unsupported charset '{other}' (ENCODE and DECODE take 'US-ASCII', \
                 'ISO-8859-1', 'UTF-8', 'UTF-16BE', 'UTF-16LE', 'UTF-16')"
            )
        }
    })
}

fn encode_one(s: &str, cs: Charset) -> Vec<u8> {
    match cs {
        // Java writes '?' for a character the charset cannot hold.
        Charset::UsAscii => s
            .chars()
            .map(|c| if c.is_ascii() { c as u8 } else { b'?' })
            .collect(),
        Charset::Iso8859_1 => s
            .chars()
            .map(|c| {
                if (c as u32) < 256 {
                    c as u32 as u8
                } else {
                    b'?'
                }
            })
            .collect(),
        Charset::Utf8 => s.as_bytes().to_vec(),
        Charset::Utf16Be => s.encode_utf16().flat_map(|u| u.to_be_bytes()).collect(),
        Charset::Utf16Le => s.encode_utf16().flat_map(|u| u.to_le_bytes()).collect(),
        // Java writes no byte order mark for an empty string.
        Charset::Utf16 if s.is_empty() => Vec::new(),
        Charset::Utf16 => [0xfe, 0xff]
            .into_iter()
            .chain(s.encode_utf16().flat_map(|u| u.to_be_bytes()))
            .collect(),
    }
}

fn decode_one(b: &[u8], cs: Charset) -> String {
    let utf16 = |b: &[u8], be: bool| {
        let units: Vec<u16> = b
            .chunks(2)
            .map(|c| match (c, be) {
                ([h, l], true) => u16::from_be_bytes([*h, *l]),
                ([l, h], false) => u16::from_le_bytes([*l, *h]),
                _ => 0xfffd,
            })
            .collect();
        String::from_utf16_lossy(&units)
    };
    match cs {
        // Java replaces what does not decode with U+FFFD.
        Charset::UsAscii => b
            .iter()
            .map(|&x| if x < 128 { x as char } else { '\u{fffd}' })
            .collect(),
        Charset::Iso8859_1 => b.iter().map(|&x| x as char).collect(),
        Charset::Utf8 => String::from_utf8_lossy(b).into_owned(),
        Charset::Utf16Be => utf16(b, true),
        Charset::Utf16Le => utf16(b, false),
        Charset::Utf16 => match b {
            [0xfe, 0xff, rest @ ..] => utf16(rest, true),
            [0xff, 0xfe, rest @ ..] => utf16(rest, false),
            _ => utf16(b, true),
        },
    }
}

fn strings(a: &ArrayRef) -> Result<ArrayRef> {
    Ok(cast(a, &DataType::Utf8)?)
}

/// `ENCODE(s, charset)`: the string's bytes in the charset; NULL if either is NULL.
fn encode(c: &Call) -> Result<ArrayRef> {
    let (s, cs) = (strings(&c.args[0])?, strings(&c.args[1])?);
    let (s, cs) = (s.as_string::<i32>(), cs.as_string::<i32>());
    let mut out = Vec::with_capacity(c.rows);
    for i in 0..c.rows {
        out.push(if s.is_null(i) || cs.is_null(i) {
            None
        } else {
            Some(encode_one(s.value(i), charset(cs.value(i))?))
        });
    }
    Ok(Arc::new(BinaryArray::from_iter(out)))
}

/// `DECODE(bytes, charset)`: the bytes read as text in the charset; NULL if either is NULL.
fn decode(c: &Call) -> Result<ArrayRef> {
    let b = cast(&c.args[0], &DataType::Binary)?;
    let cs = strings(&c.args[1])?;
    let (b, cs) = (b.as_binary::<i32>(), cs.as_string::<i32>());
    let mut out = Vec::with_capacity(c.rows);
    for i in 0..c.rows {
        out.push(if b.is_null(i) || cs.is_null(i) {
            None
        } else {
            Some(decode_one(b.value(i), charset(cs.value(i))?))
        });
    }
    Ok(Arc::new(StringArray::from(out)))
}

/// `UNHEX(s)`: the bytes of a hexadecimal text (an odd length reads as if a `0` led);
/// NULL for NULL or text that is not hexadecimal.
fn unhex(c: &Call) -> Result<ArrayRef> {
    let s = strings(&c.args[0])?;
    let s = s.as_string::<i32>();
    let digit = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let out: BinaryArray = (0..c.rows)
        .map(|i| {
            if s.is_null(i) {
                return None;
            }
            let text = s.value(i).as_bytes();
            let padded: Vec<u8> = if text.len() % 2 == 1 {
                std::iter::once(b'0').chain(text.iter().copied()).collect()
            } else {
                text.to_vec()
            };
            padded
                .chunks(2)
                .map(|p| Some(digit(p[0])? * 16 + digit(p[1])?))
                .collect::<Option<Vec<u8>>>()
        })
        .collect();
    Ok(Arc::new(out))
}
