//! README's option tables are the option declarations (`sluice_common::options`): each
//! `<!-- options: ... -->` block holds the table made from them. `SLUICE_BLESS=1 cargo
//! test --test readme_options` writes them.

use sluice_common::options::{
    markdown_table, metadata_keys, OptionDecl, CONNECTORS, FORMATS, SESSION,
};

/// The table a marker names.
fn table(marker: &str) -> String {
    match marker.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["session"] => markdown_table(SESSION),
        ["connector", name] => {
            let c = CONNECTORS
                .iter()
                .find(|c| c.name == *name)
                .unwrap_or_else(|| panic!("no connector {name}"));
            markdown_table(c.options)
        }
        ["metadata", name] => {
            let mut out =
                String::from("| key | type | writable | description |\n|---|---|---|---|\n");
            for m in metadata_keys(name) {
                out.push_str(&format!(
                    "| `{}` | `{}` | {} | {} |\n",
                    m.key,
                    m.flink_type,
                    if m.writable { "yes" } else { "no" },
                    m.description
                ));
            }
            out
        }
        ["formats"] => {
            let all: Vec<OptionDecl> = FORMATS
                .iter()
                .flat_map(|f| f.options.iter().copied())
                .collect();
            markdown_table(&all)
        }
        other => panic!("unknown options marker {other:?}"),
    }
}

#[test]
fn readme_option_tables_are_the_declarations() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut out = String::new();
    let mut rest = text.as_str();
    let mut blocks = 0;
    while let Some(at) = rest.find("<!-- options: ") {
        let open_end = at + rest[at..].find("-->").expect("marker closed") + 3;
        let marker = rest[at + "<!-- options: ".len()..open_end - 3].trim();
        let close = open_end
            + rest[open_end..]
                .find("<!-- /options -->")
                .expect("block closed");
        out.push_str(&rest[..open_end]);
        out.push('\n');
        out.push_str(&table(marker));
        rest = &rest[close..];
        blocks += 1;
    }
    out.push_str(rest);
    assert!(blocks >= 4, "README lost its option tables");
    if std::env::var("SLUICE_BLESS").is_ok() {
        std::fs::write(&path, &out).unwrap();
        return;
    }
    assert!(
        out == text,
        "README's option tables differ from sluice_common::options; run \
         SLUICE_BLESS=1 cargo test --test readme_options"
    );
}
