//! The SQL test suite (custom harness, `harness = false`):
//!
//! 1. every `tests/slt/**/*.slt` file, sqllogictest format, each in a fresh `Engine`
//!    whose relative paths resolve against `tests/slt/` (inputs live in `tests/slt/data/`);
//! 2. every semantics case under `tests/cases/NNN-name/` (`query.sql`, `input.csv`,
//!    `expected.csv`, copied from `../shared/cases`): the query's rows must equal
//!    `expected.csv` as a multiset, timestamps compared by value.
//!
//! `cargo test --test slt -- NAME` runs only the files and cases whose path contains NAME.
//!
//! Recovery mode: `SLUICE_SLT_RECOVERY=N cargo test --test slt` runs every `.slt` file N
//! more times (seeds 1..=N), each job checkpointing at random rows and failing at random
//! points (`common::recovery_settings`), restarting at random parallelism; the committed
//! results (changelogs folded) must still be the expected rows.
//! Expected rows are derived by hand or by another engine, never from Sluice's output.

#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};

use common::{compare_csv_multiset, files_under, rows_as_csv, SluiceDb};

fn run_slt(path: &Path, slt_root: &Path, recovery: Option<u64>) -> Result<(), String> {
    // Without substitution `$__TEST_DIR__` is a literal directory under tests/slt/, which
    // outlives the run (a second run then reads the first one's files).
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    if text.contains("__TEST_DIR__") && !text.contains("control substitution on") {
        return Err(format!(
            "{}: uses __TEST_DIR__ without 'control substitution on' before it",
            path.display()
        ));
    }
    let dir = slt_root.to_path_buf();
    let mut runner = sqllogictest::Runner::new(move || {
        let dir = dir.clone();
        async move { Ok::<_, common::DbError>(SluiceDb::with_recovery(dir, recovery)) }
    });
    runner
        .run_file(path)
        .map_err(|e| e.display(true).to_string())
}

fn run_case(dir: &Path) -> Result<(), String> {
    let sql = std::fs::read_to_string(dir.join("query.sql")).map_err(|e| e.to_string())?;
    let expected = std::fs::read_to_string(dir.join("expected.csv")).map_err(|e| e.to_string())?;
    let mut engine = sluice::Engine::new(sluice::EngineConfig {
        working_dir: Some(dir.to_path_buf()),
        ..Default::default()
    });
    let mut batches = engine.collect(&sql).map_err(|e| e.to_string())?;
    if batches
        .first()
        .is_some_and(|b| b.schema().field(0).name() == "op")
    {
        // An updating result: compare its final table.
        batches = sluice::format::fold_changelog(&batches)
            .map_err(|e| e.to_string())?
            .into_iter()
            .collect();
    }
    let actual = rows_as_csv(&batches);
    compare_csv_multiset(&expected, &actual)
}

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests");
    let selected = |p: &Path| {
        filter.is_empty()
            || filter
                .iter()
                .any(|f| p.to_string_lossy().contains(f.as_str()))
    };

    let mut slt_files = Vec::new();
    files_under(&root.join("slt"), "slt", &mut slt_files);
    let mut case_dirs: Vec<PathBuf> = std::fs::read_dir(root.join("cases"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.join("query.sql").exists())
                .collect()
        })
        .unwrap_or_default();
    case_dirs.sort();

    let (mut passed, mut failed) = (0usize, 0usize);
    let mut report = |path: &Path, result: Result<(), String>| {
        let name = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        match result {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(e) => {
                println!("test {name} ... FAILED\n{e}\n");
                failed += 1;
            }
        }
    };
    for f in slt_files.iter().filter(|p| selected(p)) {
        report(f, run_slt(f, &root.join("slt"), None));
    }
    let recovery_seeds: u64 = std::env::var("SLUICE_SLT_RECOVERY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    for seed in 1..=recovery_seeds {
        for f in slt_files.iter().filter(|p| selected(p)) {
            let result = run_slt(f, &root.join("slt"), Some(seed))
                .map_err(|e| format!("recovery mode, seed {seed}: {e}"));
            report(f, result);
        }
    }
    for d in case_dirs.iter().filter(|p| selected(p)) {
        report(d, run_case(d));
    }
    println!(
        "\ntest result: {}. {passed} passed; {failed} failed",
        if failed == 0 { "ok" } else { "FAILED" }
    );
    if failed > 0 {
        std::process::exit(1);
    }
}
