//! Jobs an engine runs in the background (`INSERT INTO` from the shell), for `SHOW JOBS`
//! and `STOP JOB 'id' [WITH SAVEPOINT]` (Flink SQL client statements).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion_common::arrow::array::RecordBatch;
use sluice_common::{Result, SluiceError};
use sluice_runtime::{JobHandle, JobMetrics, RunningJob};

use crate::StatementResult;

/// How long `STOP JOB` waits for the savepoint, or for the job to end.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// What a background job is doing (Flink's job status names).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Status {
    Running,
    Finished,
    /// Stopped by `STOP JOB`.
    Canceled,
    Failed(String),
}

struct BackgroundJob {
    handle: JobHandle,
    /// The statement, on one line (the job's name in `SHOW JOBS`).
    name: String,
    /// Wall-clock start (ms since the epoch).
    started_ms: i64,
    status: Arc<Mutex<Status>>,
}

/// The engine's background jobs, in the order they started.
#[derive(Default)]
pub(crate) struct BackgroundJobs {
    jobs: Vec<BackgroundJob>,
}

impl BackgroundJobs {
    /// Runs `job` to its end on a thread of its own (reading and dropping its output) and
    /// records it; returns its id.
    pub(crate) fn detach(&mut self, mut job: RunningJob, statement: &str) -> String {
        let handle = job.handle();
        let status = Arc::new(Mutex::new(Status::Running));
        let (h, st) = (handle.clone(), Arc::clone(&status));
        std::thread::spawn(move || {
            let mut failure = None;
            while let Some(batch) = job.blocking_next() {
                if let Err(e) = batch {
                    failure = Some(e.to_string());
                }
            }
            job.join();
            let end = match failure {
                Some(e) => Status::Failed(e),
                None if h.stop_requested() => Status::Canceled,
                None => Status::Finished,
            };
            *st.lock().unwrap_or_else(|e| e.into_inner()) = end;
        });
        let started_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or_default();
        let name = statement.split_whitespace().collect::<Vec<_>>().join(" ");
        let id = handle.id.clone();
        self.jobs.push(BackgroundJob {
            handle,
            name,
            started_ms,
            status,
        });
        id
    }

    /// `SHOW JOBS`: columns `job id`, `job name`, `status` (RUNNING, FINISHED, CANCELED,
    /// FAILED), `start time` (UTC), `rows in`, `rows out`, `error`.
    pub(crate) fn show(&self) -> RecordBatch {
        let mut cols: Vec<(&str, Vec<String>)> = [
            "job id",
            "job name",
            "status",
            "start time",
            "rows in",
            "rows out",
            "error",
        ]
        .iter()
        .map(|c| (*c, Vec::new()))
        .collect();
        for job in &self.jobs {
            let status = job.status.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let (status, error) = match status {
                Status::Running => ("RUNNING", String::new()),
                Status::Finished => ("FINISHED", String::new()),
                Status::Canceled => ("CANCELED", String::new()),
                Status::Failed(e) => ("FAILED", e),
            };
            let m = &job.handle.metrics;
            let values = [
                job.handle.id.clone(),
                truncate(&job.name, 60),
                status.to_string(),
                sluice_common::time::format_timestamp_ms(job.started_ms),
                JobMetrics::get(&m.rows_in).to_string(),
                JobMetrics::get(&m.rows_out).to_string(),
                error,
            ];
            for (col, v) in cols.iter_mut().zip(values) {
                col.1.push(v);
            }
        }
        crate::string_batch(cols)
    }

    /// `STOP JOB 'id' [WITH SAVEPOINT]`: `id` is a job id or a unique prefix of one.
    ///
    /// # Errors
    /// No such job, several jobs match the prefix, the job is not running, or (with a
    /// savepoint) the job takes no checkpoints or the checkpoint failed.
    pub(crate) fn stop(&self, id: &str, savepoint: bool) -> Result<StatementResult> {
        let matching: Vec<&BackgroundJob> = self
            .jobs
            .iter()
            .filter(|j| j.handle.id == id || j.handle.id.starts_with(id))
            .collect();
        let job = match matching.as_slice() {
            [one] => *one,
            [] => {
                return Err(SluiceError::Config(format!(
                    "no job '{id}' in this session (SHOW JOBS lists them)"
                )))
            }
            many => {
                return Err(SluiceError::Config(format!(
                    "'{id}' names {} jobs; give more of the id",
                    many.len()
                )))
            }
        };
        if job.handle.is_finished() {
            return Err(SluiceError::Config(format!(
                "job '{}' is not running",
                job.handle.id
            )));
        }
        if savepoint {
            let path = job.handle.stop_with_checkpoint(STOP_TIMEOUT)?;
            job.wait_ended();
            return Ok(StatementResult::Info(crate::string_batch(vec![(
                "savepoint path",
                vec![path],
            )])));
        }
        job.handle.stop();
        job.wait_ended();
        Ok(StatementResult::Done(format!(
            "Job '{}' has been stopped.",
            job.handle.id
        )))
    }
}

impl BackgroundJob {
    /// Waits (at most [`STOP_TIMEOUT`]) until the job's thread recorded how it ended.
    fn wait_ended(&self) {
        let deadline = std::time::Instant::now() + STOP_TIMEOUT;
        while *self.status.lock().unwrap_or_else(|e| e.into_inner()) == Status::Running
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl BackgroundJobs {
    /// Ids of the jobs still running.
    pub(crate) fn running(&self) -> Vec<String> {
        self.jobs
            .iter()
            .filter(|j| *j.status.lock().unwrap_or_else(|e| e.into_inner()) == Status::Running)
            .map(|j| j.handle.id.clone())
            .collect()
    }

    /// Stops every running job and waits (up to a minute each) until it has ended.
    pub(crate) fn stop_all(&self) {
        for job in &self.jobs {
            job.handle.stop();
        }
        for job in &self.jobs {
            job.wait_ended();
        }
    }

    /// Waits until every job has ended by itself (bounded inputs).
    pub(crate) fn wait_all(&self) {
        for job in &self.jobs {
            while *job.status.lock().unwrap_or_else(|e| e.into_inner()) == Status::Running {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        s.chars().take(max - 3).collect::<String>() + "..."
    }
}
