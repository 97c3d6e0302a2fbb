//! EXPLAIN's expression text: DataFusion's display of an expression made to read as the
//! SQL it came from. String, integer, float and boolean literals lose their type
//! (`Utf8("x")` → `'x'`, `Int64(2)` → `2`, `Boolean(true)` → `TRUE`; others, such as
//! decimals and timestamps, keep DataFusion's spelling), a ROW field access reads `bid.price` (not
//! `get_field(bid, 'price')`), `count(Int64(1))` reads `COUNT(*)`, and a chain of aliases
//! keeps its last name. Expressions themselves are rendered from their tree
//! ([`super::sql`]); this text rewrite is for the nodes that renderer does not know and for
//! text built from displays elsewhere.

/// DataFusion's expression text made SQL-like (module docs). Text it does not recognise
/// is kept.
pub(super) fn tidy(text: &str) -> String {
    let s = strings(text);
    // The rewrites below apply outside quoted string literals only.
    let mut out = String::with_capacity(s.len());
    for (k, part) in s.split('\'').enumerate() {
        if k > 0 {
            out.push('\'');
        }
        if k % 2 == 1 {
            out.push_str(part);
            continue;
        }
        let mut p = part.to_string();
        for ty in [
            "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Float32",
            "Float64",
        ] {
            p = numbers(&p, ty);
        }
        p = replace_word(&p, "Boolean(true)", "TRUE");
        p = replace_word(&p, "Boolean(false)", "FALSE");
        p = replace_word(&p, "count(1)", "COUNT(*)");
        out.push_str(&p);
    }
    field_access(&out)
}

/// Whether `text[..at]` ends inside an identifier (so `at` does not start a word).
fn in_word(text: &str, at: usize) -> bool {
    text[..at]
        .chars()
        .next_back()
        .is_some_and(|c| c.is_alphanumeric() || c == '_')
}

fn replace_word(text: &str, from: &str, to: &str) -> String {
    let mut out = String::new();
    let mut rest = 0;
    let mut from_at = 0;
    while let Some(p) = text[from_at..].find(from).map(|p| p + from_at) {
        if in_word(text, p) {
            from_at = p + from.len();
            continue;
        }
        out.push_str(&text[rest..p]);
        out.push_str(to);
        rest = p + from.len();
        from_at = rest;
    }
    out.push_str(&text[rest..]);
    out
}

/// `Utf8("x")`, `Utf8View("x")`, `LargeUtf8("x")` → `'x'` (a quote inside doubled).
fn strings(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    loop {
        let found = ["Utf8(\"", "Utf8View(\"", "LargeUtf8(\""]
            .iter()
            .filter_map(|p| rest.find(p).map(|at| (at, p.len())))
            .filter(|(at, _)| !in_word(rest, *at))
            .min();
        let Some((at, open)) = found else { break };
        let Some(close) = rest[at + open..].find("\")") else {
            break;
        };
        out.push_str(&rest[..at]);
        out.push('\'');
        out.push_str(&rest[at + open..at + open + close].replace('\'', "''"));
        out.push('\'');
        rest = &rest[at + open + close + 2..];
    }
    out.push_str(rest);
    out
}

/// `Int64(2)` → `2` (and the other number types), `Int64(NULL)` → `NULL`.
fn numbers(text: &str, ty: &str) -> String {
    let open = format!("{ty}(");
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(&open) {
        let start = at + open.len();
        let end = rest[start..].find(')').map(|e| start + e);
        let literal = end
            .map(|e| &rest[start..e])
            .filter(|v| *v == "NULL" || v.parse::<f64>().is_ok());
        match (literal, end) {
            (Some(v), Some(e)) if !in_word(rest, at) => {
                out.push_str(&rest[..at]);
                out.push_str(v);
                rest = &rest[e + 1..];
            }
            _ => {
                out.push_str(&rest[..start]);
                rest = &rest[start..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `get_field(x, 'f')` → `x.f`, innermost first.
fn field_access(text: &str) -> String {
    let mut s = text.to_string();
    let mut end = s.len();
    while let Some(at) = s[..end].rfind("get_field(") {
        end = at;
        if in_word(&s, at) {
            continue;
        }
        let args = at + "get_field(".len();
        let mut depth = 0;
        let mut comma = None;
        let mut close = None;
        for (i, c) in s[args..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    close = Some(args + i);
                    break;
                }
                ')' => depth -= 1,
                ',' if depth == 0 && comma.is_none() => comma = Some(args + i),
                _ => {}
            }
        }
        let (Some(comma), Some(close)) = (comma, close) else {
            continue;
        };
        let field = s[comma + 1..close].trim();
        let Some(name) = field
            .strip_prefix('\'')
            .and_then(|f| f.strip_suffix('\''))
            .filter(|f| !f.contains('\''))
        else {
            continue;
        };
        let replaced = format!("{}.{name}", &s[args..comma]);
        s.replace_range(at..=close, &replaced);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::tidy;

    #[test]
    fn typed_literals_and_field_access_read_as_sql() {
        assert_eq!(
            tidy(r#"get_field(nexmark.bid, Utf8("auction")) AS auction"#),
            "nexmark.bid.auction AS auction"
        );
        assert_eq!(
            tidy(r#"nexmark.event_type = Int32(2) AND x > Float64(1.5)"#),
            "nexmark.event_type = 2 AND x > 1.5"
        );
        assert_eq!(tidy("count(Int64(1))"), "COUNT(*)");
        assert_eq!(tidy("mycount(Int64(1))"), "mycount(1)");
        assert_eq!(tidy(r#"a = Utf8("it's")"#), "a = 'it''s'");
        assert_eq!(tidy("Boolean(true) OR MyInt64(3)"), "TRUE OR MyInt64(3)");
        assert_eq!(
            tidy(r#"get_field(get_field(t.r, Utf8("a")), Utf8("b"))"#),
            "t.r.a.b"
        );
        // Text inside string literals is kept; a name ending in get_field is no access.
        assert_eq!(
            tidy(r#"s = Utf8("Int64(5) count(1)") AND my_get_field(x, Utf8("f"))"#),
            "s = 'Int64(5) count(1)' AND my_get_field(x, 'f')"
        );
    }
}
