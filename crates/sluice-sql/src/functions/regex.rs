//! Flink's regular-expression functions. Flink uses `java.util.regex`; Sluice uses
//! `fancy-regex` (backreferences and look-around as Java has them). As Flink, a pattern
//! that does not compile gives NULL (FALSE for `REGEXP`), not an error.

use std::sync::Arc;

use datafusion_common::arrow::array::{ArrayRef, StringArray};
use datafusion_common::arrow::datatypes::DataType;
use datafusion_common::Result;
use fancy_regex::Regex;

use super::rows::{bool_rows, int32_rows, int_at, ints, str_at, string_rows, strs};
use super::udf::{Arg, Call, Def};
use crate::returns;

use Arg::{Int, Str};

/// The functions of this module.
pub(crate) const FUNCTIONS: &[Def] = &[
    Def::new(
        "regexp",
        &[&[Str, Str]],
        returns!(DataType::Boolean),
        regexp,
    ),
    Def::new(
        "regexp_replace",
        &[&[Str, Str, Str]],
        returns!(DataType::Utf8),
        regexp_replace,
    ),
    Def::new(
        "regexp_extract",
        &[&[Str, Str], &[Str, Str, Int]],
        returns!(DataType::Utf8),
        regexp_extract,
    ),
    Def::new(
        "regexp_extract_all",
        &[&[Str, Str], &[Str, Str, Int]],
        returns!(sluice_common::types::array_type(DataType::Utf8, true)),
        regexp_extract_all,
    ),
    Def::new(
        "regexp_count",
        &[&[Str, Str]],
        returns!(DataType::Int32),
        regexp_count,
    ),
    Def::new(
        "regexp_instr",
        &[&[Str, Str]],
        returns!(DataType::Int32),
        regexp_instr,
    ),
    Def::new(
        "regexp_substr",
        &[&[Str, Str]],
        returns!(DataType::Utf8),
        regexp_substr,
    ),
];

/// `pattern` with Java's ASCII-only meaning of `\w`, `\d`, `\s` (and, outside brackets,
/// `\W`, `\D`, `\S`): in Java `\w` does not match `é`; in Rust's regex it does.
fn java_classes(pattern: &str) -> String {
    const WORD: &str = "0-9A-Za-z_";
    const DIGIT: &str = "0-9";
    const SPACE: &str = " \\t\\n\\x0B\\f\\r";
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    let mut depth = 0usize;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e) => {
                    let class = match e {
                        'w' | 'W' => Some(WORD),
                        'd' | 'D' => Some(DIGIT),
                        's' | 'S' => Some(SPACE),
                        _ => None,
                    };
                    match (class, depth, e.is_ascii_uppercase()) {
                        (Some(set), 0, false) => out.push_str(&format!("[{set}]")),
                        (Some(set), 0, true) => out.push_str(&format!("[^{set}]")),
                        (Some(set), _, false) => out.push_str(set),
                        _ => {
                            out.push('\\');
                            out.push(e);
                        }
                    }
                }
                None => out.push('\\'),
            },
            '[' => {
                depth += 1;
                out.push(c);
                // A ']' right after '[' or '[^' is a literal.
                if chars.clone().next() == Some('^') {
                    out.push('^');
                    chars.next();
                }
                if chars.clone().next() == Some(']') {
                    out.push_str("\\]");
                    chars.next();
                }
            }
            ']' if depth > 0 => {
                depth -= 1;
                out.push(c);
            }
            other => out.push(other),
        }
    }
    out
}

/// `(s, pattern [, group])` of the extract functions: per row the pattern and the group
/// (`default` when the call names none); `None` for a NULL or invalid pattern, a NULL
/// group, or a group the pattern does not have.
fn groups(c: &Call, default: i64) -> Vec<Option<(Arc<Regex>, usize)>> {
    let r = regexes(strs(&c.args[1]), c.rows);
    let group = c.args.get(2).map(ints);
    (0..c.rows)
        .map(|i| {
            let g = match group {
                Some(g) => int_at(g, i)?,
                None => default,
            };
            let re = r[i].as_ref()?;
            (g >= 0 && (g as usize) < re.captures_len()).then(|| (Arc::clone(re), g as usize))
        })
        .collect()
}

/// The compiled pattern of each row (`None`: NULL or not a valid pattern), compiled once
/// per distinct pattern text and shared by its rows.
fn regexes(a: &StringArray, rows: usize) -> Vec<Option<Arc<Regex>>> {
    let mut cache: Vec<(String, Option<Arc<Regex>>)> = Vec::new();
    (0..rows)
        .map(|i| {
            let p = str_at(a, i)?;
            if let Some((_, r)) = cache.iter().find(|(t, _)| t == p) {
                return r.clone();
            }
            let r = Regex::new(&java_classes(p)).ok().map(Arc::new);
            cache.push((p.to_string(), r.clone()));
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::java_classes;

    #[test]
    fn classes_are_ascii_as_in_java() {
        assert_eq!(java_classes(r"(\w+) \d"), r"([0-9A-Za-z_]+) [0-9]");
        assert_eq!(java_classes(r"[\w.-]+\W"), r"[0-9A-Za-z_.-]+[^0-9A-Za-z_]");
        assert_eq!(java_classes(r"\\w"), r"\\w");
        assert_eq!(java_classes(r"[]a]"), r"[\]a]");
        let re = fancy_regex::Regex::new(&java_classes(r"^\w+$")).unwrap();
        assert!(re.is_match("abc_1").unwrap());
        assert!(!re.is_match("é").unwrap());
    }
}

/// `REGEXP(s, pattern)`: whether a part of `s` matches; FALSE for a pattern that does not
/// compile.
fn regexp(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let p = strs(&c.args[1]);
    let r = regexes(p, c.rows);
    Ok(bool_rows(c.rows, |i| {
        let s = str_at(s, i)?;
        str_at(p, i)?;
        Some(
            r[i].as_ref()
                .is_some_and(|re| re.is_match(s).unwrap_or(false)),
        )
    }))
}

/// `REGEXP_REPLACE(s, pattern, replacement)`: every match replaced by `replacement`,
/// taken literally (Flink 2.3: `$1` and `\` are not special).
fn regexp_replace(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let r = regexes(strs(&c.args[1]), c.rows);
    let rep = strs(&c.args[2]);
    Ok(string_rows(c.rows, |i| {
        let re = r[i].as_ref()?;
        let rep = fancy_regex::NoExpand(str_at(rep, i)?);
        re.try_replacen(str_at(s, i)?, 0, rep)
            .ok()
            .map(|c| c.into_owned())
    }))
}

/// `REGEXP_EXTRACT(s, pattern [, group])`: group `group` (default 0, the whole match) of
/// the first match;
/// NULL without a match or when the group does not exist.
fn regexp_extract(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let groups = groups(c, 0);
    // The group is a slice of the input: no String per row.
    let extracted = (0..c.rows).map(|i| {
        let (re, g) = groups[i].as_ref()?;
        let caps = re.captures(str_at(s, i)?).ok()??;
        caps.get(*g).map(|m| m.as_str())
    });
    Ok(Arc::new(extracted.collect::<StringArray>()))
}

/// `REGEXP_EXTRACT_ALL(s, pattern [, group])`: group `group` (default 1) of every match,
/// as an `ARRAY<STRING>`; NULL when the group does not exist (Flink 2.3).
fn regexp_extract_all(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let groups = groups(c, 1);
    super::collection::string_lists(c, |i| {
        let (re, g) = groups[i].as_ref()?;
        let mut out = Vec::new();
        for caps in re.captures_iter(str_at(s, i)?) {
            let caps = caps.ok()?;
            out.push(caps.get(*g).map(|m| m.as_str().to_string()));
        }
        Some(out)
    })
}

/// `REGEXP_COUNT(s, pattern)`: the number of matches.
fn regexp_count(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let r = regexes(strs(&c.args[1]), c.rows);
    Ok(int32_rows(c.rows, |i| {
        let re = r[i].as_ref()?;
        Some(re.find_iter(str_at(s, i)?).filter(|m| m.is_ok()).count() as i32)
    }))
}

/// `REGEXP_INSTR(s, pattern)`: the 1-based character position of the first match, 0
/// without one.
fn regexp_instr(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let r = regexes(strs(&c.args[1]), c.rows);
    Ok(int32_rows(c.rows, |i| {
        let re = r[i].as_ref()?;
        let s = str_at(s, i)?;
        Some(match re.find(s).ok()? {
            Some(m) => s[..m.start()].chars().count() as i32 + 1,
            None => 0,
        })
    }))
}

/// `REGEXP_SUBSTR(s, pattern)`: the first match, NULL without one.
fn regexp_substr(c: &Call) -> Result<ArrayRef> {
    let s = strs(&c.args[0]);
    let r = regexes(strs(&c.args[1]), c.rows);
    Ok(string_rows(c.rows, |i| {
        let m = r[i].as_ref()?.find(str_at(s, i)?).ok()??;
        Some(m.as_str().to_string())
    }))
}
