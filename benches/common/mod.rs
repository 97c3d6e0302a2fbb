//! What the benchmarks share: generated input files, running a script, printing figures.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sluice::{Engine, EngineConfig, StatementResult};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// xorshift64*: a deterministic, dependency-free stream of pseudo-random numbers.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

pub fn sluice_format_ts(ms: i64) -> String {
    // Always with milliseconds, as many real inputs are.
    let s = sluice_common_format(ms);
    if s.len() == 19 {
        format!("{s}.000")
    } else {
        s
    }
}

pub fn sluice_common_format(ms: i64) -> String {
    sluice::format_timestamp_ms(ms)
}

/// Runs a script; returns (seconds, rows out, late rows).
pub fn run(script: &str) -> (f64, u64, u64) {
    let (secs, out, late, _) = run_with_metrics(script);
    (secs, out, late)
}

/// Runs a script; returns (seconds, rows out, late rows, the last job's metrics).
pub fn run_with_metrics(
    script: &str,
) -> (f64, u64, u64, Option<std::sync::Arc<sluice::JobMetrics>>) {
    // The allocator settings of the `sluice` binary, so figures are the command's.
    sluice::tune_allocator();
    let mut engine = Engine::new(EngineConfig {
        working_dir: Some(root()),
        ..Default::default()
    });
    // The functions the `sluice` binary registers (Nexmark q14's count_char).
    sluice::nexmark::register_udfs(&mut engine);
    let statements = sluice::parse_script(script).expect("bench SQL parses");
    let started = Instant::now();
    let mut rows_out = 0;
    let mut late = 0;
    let mut metrics = None;
    for stmt in &statements {
        match engine.execute(stmt).expect("bench statement runs") {
            StatementResult::Query(mut job) | StatementResult::Insert(mut job) => {
                while let Some(b) = job.blocking_next() {
                    b.expect("bench job succeeds");
                }
                rows_out += sluice::JobMetrics::get(&job.metrics.rows_out);
                late += sluice::JobMetrics::get(&job.metrics.late_rows_dropped);
                metrics = Some(std::sync::Arc::clone(&job.metrics));
                job.join();
            }
            _ => {}
        }
    }
    (started.elapsed().as_secs_f64(), rows_out, late, metrics)
}

pub fn report(name: &str, rows_in: u64, (secs, out, late): (f64, u64, u64), flink: Option<f64>) {
    let rate = rows_in as f64 / secs / 1e6;
    let vs = flink
        .map(|f| format!(", {:.1}x Flink 2.3 ({f} M rows/s)", rate / f))
        .unwrap_or_default();
    println!(
        "{name:<44} {rows_in:>10} rows in {secs:>6.2} s = {rate:>6.2} M rows/s ({out} rows out, {late} late){vs}"
    );
}

/// The process's peak resident set (VmHWM) in MB since the last [`reset_peak_rss`].
pub fn peak_rss_mb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// Resets the peak resident set to the current one (Linux `clear_refs` 5).
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Writes `path` once with `rows` lines from `line(i, rng)`.
pub fn generate_lines(
    path: &Path,
    rows: u64,
    mut line: impl FnMut(u64, &mut Rng) -> String,
) -> std::io::Result<()> {
    if path.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(path.parent().unwrap())?;
    let tmp = path.with_extension("tmp");
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    for i in 0..rows {
        writeln!(out, "{}", line(i, &mut rng))?;
    }
    out.flush()?;
    drop(out);
    std::fs::rename(tmp, path)
}

/// The benchmarks' main input, written once to `path`: `rows` lines of `ts, key, price`
/// (`TIMESTAMP(3)`, `INT`, `DOUBLE`) over 1,000 s of event time, 10,000 keys, up to 500 ms
/// of disorder (deterministic).
pub fn generate(path: &Path, rows: u64) -> std::io::Result<()> {
    if path.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(path.parent().unwrap())?;
    let tmp = path.with_extension("tmp");
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let base_ms: i64 = 1_704_067_200_000; // 2024-01-01 00:00:00
    let span_ms: i64 = 1_000_000;
    for i in 0..rows {
        let r = rng.next();
        let jitter = (r % 500) as i64;
        let ts = base_ms + (i as i64 * span_ms) / rows as i64 - jitter;
        let key = (r >> 16) % 10_000;
        let price = ((r >> 32) % 100_000) as f64 / 100.0;
        writeln!(out, "{},{key},{price}", sluice_format_ts(ts))?;
    }
    out.flush()?;
    drop(out);
    std::fs::rename(tmp, path)
}

/// `rows` lines of `ts, key, price` with 1 M keys (otherwise as [`generate`]'s input):
/// benchmark (q)'s deduplication and (g2)'s updating aggregate.
pub fn generate_1m_keys(path: &Path, rows: u64) -> std::io::Result<()> {
    if path.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(path.parent().unwrap())?;
    let tmp = path.with_extension("tmp");
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
    let mut rng = Rng(0x51ED_2701_9E37_79B9);
    let base_ms: i64 = 1_704_067_200_000;
    for i in 0..rows {
        let r = rng.next();
        let ts = base_ms + (i as i64 * 1_000_000) / rows as i64 - (r % 500) as i64;
        let key = (r >> 16) % 1_000_000;
        let price = ((r >> 40) % 100_000) as f64 / 100.0;
        writeln!(out, "{},{key},{price}", sluice_format_ts(ts))?;
    }
    out.flush()?;
    drop(out);
    std::fs::rename(tmp, path)
}
