//! Flink's remaining scalar functions: value access (`ELT`), character classes
//! (`IS_ALPHA`, `IS_DIGIT`, `IS_DECIMAL`), URLs (`PARSE_URL`, `URL_ENCODE`, `URL_DECODE`),
//! IPv4 (`INET_ATON`, `INET_NTOA`), `TRANSLATE`, `HASH_CODE`, `TYPEOF`, `RAND`,
//! `RAND_INTEGER` and `CURRENT_DATABASE`.

use datafusion_common::arrow::array::ArrayRef;
use datafusion_common::arrow::datatypes::DataType;
use datafusion_common::Result;

use super::rows::{
    bool_rows, float_rows, int32_rows, int64_rows, int_at, ints, str_at, string_rows, strs,
};
use super::udf::{Arg, Call, Def};
use crate::returns;

use Arg::{Any, Int, Str};

/// The functions of this module.
pub(crate) const FUNCTIONS: &[Def] = &[
    Def::new("elt", &[&[Int, Str]], returns!(DataType::Utf8), elt).variadic(),
    Def::new("is_alpha", &[&[Str]], returns!(DataType::Boolean), is_alpha),
    Def::new("is_digit", &[&[Str]], returns!(DataType::Boolean), is_digit),
    Def::new(
        "is_decimal",
        &[&[Str]],
        returns!(DataType::Boolean),
        is_decimal,
    ),
    Def::new(
        "translate",
        &[&[Str, Str, Str]],
        returns!(DataType::Utf8),
        translate,
    ),
    Def::new(
        "url_encode",
        &[&[Str]],
        returns!(DataType::Utf8),
        url_encode,
    ),
    Def::new(
        "url_decode",
        &[&[Str]],
        returns!(DataType::Utf8),
        url_decode,
    ),
    Def::new(
        "parse_url",
        &[&[Str, Str], &[Str, Str, Str]],
        returns!(DataType::Utf8),
        parse_url,
    ),
    Def::new("inet_aton", &[&[Str]], returns!(DataType::Int64), inet_aton),
    Def::new("inet_ntoa", &[&[Int]], returns!(DataType::Utf8), inet_ntoa),
    Def::new("hash_code", &[&[Str]], returns!(DataType::Int32), hash_code),
    Def::new("typeof", &[&[Any]], returns!(DataType::Utf8), type_of),
    Def::new("rand", &[&[]], returns!(DataType::Float64), rand).volatile(),
    Def::new(
        "rand_integer",
        &[&[Int]],
        returns!(DataType::Int32),
        rand_integer,
    )
    .volatile(),
    Def::new(
        "current_database",
        &[&[]],
        returns!(DataType::Utf8),
        current_database,
    ),
];

/// `ELT(n, s1, s2, ...)`: the `n`-th string (from 1); NULL when there is none.
fn elt(c: &Call) -> Result<ArrayRef> {
    let n = ints(&c.args[0]);
    let strings: Vec<_> = c.args[1..].iter().map(strs).collect();
    Ok(string_rows(c.rows, |i| {
        let n = int_at(n, i)?;
        let s = strings.get(usize::try_from(n).ok()?.checked_sub(1)?)?;
        str_at(s, i).map(str::to_string)
    }))
}

fn class(c: &Call, f: fn(&str) -> bool) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    Ok(bool_rows(c.rows, |i| Some(str_at(s, i).is_some_and(f))))
}

/// `IS_ALPHA(s)`: every character a letter (and at least one); FALSE for NULL.
fn is_alpha(c: &Call) -> Result<ArrayRef> {
    class(c, |s| !s.is_empty() && s.chars().all(char::is_alphabetic))
}

/// `IS_DIGIT(s)`: every character a digit (and at least one); FALSE for NULL.
fn is_digit(c: &Call) -> Result<ArrayRef> {
    class(c, |s| {
        !s.is_empty() && s.chars().all(|c| c.is_ascii_digit())
    })
}

/// `IS_DECIMAL(s)`: `s` is a decimal number; FALSE for NULL.
fn is_decimal(c: &Call) -> Result<ArrayRef> {
    class(c, |s| {
        let t = s.strip_prefix(['+', '-']).unwrap_or(s);
        let (a, b) = t.split_once('.').unwrap_or((t, ""));
        !(a.is_empty() && b.is_empty())
            && a.bytes().all(|c| c.is_ascii_digit())
            && b.bytes().all(|c| c.is_ascii_digit())
    })
}

/// `TRANSLATE(s, from, to)`: each character of `from` in `s` replaced by the character at
/// the same place in `to`, or removed when `to` is shorter; a NULL `from` or `to` counts as
/// empty (Flink 2.3).
fn translate(c: &Call) -> Result<ArrayRef> {
    let (s, from, to) = (strs(&c.args[0]), strs(&c.args[1]), strs(&c.args[2]));
    Ok(string_rows(c.rows, |i| {
        // Flink: a NULL `from` changes nothing, a NULL `to` deletes.
        let from: Vec<char> = str_at(from, i).unwrap_or("").chars().collect();
        let to: Vec<char> = str_at(to, i).unwrap_or("").chars().collect();
        Some(
            str_at(s, i)?
                .chars()
                .filter_map(|ch| match from.iter().position(|f| *f == ch) {
                    Some(p) => to.get(p).copied(),
                    None => Some(ch),
                })
                .collect(),
        )
    }))
}

/// `URL_ENCODE(s)`: `application/x-www-form-urlencoded` (Java's `URLEncoder`, UTF-8).
fn url_encode(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    Ok(string_rows(c.rows, |i| {
        Some(form_urlencoded::byte_serialize(str_at(s, i)?.as_bytes()).collect())
    }))
}

/// `URL_DECODE(s)`: the inverse of `URL_ENCODE`; NULL for text that does not decode.
fn url_decode(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    Ok(string_rows(c.rows, |i| {
        let text = str_at(s, i)?;
        // A '%' not followed by two hex digits is an error in Java.
        let b = text.as_bytes();
        for (k, ch) in b.iter().enumerate() {
            if *ch == b'%'
                && !(k + 2 < b.len() + 0
                    && b.get(k + 1).is_some_and(u8::is_ascii_hexdigit)
                    && b.get(k + 2).is_some_and(u8::is_ascii_hexdigit))
            {
                return None;
            }
        }
        let pairs = form_urlencoded::parse(format!("x={text}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned());
        pairs
    }))
}

/// The parts of a URL as Java's `java.net.URL` names them.
struct Url<'a> {
    protocol: &'a str,
    authority: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    reference: Option<&'a str>,
}

fn split_url(u: &str) -> Option<Url<'_>> {
    let (protocol, rest) = u.split_once("://")?;
    let (before_ref, reference) = match rest.split_once('#') {
        Some((a, r)) => (a, Some(r)),
        None => (rest, None),
    };
    let (before_query, query) = match before_ref.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (before_ref, None),
    };
    let slash = before_query.find('/').unwrap_or(before_query.len());
    Some(Url {
        protocol,
        authority: &before_query[..slash],
        path: &before_query[slash..],
        query,
        reference,
    })
}

/// `PARSE_URL(url, part [, key])`: `HOST`, `PATH`, `QUERY` (or the value of `key` in it),
/// `REF`, `PROTOCOL`, `FILE`, `AUTHORITY` or `USERINFO` of `url`; NULL when absent.
fn parse_url(c: &Call) -> Result<ArrayRef> {
    let (u, part) = (strs(&c.args[0]), strs(&c.args[1]));
    let key = c.args.get(2).map(strs);
    Ok(string_rows(c.rows, |i| {
        let url = split_url(str_at(u, i)?)?;
        let userinfo = url.authority.rsplit_once('@').map(|(u, _)| u);
        let host_port = url
            .authority
            .rsplit_once('@')
            .map_or(url.authority, |(_, h)| h);
        let host = host_port.rsplit_once(':').map_or(host_port, |(h, _)| h);
        let part = str_at(part, i)?;
        let value = match part {
            "HOST" => Some(host.to_string()),
            "PATH" => Some(url.path.to_string()),
            "QUERY" => match key {
                None => url.query.map(str::to_string),
                Some(k) => {
                    let k = str_at(k, i)?;
                    url.query?.split('&').find_map(|kv| {
                        let (name, v) = kv.split_once('=')?;
                        (name == k).then(|| v.to_string())
                    })
                }
            },
            "REF" => url.reference.map(str::to_string),
            "PROTOCOL" => Some(url.protocol.to_string()),
            "FILE" => Some(match url.query {
                Some(q) => format!("{}?{q}", url.path),
                None => url.path.to_string(),
            }),
            "AUTHORITY" => Some(url.authority.to_string()),
            "USERINFO" => userinfo.map(str::to_string),
            _ => None,
        };
        value.filter(|v| !(part == "HOST" && v.is_empty()))
    }))
}

/// `INET_ATON(s)`: an IPv4 address as a number, in the classic forms `a.b.c.d`, `a.b.c`
/// (c 16 bits), `a.b` (b 24 bits) and `a` (32 bits); NULL for anything else.
fn inet_aton(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    Ok(int64_rows(c.rows, |i| {
        let parts: Vec<&str> = str_at(s, i)?.split('.').collect();
        if parts.len() > 4 {
            return None;
        }
        let mut values = Vec::with_capacity(parts.len());
        for p in &parts {
            if p.is_empty() || p.len() > 10 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            values.push(p.parse::<i64>().ok()?);
        }
        let (last, leading) = values.split_last()?;
        if leading.iter().any(|v| *v > 255) {
            return None;
        }
        let last_bits = 8 * (4 - leading.len() as u32);
        if *last >= 1i64 << last_bits {
            return None;
        }
        let mut n: i64 = 0;
        for v in leading {
            n = n * 256 + v;
        }
        Some((n << last_bits) | last)
    }))
}

/// `INET_NTOA(n)`: the number `n` (0 to 2^32 - 1) as an IPv4 address; NULL outside.
fn inet_ntoa(c: &Call) -> Result<ArrayRef> {
    let n = ints(&c.args[0]);
    Ok(string_rows(c.rows, |i| {
        let n = u32::try_from(int_at(n, i)?).ok()?;
        Some(std::net::Ipv4Addr::from(n).to_string())
    }))
}

/// `HASH_CODE(s)`: the absolute value of Java's `String.hashCode` (UTF-16 code units, 31
/// as multiplier), as Flink 2.3 gives it.
fn hash_code(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    Ok(int32_rows(c.rows, |i| {
        let h = str_at(s, i)?
            .encode_utf16()
            .fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(u as i32));
        Some(h.wrapping_abs())
    }))
}

/// `TYPEOF(x)`: the Flink type of `x`.
fn type_of(c: &Call) -> Result<ArrayRef> {
    let name = sluice_common::types::flink_type_name(c.args[0].data_type());
    Ok(string_rows(c.rows, |_| Some(name.clone())))
}

/// `RAND()`: a pseudorandom DOUBLE in [0, 1) per row.
fn rand(c: &Call) -> Result<ArrayRef> {
    Ok(float_rows(c.rows, |_| Some(random_unit())))
}

/// `RAND_INTEGER(n)`: a pseudorandom INT in [0, n) per row.
fn rand_integer(c: &Call) -> Result<ArrayRef> {
    let n = ints(&c.args[0]);
    Ok(int32_rows(c.rows, |i| {
        let n = int_at(n, i)?;
        Some((random_unit() * n as f64).floor() as i32)
    }))
}

fn random_unit() -> f64 {
    let bits = uuid::Uuid::new_v4().as_u128() >> 75;
    bits as f64 / (1u64 << 53) as f64
}

/// `CURRENT_DATABASE()`: Sluice's one database, `default_database` (Flink's default).
fn current_database(c: &Call) -> Result<ArrayRef> {
    Ok(string_rows(c.rows, |_| {
        Some("default_database".to_string())
    }))
}
