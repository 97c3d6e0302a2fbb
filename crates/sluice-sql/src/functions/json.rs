//! Flink's JSON functions (Flink docs: System (Built-in) Functions > JSON Functions) in
//! their function-call forms, with Flink's defaults: `lax` paths, `NULL ON EMPTY`,
//! `NULL ON ERROR` (`FALSE ON ERROR` for `JSON_EXISTS`). Paths: `$`, `.key`, `['key']`,
//! `[index]`, optionally after `lax` / `strict`. Numbers keep their text (`1.50`), as Flink
//! (serde_json's `arbitrary_precision`).

use datafusion_common::arrow::array::ArrayRef;
use datafusion_common::arrow::datatypes::DataType;
use datafusion_common::Result;
use serde_json::Value;

use super::rows::{bool_rows, str_at, string_rows, strs};
use super::udf::{Arg, Call, Def};
use crate::returns;

use Arg::{Any, Str};

/// The functions of this module.
pub(crate) const FUNCTIONS: &[Def] = &[
    Def::new(
        "json_value",
        &[&[Str, Str]],
        returns!(DataType::Utf8),
        json_value,
    ),
    Def::new(
        "json_query",
        &[&[Str, Str]],
        returns!(DataType::Utf8),
        json_query,
    ),
    Def::new("json_exists", &[&[Str, Str]], exists_type, json_exists),
    Def::new(
        "json_quote",
        &[&[Str]],
        returns!(DataType::Utf8),
        json_quote,
    ),
    Def::new(
        "json_unquote",
        &[&[Str]],
        returns!(DataType::Utf8),
        json_unquote,
    ),
    Def::new(
        "json_string",
        &[&[Any]],
        returns!(DataType::Utf8),
        json_string,
    ),
    Def::new(
        "$is_json",
        &[&[Str, Str]],
        returns!(DataType::Boolean),
        is_json,
    ),
    Def::new(
        "$json_object",
        &[&[Str, Any], &[Str]],
        returns!(DataType::Utf8),
        json_object,
    )
    .variadic(),
    Def::new(
        "$json_array",
        &[&[Str, Any], &[Str]],
        returns!(DataType::Utf8),
        json_array,
    )
    .variadic(),
];

/// Row `i` of `a` as JSON text: JSON text already (`raw`, a nested JSON_OBJECT or
/// JSON_ARRAY), or a value encoded as Flink's JSON functions encode it (strings quoted,
/// numbers and booleans as they are, a DOUBLE as Jackson writes it: `1.0E+20`, temporal
/// values as their text). `None` for NULL.
pub(crate) fn json_of(a: &ArrayRef, i: usize, raw: bool) -> Result<Option<String>> {
    use datafusion_common::arrow::array::{Array, AsArray};
    use datafusion_common::ScalarValue as S;
    if a.data_type().is_nested() {
        // ARRAY as a JSON array, MAP and ROW as objects (keys as text), compact.
        if a.is_null(i) {
            return Ok(None);
        }
        let member = |m: &ArrayRef, j: usize| -> Result<String> {
            Ok(json_of(m, j, false)?.unwrap_or_else(|| "null".to_string()))
        };
        let key = |m: &ArrayRef, j: usize| -> Result<String> {
            let text = super::cast::flink_cast_to_string(m, j)?;
            Ok(Value::String(text).to_string())
        };
        return Ok(Some(match a.data_type() {
            DataType::List(_) => {
                let l = a.as_list::<i32>();
                let (o, v) = (l.value_offsets(), l.values());
                let items = (o[i] as usize..o[i + 1] as usize)
                    .map(|j| member(v, j))
                    .collect::<Result<Vec<_>>>()?;
                format!("[{}]", items.join(","))
            }
            DataType::Map(_, _) => {
                let m = a.as_map();
                let o = m.value_offsets();
                let items = (o[i] as usize..o[i + 1] as usize)
                    .map(|j| Ok(format!("{}:{}", key(m.keys(), j)?, member(m.values(), j)?)))
                    .collect::<Result<Vec<_>>>()?;
                format!("{{{}}}", items.join(","))
            }
            DataType::Struct(fields) => {
                let st = a.as_struct();
                let items = fields
                    .iter()
                    .zip(st.columns())
                    .map(|(f, c)| {
                        Ok(format!(
                            "{}:{}",
                            Value::String(f.name().clone()),
                            member(c, i)?
                        ))
                    })
                    .collect::<Result<Vec<_>>>()?;
                format!("{{{}}}", items.join(","))
            }
            other => return datafusion_common::exec_err!("no JSON form for {other}"),
        }));
    }
    let v = S::try_from_array(a, i)?;
    if v.is_null() {
        return Ok(None);
    }
    let quoted = |s: &str| Value::String(s.to_string()).to_string();
    Ok(Some(match v {
        S::Utf8(Some(s)) | S::LargeUtf8(Some(s)) | S::Utf8View(Some(s)) if raw => s,
        S::Utf8(Some(s)) | S::LargeUtf8(Some(s)) | S::Utf8View(Some(s)) => quoted(&s),
        S::Boolean(Some(b)) => b.to_string(),
        S::Float32(Some(x)) => java_json_double(x as f64),
        S::Float64(Some(x)) => java_json_double(x),
        S::Int8(_)
        | S::Int16(_)
        | S::Int32(_)
        | S::Int64(_)
        | S::UInt8(_)
        | S::UInt16(_)
        | S::UInt32(_)
        | S::UInt64(_)
        | S::Decimal128(..) => v.to_string(),
        S::TimestampSecond(..)
        | S::TimestampMillisecond(..)
        | S::TimestampMicrosecond(..)
        | S::TimestampNanosecond(..) => quoted(&iso_timestamp(&v)?),
        S::Date32(_)
        | S::Date64(_)
        | S::Time32Second(_)
        | S::Time32Millisecond(_)
        | S::Time64Microsecond(_)
        | S::Time64Nanosecond(_) => {
            return datafusion_common::exec_err!(
                "a {} value has no JSON form (Flink refuses DATE and TIME values in JSON \
                 functions; cast it to STRING)",
                sluice_common::types::flink_type_name(&v.data_type())
            )
        }
        other => quoted(&other.to_string()),
    }))
}

/// A timestamp as Flink's JSON functions write it (ISO-8601): a `TIMESTAMP` as
/// `2024-01-01T10:00:21.005`, a `TIMESTAMP_LTZ` as the instant `2024-01-01T10:00:00.1Z`
/// (UTC); the fraction without trailing zeros, none when zero.
fn iso_timestamp(v: &datafusion_common::ScalarValue) -> Result<String> {
    use datafusion_common::ScalarValue as S;
    let (nanos, ltz) = match v {
        S::TimestampSecond(Some(x), tz) => (i128::from(*x) * 1_000_000_000, tz.is_some()),
        S::TimestampMillisecond(Some(x), tz) => (i128::from(*x) * 1_000_000, tz.is_some()),
        S::TimestampMicrosecond(Some(x), tz) => (i128::from(*x) * 1_000, tz.is_some()),
        S::TimestampNanosecond(Some(x), tz) => (i128::from(*x), tz.is_some()),
        other => return datafusion_common::exec_err!("not a timestamp: {other}"),
    };
    let secs = nanos.div_euclid(1_000_000_000) as i64;
    let frac = nanos.rem_euclid(1_000_000_000) as u32;
    let Some(t) = chrono::DateTime::from_timestamp(secs, frac) else {
        return datafusion_common::exec_err!("timestamp out of range: {v}");
    };
    let mut text = t.naive_utc().format("%Y-%m-%dT%H:%M:%S").to_string();
    if frac > 0 {
        let digits = format!("{frac:09}");
        text.push('.');
        text.push_str(digits.trim_end_matches('0'));
    }
    if ltz {
        text.push('Z');
    }
    Ok(text)
}

/// `x IS [NOT] JSON [VALUE|SCALAR|ARRAY|OBJECT]` (the parser's `$is_json(x, 'KIND')`,
/// negated outside): whether the text is JSON of that kind; FALSE for NULL, as Flink.
fn is_json(c: &Call) -> Result<ArrayRef> {
    let (s, kind) = (strs(&c.args[0]), strs(&c.args[1]));
    Ok(bool_rows(c.rows, |i| {
        let Some(text) = str_at(s, i) else {
            return Some(false);
        };
        let Ok(v) = serde_json::from_str::<Value>(text) else {
            return Some(false);
        };
        Some(match str_at(kind, i).unwrap_or("VALUE") {
            "SCALAR" => !(v.is_array() || v.is_object()),
            "ARRAY" => v.is_array(),
            "OBJECT" => v.is_object(),
            _ => true,
        })
    }))
}

/// A DOUBLE as Flink's JSON functions write it (Jackson: `2.5`, `1.0E+20`).
fn java_json_double(x: f64) -> String {
    if !x.is_finite() {
        return Value::String(super::cast::java_double(x)).to_string();
    }
    let text = super::cast::java_double(x);
    match text.split_once('E') {
        Some((m, e)) if !e.starts_with('-') => format!("{m}E+{e}"),
        _ => text,
    }
}

/// The mode (`NULL` / `ABSENT` on NULL) and value kinds of a JSON constructor call.
fn constructor_mode(c: &Call) -> (bool, Vec<bool>) {
    let spec = super::rows::str_at(strs(&c.args[0]), 0)
        .unwrap_or("NULL:")
        .to_string();
    let (mode, kinds) = spec.split_once(':').unwrap_or(("NULL", ""));
    (mode == "ABSENT", kinds.chars().map(|k| k == 'j').collect())
}

/// `JSON_OBJECT(k VALUE v, ...)` (planned as `$json_object`): an object of the pairs, keys
/// sorted (as Flink writes them); a NULL value is `null` (NULL ON NULL, the default) or left
/// out (ABSENT ON NULL).
fn json_object(c: &Call) -> Result<ArrayRef> {
    let (absent, raw) = constructor_mode(c);
    let mut out = Vec::with_capacity(c.rows);
    for i in 0..c.rows {
        let mut members = std::collections::BTreeMap::new();
        for (pair, chunk) in c.args[1..].chunks(2).enumerate() {
            let Some(key) = str_at(strs(&chunk[0]), i).map(str::to_string) else {
                return datafusion_common::exec_err!("JSON_OBJECT: a key is NULL");
            };
            match json_of(&chunk[1], i, raw.get(pair).copied().unwrap_or(false))? {
                Some(v) => {
                    members.insert(key, v);
                }
                None if absent => {}
                None => {
                    members.insert(key, "null".to_string());
                }
            }
        }
        let body: Vec<String> = members
            .iter()
            .map(|(k, v)| format!("{}:{v}", Value::String(k.clone())))
            .collect();
        out.push(Some(format!("{{{}}}", body.join(","))));
    }
    Ok(string_rows(c.rows, |i| out[i].clone()))
}

/// `JSON_ARRAY(v, ...)` (planned as `$json_array`): an array of the values; a NULL value is
/// left out (ABSENT ON NULL, the default) or `null` (NULL ON NULL).
fn json_array(c: &Call) -> Result<ArrayRef> {
    let (absent, raw) = constructor_mode(c);
    let mut out = Vec::with_capacity(c.rows);
    for i in 0..c.rows {
        let mut items = Vec::new();
        for (k, a) in c.args[1..].iter().enumerate() {
            match json_of(a, i, raw.get(k).copied().unwrap_or(false))? {
                Some(v) => items.push(v),
                None if absent => {}
                None => items.push("null".to_string()),
            }
        }
        out.push(Some(format!("[{}]", items.join(","))));
    }
    Ok(string_rows(c.rows, |i| out[i].clone()))
}

#[derive(Debug, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

/// A path's steps; `None` for a path Sluice cannot read.
fn parse_path(path: &str) -> Option<(bool, Vec<Step>)> {
    let p = path.trim();
    let (strict, p) = if let Some(rest) = p.strip_prefix("strict") {
        (true, rest.trim_start())
    } else if let Some(rest) = p.strip_prefix("lax") {
        (false, rest.trim_start())
    } else {
        (false, p)
    };
    let mut rest = p.strip_prefix('$')?;
    let mut steps = Vec::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            if key.is_empty() || key == "*" {
                return None;
            }
            steps.push(Step::Key(key.to_string()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inside = r[..end].trim();
            if let Some(q) = inside
                .strip_prefix('\'')
                .and_then(|s| s.strip_suffix('\''))
                .or_else(|| inside.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
            {
                steps.push(Step::Key(q.to_string()));
            } else {
                steps.push(Step::Index(inside.parse().ok()?));
            }
            rest = &r[end + 1..];
        } else {
            return None;
        }
    }
    Some((strict, steps))
}

/// The value at `path` in the JSON text `json`: `Err` for text that is not JSON or a path
/// Sluice cannot read, `Ok(None)` when the path leads nowhere.
fn lookup(json: &str, path: &str) -> std::result::Result<Option<Value>, ()> {
    let (_strict, steps) = parse_path(path).ok_or(())?;
    let mut v: Value = serde_json::from_str(json).map_err(|_| ())?;
    for step in steps {
        v = match (step, v) {
            (Step::Key(k), Value::Object(mut m)) => match m.remove(&k) {
                Some(x) => x,
                None => return Ok(None),
            },
            (Step::Index(i), Value::Array(mut a)) if i < a.len() => a.swap_remove(i),
            _ => return Ok(None),
        };
    }
    Ok(Some(v))
}

/// `JSON_VALUE(json, path)`: the scalar at `path` as text; NULL for an object, an array,
/// JSON null, a missing path or text that is not JSON.
fn json_value(c: &Call) -> Result<ArrayRef> {
    let (j, p) = (strs(&c.args[0]), strs(&c.args[1]));
    Ok(string_rows(c.rows, |i| {
        match lookup(str_at(j, i)?, str_at(p, i)?).ok()?? {
            Value::String(s) => Some(s),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }))
}

/// `JSON_QUERY(json, path)`: the object or array at `path` as JSON text; NULL for a scalar,
/// a missing path or text that is not JSON.
fn json_query(c: &Call) -> Result<ArrayRef> {
    let (j, p) = (strs(&c.args[0]), strs(&c.args[1]));
    Ok(string_rows(c.rows, |i| {
        match lookup(str_at(j, i)?, str_at(p, i)?).ok()?? {
            v @ (Value::Object(_) | Value::Array(_)) => Some(v.to_string()),
            _ => None,
        }
    }))
}

/// `JSON_EXISTS` takes a constant path (Flink refuses a column).
fn exists_type(
    _: &[DataType],
    scalars: &[Option<&datafusion_common::ScalarValue>],
) -> Result<DataType> {
    match scalars.get(1) {
        Some(Some(_)) => Ok(DataType::Boolean),
        _ => datafusion_common::plan_err!("JSON_EXISTS: the path must be a constant string"),
    }
}

/// `JSON_EXISTS(json, path)`: whether `path` leads to a value other than JSON null; FALSE
/// for text that is not JSON.
fn json_exists(c: &Call) -> Result<ArrayRef> {
    let (j, p) = (strs(&c.args[0]), strs(&c.args[1]));
    Ok(bool_rows(c.rows, |i| {
        let found = lookup(str_at(j, i)?, str_at(p, i)?);
        Some(matches!(found, Ok(Some(v)) if !v.is_null()))
    }))
}

/// `JSON_QUOTE(s)`: `s` as a JSON string literal, escaped as Flink 2.3 does: `"`, `\`, `/`
/// and control characters, and every non-ASCII character as `\uXXXX` (UTF-16 units).
fn json_quote(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    Ok(string_rows(c.rows, |i| {
        let mut out = String::from("\"");
        for u in str_at(s, i)?.encode_utf16() {
            match u {
                0x22 => out.push_str("\\\""),
                0x5c => out.push_str("\\\\"),
                0x2f => out.push_str("\\/"),
                0x08 => out.push_str("\\b"),
                0x0c => out.push_str("\\f"),
                0x0a => out.push_str("\\n"),
                0x0d => out.push_str("\\r"),
                0x09 => out.push_str("\\t"),
                0x20..=0x7e => out.push(u as u8 as char),
                other => out.push_str(&format!("\\u{other:04x}")),
            }
        }
        out.push('"');
        Some(out)
    }))
}

/// `JSON_UNQUOTE(s)`: the text of the JSON string literal `s`; `s` itself when it is not one.
fn json_unquote(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    Ok(string_rows(c.rows, |i| {
        let s = str_at(s, i)?;
        match serde_json::from_str::<Value>(s) {
            Ok(Value::String(u)) => Some(u),
            _ => Some(s.to_string()),
        }
    }))
}

/// `JSON_STRING(x)`: `x` as JSON text (a string quoted, a number or boolean as is).
fn json_string(c: &Call) -> Result<ArrayRef> {
    let a = &c.args[0];
    let out = (0..c.rows)
        .map(|i| json_of(a, i, false))
        .collect::<Result<Vec<_>>>()?;
    Ok(string_rows(c.rows, |i| out[i].clone()))
}
