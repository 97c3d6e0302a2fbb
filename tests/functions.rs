//! The conformance table of Flink's built-in functions (issue 17): `tests/functions/*.txt`.
//!
//! Each file is a list of blocks. A block declares an input table and its rows, then
//! expressions over it, each followed by the result Apache Flink 2.3 gives on those rows
//! (written by `tests/functions/derive_flink.py`, never by hand and never from Sluice):
//!
//! ```text
//! # comment
//! table a STRING, b INT
//! row {"a": "alice", "b": 0}
//! row {"a": null, "b": 1}
//! expr SUBSTRING(a, b, 2)
//! = STRING ["al", null]
//! expr SUBSTRING(a, -9, 1)
//! = ERROR <Flink's message>
//! ```
//!
//! A result line is Flink's result type (`CHAR(n)`/`VARCHAR(n)` read as `STRING`, `NOT
//! NULL` ignored) and the values, one per row as JSON: strings, numbers (compared to
//! 12 significant digits), booleans, `null`; timestamps, dates, times and decimals as text
//! in Flink's `CAST(... AS STRING)` form. `= ERROR` means Flink fails on these rows, and
//! Sluice must fail too (an error, never a value). Where Flink's value is a Flink bug (an
//! hour of -3 before 1970), a `! reason` line and a `~ TYPE [values]` line derived by
//! hand say what Sluice gives instead; the test checks that line. Rows are read as JSON lines through the
//! filesystem connector by both engines, in the session time zone UTC unless a `zone NAME`
//! line after `table` names another.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sluice::arrow::array::{Array, RecordBatch};
use sluice::arrow::datatypes::DataType;
use sluice::{Engine, EngineConfig};

struct Block {
    file: String,
    /// The session time zone (`zone` line; UTC by default).
    zone: Option<String>,
    columns: String,
    rows: Vec<String>,
    exprs: Vec<(usize, String, Option<String>)>,
}

fn parse(path: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(path).unwrap();
    let file = path.file_name().unwrap().to_string_lossy().to_string();
    let mut blocks: Vec<Block> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "zone" => blocks.last_mut().unwrap().zone = Some(rest.to_string()),
            "table" => blocks.push(Block {
                file: file.clone(),
                zone: None,
                columns: rest.to_string(),
                rows: vec![],
                exprs: vec![],
            }),
            "row" => blocks.last_mut().unwrap().rows.push(rest.to_string()),
            "expr" => blocks
                .last_mut()
                .unwrap()
                .exprs
                .push((n + 1, rest.to_string(), None)),
            "=" => {
                let e = blocks.last_mut().unwrap().exprs.last_mut().unwrap();
                if e.2.is_none() {
                    e.2 = Some(rest.to_string());
                }
            }
            // A deliberate difference: the reason, then Sluice's own expected result.
            "!" => {}
            "~" => {
                let e = blocks.last_mut().unwrap().exprs.last_mut().unwrap();
                e.2 = Some(rest.to_string());
            }
            other => panic!("{file}:{}: unknown line kind '{other}'", n + 1),
        }
    }
    blocks
}

/// Sluice's result type in Flink's spelling, for comparison with Flink's.
fn flink_type(dt: &DataType) -> String {
    sluice_common::types::flink_type_name(dt)
}

/// Flink's type text, normalized: `VARCHAR(n)`/`CHAR(n)` → `STRING` and `NOT NULL` dropped,
/// at any depth (`ARRAY<CHAR(1) NOT NULL> NOT NULL` is `ARRAY<STRING>`).
fn normalize_type(t: &str) -> String {
    let mut t = t.trim().replace(" NOT NULL", "");
    for prefix in ["VARCHAR(", "CHAR("] {
        while let Some(at) = t.find(prefix) {
            let close = at + t[at..].find(')').expect("closing parenthesis");
            t.replace_range(at..=close, "STRING");
        }
    }
    t
}

/// A value as the table writes it.
fn json_value(a: &dyn Array, i: usize) -> serde_json::Value {
    use serde_json::Value;
    use sluice::arrow::array::AsArray;
    use sluice::arrow::datatypes::*;
    if a.is_null(i) {
        return Value::Null;
    }
    let text = |s: String| Value::String(s);
    match a.data_type() {
        DataType::Utf8 => text(a.as_string::<i32>().value(i).to_string()),
        DataType::LargeUtf8 => text(a.as_string::<i64>().value(i).to_string()),
        DataType::Utf8View => text(a.as_string_view().value(i).to_string()),
        DataType::Boolean => Value::Bool(a.as_boolean().value(i)),
        DataType::Int8 => a.as_primitive::<Int8Type>().value(i).into(),
        DataType::Int16 => a.as_primitive::<Int16Type>().value(i).into(),
        DataType::Int32 => a.as_primitive::<Int32Type>().value(i).into(),
        DataType::Int64 => a.as_primitive::<Int64Type>().value(i).into(),
        DataType::Float32 => float(a.as_primitive::<Float32Type>().value(i) as f64),
        DataType::Float64 => float(a.as_primitive::<Float64Type>().value(i)),
        DataType::Decimal128(_, s) => {
            let v = a.as_primitive::<Decimal128Type>().value(i);
            text(Decimal128Type::format_decimal(v, 38, *s))
        }
        DataType::Date32 => {
            let d = a.as_primitive::<Date32Type>().value(i);
            let date = chrono::NaiveDate::from_num_days_from_ce_opt(d + 719_163).unwrap();
            text(date.format("%Y-%m-%d").to_string())
        }
        DataType::Timestamp(unit, _) => {
            let (micros, digits) = match unit {
                TimeUnit::Second => (
                    a.as_primitive::<TimestampSecondType>().value(i) * 1_000_000,
                    0,
                ),
                TimeUnit::Millisecond => (
                    a.as_primitive::<TimestampMillisecondType>().value(i) * 1000,
                    3,
                ),
                TimeUnit::Microsecond => (a.as_primitive::<TimestampMicrosecondType>().value(i), 6),
                TimeUnit::Nanosecond => (
                    a.as_primitive::<TimestampNanosecondType>().value(i) / 1000,
                    6,
                ),
            };
            let t = chrono::DateTime::from_timestamp_micros(micros)
                .unwrap()
                .naive_utc();
            let mut s = t.format("%Y-%m-%d %H:%M:%S").to_string();
            if digits > 0 {
                let frac = format!("{:06}", t.and_utc().timestamp_subsec_micros());
                write!(s, ".{}", &frac[..digits]).unwrap();
            }
            text(s)
        }
        // Nested values as Flink's JSON_STRING writes them (derive_flink.py): arrays as
        // arrays, maps and rows as objects.
        DataType::List(_) => {
            let l = a.as_list::<i32>();
            let v = l.value(i);
            Value::Array((0..v.len()).map(|j| json_value(v.as_ref(), j)).collect())
        }
        DataType::Map(_, _) => {
            let m = a.as_map();
            let o = m.value_offsets();
            let mut obj = serde_json::Map::new();
            for e in o[i] as usize..o[i + 1] as usize {
                let key = match json_value(m.keys().as_ref(), e) {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                obj.insert(key, json_value(m.values().as_ref(), e));
            }
            Value::Object(obj)
        }
        DataType::Struct(fields) => {
            let st = a.as_struct();
            let mut obj = serde_json::Map::new();
            for (f, c) in fields.iter().zip(st.columns()) {
                obj.insert(f.name().clone(), json_value(c.as_ref(), i));
            }
            Value::Object(obj)
        }
        // BYTES as derive_flink.py writes them: x'<hex>'.
        DataType::Binary => {
            let hex: String = a
                .as_binary::<i32>()
                .value(i)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            text(format!("x'{hex}'"))
        }
        // A BITMAP as its CAST(... AS STRING) text (derive_flink.py's fallback).
        DataType::LargeBinary => {
            let utc = "UTC".parse().unwrap();
            let one = a.slice(i, 1);
            let texts = sluice_sql::functions::nested_texts(&one, &utc).unwrap();
            text(texts[0].clone().unwrap())
        }
        other => text(format!("<unsupported type {other}>")),
    }
}

fn float(v: f64) -> serde_json::Value {
    if v.is_finite() {
        serde_json::Value::from(v)
    } else {
        let java = if v.is_nan() {
            "NaN"
        } else if v > 0.0 {
            "Infinity"
        } else {
            "-Infinity"
        };
        serde_json::Value::String(java.to_string())
    }
}

fn same(expected: &serde_json::Value, actual: &serde_json::Value) -> bool {
    use serde_json::Value;
    let number = |v: &Value| match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse::<f64>().ok(),
        _ => None,
    };
    match (expected, actual) {
        (Value::Number(_), _) | (_, Value::Number(_)) => match (number(expected), number(actual)) {
            (Some(e), Some(a)) => e == a || (e - a).abs() <= 1e-12 * e.abs().max(a.abs()),
            _ => false,
        },
        (Value::Array(e), Value::Array(a)) => {
            e.len() == a.len() && e.iter().zip(a).all(|(e, a)| same(e, a))
        }
        // Maps and rows: the same keys, whatever the order (Flink's maps are hash maps).
        (Value::Object(e), Value::Object(a)) => {
            e.len() == a.len() && e.iter().all(|(k, v)| a.get(k).is_some_and(|w| same(v, w)))
        }
        _ => expected == actual,
    }
}

fn run_block(block: &Block, dir: &Path, index: usize, failures: &mut Vec<String>) -> usize {
    let data = dir.join(format!("{}-{index}.json", block.file));
    std::fs::write(&data, block.rows.join("\n") + "\n").unwrap();
    let mut engine = Engine::new(EngineConfig::default());
    engine
        .set(
            "table.local-time-zone",
            block.zone.as_deref().unwrap_or("UTC"),
        )
        .unwrap();
    engine.set("parallelism.default", "1").unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE t ({}) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json')",
            block.columns,
            data.display()
        ))
        .unwrap_or_else(|e| panic!("{}: table {}: {e}", block.file, block.columns));
    let mut checked = 0;
    for (line, expr, expected) in &block.exprs {
        let at = format!("{}:{line}: {expr}", block.file);
        let Some(expected) = expected else {
            failures.push(format!("{at}: no Flink result (run derive_flink.py)"));
            continue;
        };
        checked += 1;
        let result = engine.collect(&format!("SELECT {expr} AS v FROM t"));
        if let Some(message) = expected.strip_prefix("ERROR") {
            if let Ok(batches) = result {
                failures.push(format!(
                    "{at}: Flink fails ({}), Sluice gives {:?}",
                    message.trim(),
                    values(&batches)
                ));
            }
            continue;
        }
        let (ty, json) = expected.split_at(expected.find('[').expect("values"));
        let want: Vec<serde_json::Value> = serde_json::from_str(json).unwrap();
        let batches = match result {
            // An aggregate's result is a changelog: its final table counts.
            Ok(b)
                if b.first()
                    .is_some_and(|b| b.schema().field(0).name() == "op") =>
            {
                sluice::format::fold_changelog(&b)
                    .unwrap()
                    .into_iter()
                    .collect()
            }
            Ok(b) => b,
            Err(e) => {
                failures.push(format!("{at}: Sluice fails: {e}"));
                continue;
            }
        };
        let got = values(&batches);
        let got_type = batches
            .first()
            .map(|b| flink_type(b.schema().field(0).data_type()))
            .unwrap_or_default();
        if normalize_type(ty) != normalize_type(&got_type) {
            failures.push(format!("{at}: type {got_type}, Flink {}", ty.trim()));
        }
        if want.len() != got.len() || want.iter().zip(&got).any(|(w, g)| !same(w, g)) {
            failures.push(format!(
                "{at}: {}, Flink {}",
                serde_json::Value::Array(got),
                serde_json::Value::Array(want)
            ));
        }
    }
    checked
}

fn values(batches: &[RecordBatch]) -> Vec<serde_json::Value> {
    batches
        .iter()
        .flat_map(|b| {
            let col = b.column(0).clone();
            (0..b.num_rows()).map(move |i| json_value(col.as_ref(), i))
        })
        .collect()
}

#[test]
fn functions_give_flinks_values() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/functions");
    let dir = std::env::temp_dir().join(format!("sluice-functions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    let only = std::env::var("SLUICE_FUNCTIONS_ONLY").ok();
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in files {
        if only
            .as_deref()
            .is_some_and(|o| !file.to_string_lossy().contains(o))
        {
            continue;
        }
        for (i, block) in parse(&file).iter().enumerate() {
            checked += run_block(block, &dir, i, &mut failures);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(checked > 0, "no expressions checked");
    assert!(
        failures.is_empty(),
        "{} of {checked} expressions differ from Flink:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Whether `name` (a function or an operator of Flink's list) is written in `text` as a
/// word, case-insensitively.
fn mentions(text: &str, name: &str) -> bool {
    let name = name.split(" (").next().unwrap_or(name).to_ascii_uppercase();
    let text = text.to_ascii_uppercase();
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let mut from = 0;
    while let Some(p) = text[from..].find(&name) {
        let start = from + p;
        let end = start + name.len();
        let alnum = name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ' ');
        if !alnum || (!word(text[..start].chars().last()) && !word(text[end..].chars().next())) {
            return true;
        }
        from = end;
    }
    false
}

/// Every function and operator of Flink 2.3's list is either checked by the conformance
/// table or refused with "Not yet supported: NAME (reason)"; every function Sluice has is
/// checked.
#[test]
fn every_flink_function_is_checked_or_refused() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/functions");
    let mut exprs = String::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "txt") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                if let Some(e) = line.strip_prefix("expr ") {
                    exprs.push_str(e);
                    exprs.push('\n');
                }
            }
        }
    }
    let list = std::fs::read_to_string(root.join("flink-2.3-functions.list")).unwrap();
    let flink: Vec<&str> = list
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    let not_supported = sluice_sql::functions::NOT_SUPPORTED;
    let mut engine = Engine::new(EngineConfig::default());
    engine
        .sql("CREATE TABLE t (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '1')")
        .unwrap();
    let mut problems = Vec::new();
    let mut refused = 0;
    // Checked by other tests: (name, where).
    const ELSEWHERE: &[(&str, &str)] = &[
        ("EXISTS", "tests/slt/joins/subqueries.slt"),
        ("ROW_NUMBER", "tests/slt/ordered/top_n.slt"),
        ("RANK", "tests/slt/ordered/top_n.slt"),
        ("DENSE_RANK", "tests/slt/ordered/top_n.slt"),
        ("LAG", "tests/slt/ordered/over.slt"),
        ("PROCTIME", "tests/slt/ordered/processing_time.slt"),
        ("GROUPING", "tests/slt/aggregates/grouping_sets.slt"),
        ("GROUPING_ID", "tests/slt/aggregates/grouping_sets.slt"),
        ("TUMBLE_START", "tests/slt/windows/legacy_group_windows.slt"),
        ("TUMBLE_END", "tests/slt/windows/legacy_group_windows.slt"),
        (
            "TUMBLE_ROWTIME",
            "tests/slt/windows/legacy_group_windows.slt",
        ),
        ("TUMBLE_PROCTIME", "tests/slt/windows/processing_time.slt"),
        ("HOP_START", "tests/slt/windows/legacy_group_windows.slt"),
        ("HOP_END", "tests/slt/windows/legacy_group_windows.slt"),
        ("HOP_ROWTIME", "tests/slt/windows/legacy_group_windows.slt"),
        ("HOP_PROCTIME", "tests/slt/windows/processing_time.slt"),
        (
            "SESSION_START",
            "tests/slt/windows/legacy_group_windows.slt",
        ),
        ("SESSION_END", "tests/slt/windows/legacy_group_windows.slt"),
        (
            "SESSION_ROWTIME",
            "tests/slt/windows/legacy_group_windows.slt",
        ),
        ("SESSION_PROCTIME", "tests/slt/windows/processing_time.slt"),
        // Written `a[1]`, `m['x']`: the table's expressions never spell `[]` itself.
        ("[] (subscript)", "tests/functions/collection.txt"),
    ];
    for name in &flink {
        let lower = name.to_ascii_lowercase();
        if ELSEWHERE.iter().any(|(n, _)| n == name) {
            continue;
        }
        if not_supported.iter().any(|(n, _)| *n == lower) {
            refused += 1;
            if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let err = engine
                .collect(&format!("SELECT {name}(a) FROM t"))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            if !err.contains(&format!("Not yet supported: {name} (")) {
                problems.push(format!(
                    "{name}: listed as not supported, but calling it gives: {err:?}"
                ));
            }
        } else if !mentions(&exprs, name) {
            problems.push(format!(
                "{name}: neither in the conformance table nor listed as not supported"
            ));
        }
    }
    let shown = match engine.sql("SHOW FUNCTIONS").unwrap() {
        sluice::StatementResult::Info(batch) => values(&[batch]),
        _ => panic!("SHOW FUNCTIONS shows a table"),
    };
    for f in &shown {
        let f = f.as_str().unwrap();
        if !mentions(&exprs, f) && !ELSEWHERE.iter().any(|(n, _)| *n == f) {
            problems.push(format!(
                "{f}: Sluice has it, but the conformance table never calls it"
            ));
        }
    }
    eprintln!(
        "{} of Flink's {} functions and operators refused as not supported ({:.0} %)",
        refused,
        flink.len(),
        100.0 * refused as f64 / flink.len() as f64
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
