//! Test hooks that inject failures at named points of the checkpoint protocol
//! (`'sluice.test.failpoints'`).

use std::sync::{Arc, Mutex};

use sluice_common::{Result, SluiceError};

/// Failures injected at named points, for tests (a failpoint registry per job, shared by
/// its tasks and kept across restarts).
///
/// Spec: a comma-separated list of `point[:arg][xK]`; a point fires the first `K` times
/// (default 1) it is reached with a matching `arg`:
///
/// | point | where the job fails |
/// |---|---|
/// | `source-after-row:N` | the source, right after sending row `N` (once checkpoints already triggered have settled) |
/// | `operator-after-update:N` | an operator task, after the `N`-th batch updated its state, before its output reaches the sink |
/// | `barrier:ID` | an operator task, when barrier `ID` arrives (the checkpoint never completes) |
/// | `upload:ID` | writing a file of checkpoint `ID` (a state file, else its manifest: the checkpoint fails; the job goes on, or restarts when it is the final one) |
/// | `after-manifest:ID` | the coordinator, after writing checkpoint `ID`'s manifest, before the sinks commit |
/// | `kill-after-manifest:ID` | the same place, but the process dies at once (aborts, as if killed: no cleanup, no restart) |
/// | `mid-commit:ID` | the coordinator, after committing the first of checkpoint `ID`'s pending commits, before the others |
/// | `sink-after-precommit:ID` | an operator task, after its sink pre-committed `ID` |
/// | `before-final-commit` | an operator task, after the end of input was pre-committed, before it is committed |
#[derive(Debug, Clone, Default)]
pub struct FailPoints {
    points: Arc<Mutex<Vec<FailPoint>>>,
    /// Data batches processed by operator tasks (for `operator-after-update`).
    batches: Arc<std::sync::atomic::AtomicU64>,
}

#[derive(Debug)]
struct FailPoint {
    name: String,
    arg: Option<u64>,
    remaining: u32,
}

const FAILPOINT_NAMES: [&str; 9] = [
    "source-after-row",
    "operator-after-update",
    "barrier",
    "upload",
    "after-manifest",
    "kill-after-manifest",
    "mid-commit",
    "sink-after-precommit",
    "before-final-commit",
];

impl FailPoints {
    /// Parses a spec (see the type).
    ///
    /// # Errors
    /// An unknown point or a malformed number.
    pub fn parse(spec: &str) -> Result<Self> {
        let mut points = Vec::new();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = || {
                SluiceError::Config(format!(
                    "bad failpoint '{item}': expected point[:arg][xK] with point one of {}",
                    FAILPOINT_NAMES.join(", ")
                ))
            };
            let (body, times) = match item.rsplit_once('x') {
                Some((b, k)) if k.chars().all(|c| c.is_ascii_digit()) && !k.is_empty() => {
                    (b, k.parse::<u32>().map_err(|_| bad())?)
                }
                _ => (item, 1),
            };
            let (name, arg) = match body.split_once(':') {
                Some((n, a)) => (n, Some(a.trim().parse::<u64>().map_err(|_| bad())?)),
                None => (body, None),
            };
            if !FAILPOINT_NAMES.contains(&name.trim()) {
                return Err(bad());
            }
            points.push(FailPoint {
                name: name.trim().to_string(),
                arg,
                remaining: times,
            });
        }
        Ok(FailPoints {
            points: Arc::new(Mutex::new(points)),
            batches: Default::default(),
        })
    }

    /// Whether point `name` fires now for `arg` (consuming one of its firings).
    pub fn fires(&self, name: &str, arg: Option<u64>) -> bool {
        let mut points = self.points.lock().unwrap_or_else(|e| e.into_inner());
        for p in points.iter_mut() {
            if p.name == name && p.remaining > 0 && (p.arg.is_none() || p.arg == arg) {
                p.remaining -= 1;
                return true;
            }
        }
        false
    }

    /// The arguments configured for point `name` (sorted).
    pub fn args(&self, name: &str) -> Vec<u64> {
        let points = self.points.lock().unwrap_or_else(|e| e.into_inner());
        let mut args: Vec<u64> = points
            .iter()
            .filter(|p| p.name == name)
            .filter_map(|p| p.arg)
            .collect();
        args.sort_unstable();
        args.dedup();
        args
    }

    /// `Err` (an injected failure) when point `name` fires for `arg`.
    pub fn check(&self, name: &str, arg: Option<u64>) -> Result<()> {
        if self.fires(name, arg) {
            return Err(injected(name, arg));
        }
        Ok(())
    }

    /// Counts a data batch processed by an operator task and checks
    /// `operator-after-update`.
    pub fn check_operator_batch(&self) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let n = self
            .batches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        self.check("operator-after-update", Some(n))
    }

    /// No failpoint is configured.
    pub fn is_empty(&self) -> bool {
        self.points
            .lock()
            .map(|p| p.iter().all(|p| p.remaining == 0))
            .unwrap_or(true)
    }
}

/// The error of an injected failure.
pub fn injected(name: &str, arg: Option<u64>) -> SluiceError {
    match arg {
        Some(a) => SluiceError::Execution(format!("injected failure at {name}:{a}")),
        None => SluiceError::Execution(format!("injected failure at {name}")),
    }
}
