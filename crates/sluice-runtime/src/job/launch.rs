//! Starting an attempt: the tasks of every stage of the job graph (`crate::graph`), their
//! channels, restored state and source offsets.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, Sender, SyncSender};
use std::sync::Arc;

use sluice_common::plan::PlanNode;
use sluice_common::{Result, SluiceError};

use super::restore::owned_key_groups;
use super::{Attempt, Job};
use crate::build::{build_chain, build_operator, OperatorEnv};
use crate::checkpoint::coordinator::AttemptShape;
use crate::checkpoint::{CheckpointingMode, RestoredCheckpoint, SourceOffset};
use crate::expr::physical_all;
use crate::gate::InputGate;
use crate::graph::{Exchange, JobGraph, StageKind};
use crate::operator::{Chain, Operator};
use crate::tasks::{
    spawn_task, BarrierSchedule, Envelope, Event, OperatorTask, Outputs, ResultOutput,
    SourceDriver, SourceSettings, Target, TaskContext,
};

impl Job {
    /// Starts the tasks of attempt `number`, restoring `restore` (state and source offsets)
    /// or resuming the sources at `resume` (by source subtask).
    pub(super) fn launch(
        &self,
        number: u32,
        restore: Option<&RestoredCheckpoint>,
        resume: Option<BTreeMap<usize, SourceOffset>>,
        events: &Sender<(u32, Event)>,
    ) -> Result<Attempt> {
        let cp = &self.config.checkpoint;
        let ctx = TaskContext {
            attempt: number,
            events: events.clone(),
            cancel: Arc::new(AtomicBool::new(false)),
            coordination: Arc::clone(&self.coordination),
            failpoints: cp.failpoints.clone(),
            metrics: Arc::clone(&self.metrics),
        };
        self.metrics.restored_checkpoint_id.store(
            restore.map(|r| r.manifest.checkpoint_id).unwrap_or(0),
            Ordering::Relaxed,
        );
        // Test hook: restarts at other parallelism, so recovery re-splits state.
        let hook = &self.config.restart_parallelism;
        let parallelism = match number {
            n if n > 0 && !hook.is_empty() => hook[(n as usize - 1) % hook.len()].max(1),
            _ => self.config.parallelism,
        };
        let roots: Vec<&PlanNode> = self.plans.iter().collect();
        let graph = JobGraph::build(&roots, parallelism)?;
        let resumes = self.source_resumes(&graph, restore, resume)?;
        let mut channels = Channels::new(&graph);
        // Every task is built before any starts: a task that cannot be built (a missing
        // file, a bad option) fails the launch before a row is read anywhere.
        let mut tasks: Vec<(String, &'static str, TaskBody)> = Vec::new();
        for s in 0..graph.stages.len() {
            if graph.stages[s].kind == StageKind::Operators {
                for (subtask, task, rx) in
                    self.operator_tasks(&graph, s, &mut channels, restore, &ctx)?
                {
                    tasks.push((
                        format!("sluice-stage{s}-{subtask}"),
                        "operator",
                        Box::new(move || task.run(rx)),
                    ));
                }
            }
        }
        let injected = self.coordination.trigger.load(Ordering::SeqCst);
        let schedule = cp.enabled().then(|| BarrierSchedule {
            interval: cp.interval,
            after_rows: {
                let mut rows = cp.checkpoint_after_rows.clone();
                rows.sort_unstable();
                rows
            },
        });
        let env = self.operator_env();
        for group in &graph.sources {
            let stage = &graph.stages[group.stage];
            let mut connectors = self.attempt_connectors(number);
            connectors.source_parallelism = group.parallelism;
            for subtask in 0..group.parallelism {
                let global = group.first_subtask + subtask;
                connectors.source_subtask = subtask;
                let outputs =
                    channels.outputs(&graph, group.stage, subtask, self.config.max_parallelism)?;
                // Straight into the one consuming subtask when nothing runs in between.
                let direct = stage.operators.is_empty()
                    && outputs.0.len() == 1
                    && outputs.0[0].keys.is_none();
                let (tx, input, router) = if direct {
                    let t = &outputs.0[0];
                    (t.subtasks[0].clone(), t.input, None)
                } else {
                    let (tx, rx) = sync_channel::<Envelope>(8);
                    (tx, 0, Some((rx, outputs)))
                };
                let driver = SourceDriver::new(
                    &group.spec,
                    group.node,
                    &connectors,
                    ctx.clone(),
                    SourceSettings {
                        subtask: global,
                        input,
                        schedule: schedule.clone(),
                        resume: resumes[global].clone(),
                        track_offset: cp.mode == CheckpointingMode::AtMostOnce,
                        idle_timeout: self.config.idle_timeout,
                        stall: self
                            .config
                            .source_stall
                            .iter()
                            .find(|(s, _, first_only)| *s == global && (!first_only || number == 0))
                            .map(|(_, d, _)| *d),
                        injected,
                        clock: self.config.clock.clone(),
                    },
                )?;
                tasks.push((
                    format!("sluice-source-{global}"),
                    "source",
                    Box::new(move || driver.run(&tx)),
                ));
                if let Some((rx, outputs)) = router {
                    let chained: Vec<Box<dyn Operator>> = stage
                        .operators
                        .iter()
                        .map(|&id| build_operator(graph.operators[id].node, &env))
                        .collect::<Result<_>>()?;
                    tasks.push((
                        format!("sluice-router-{global}"),
                        "router",
                        Box::new(move || outputs.run_router(&mut Chain::new(chained), rx)),
                    ));
                }
            }
        }
        drop(channels);
        let mut threads = Vec::new();
        for (name, kind, body) in tasks {
            match spawn_task(&name, kind, &ctx, body) {
                Ok(t) => threads.push(t),
                Err(e) => {
                    // The tasks already started stop (their channels close as the rest
                    // of this attempt is dropped).
                    ctx.cancel.store(true, Ordering::SeqCst);
                    return Err(e);
                }
            }
        }
        Ok(Attempt {
            number,
            shape: AttemptShape {
                sources: graph.source_subtasks(),
                source_groups: graph
                    .sources
                    .iter()
                    .map(|g| (g.spec.table.clone(), g.parallelism))
                    .collect(),
                subtasks: graph.operator_subtasks(),
            },
            cancel: ctx.cancel,
            threads,
        })
    }

    /// Where each source subtask starts: the restored checkpoint's offsets, the live
    /// offsets of an at-most-once restart, or the beginning.
    fn source_resumes(
        &self,
        graph: &JobGraph,
        restore: Option<&RestoredCheckpoint>,
        resume: Option<BTreeMap<usize, SourceOffset>>,
    ) -> Result<Vec<Option<SourceOffset>>> {
        let sources = graph.source_subtasks();
        let Some(r) = restore else {
            return Ok(match resume {
                Some(offsets) => (0..sources).map(|s| offsets.get(&s).cloned()).collect(),
                None => vec![None; sources],
            });
        };
        let groups = &r.manifest.sources;
        // Each group's offsets, re-split when its 'scan.parallelism' changed and its
        // connector can (`connectors::resplit_offsets`: Kafka's are per partition).
        let resplit: Option<Vec<Vec<SourceOffset>>> = (groups.len() == graph.sources.len())
            .then(|| {
                groups
                    .iter()
                    .zip(&graph.sources)
                    .map(|(c, g)| {
                        if c.table != g.spec.table {
                            None
                        } else if c.offsets.len() == g.parallelism {
                            Some(c.offsets.clone())
                        } else {
                            crate::connectors::resplit_offsets(
                                &g.spec.options,
                                &c.offsets,
                                g.parallelism,
                            )
                        }
                    })
                    .collect::<Option<Vec<_>>>()
            })
            .flatten();
        let Some(resplit) = resplit else {
            let describe = |v: Vec<(String, usize)>| {
                v.iter()
                    .map(|(t, n)| format!("{t} ({n})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(SluiceError::Config(format!(
                "checkpoint {} read the sources {} (source subtasks); the job now reads {}: \
                 source offsets cannot be re-split (only a Kafka table's can, by partition)",
                r.manifest.checkpoint_id,
                describe(
                    groups
                        .iter()
                        .map(|c| (c.table.clone(), c.offsets.len()))
                        .collect()
                ),
                describe(
                    graph
                        .sources
                        .iter()
                        .map(|g| (g.spec.table.clone(), g.parallelism))
                        .collect()
                ),
            )));
        };
        Ok(resplit.into_iter().flatten().map(Some).collect())
    }

    fn operator_env(&self) -> OperatorEnv {
        OperatorEnv {
            metrics: Arc::clone(&self.metrics),
            state_ttl: self.config.state_ttl,
            clock: self.config.clock.clone(),
            connectors: self.config.connectors.clone(),
        }
    }

    fn attempt_connectors(&self, number: u32) -> crate::connectors::ConnectorContext {
        let mut connectors = self.config.connectors.clone();
        connectors.attempt = number;
        connectors.two_phase_sinks = self.config.checkpoint.two_phase();
        connectors.first_checkpoint_id = self.coordination.next_id.load(Ordering::SeqCst);
        connectors.checkpoint_interval = self.config.checkpoint.interval;
        connectors
    }

    /// The subtasks of operator stage `s`: their tasks (chain restored, outputs wired) and
    /// input channels.
    fn operator_tasks(
        &self,
        graph: &JobGraph,
        s: usize,
        channels: &mut Channels,
        restore: Option<&RestoredCheckpoint>,
        ctx: &TaskContext,
    ) -> Result<Vec<(usize, OperatorTask, Receiver<Envelope>)>> {
        let cp = &self.config.checkpoint;
        let stage = &graph.stages[s];
        let gate_channels = stage.gate_channels(graph);
        let channel_inputs: Vec<usize> = gate_channels
            .iter()
            .map(|(e, _)| stage.inputs[*e].input)
            .collect();
        let nodes: Vec<(usize, &PlanNode)> = stage
            .operators
            .iter()
            .map(|&id| (id, graph.operators[id].node))
            .collect();
        // The stage is known by its first operator (state of stage watermarks, acks).
        let stage_id = stage.operators[0];
        let first_subtask = graph.first_operator_subtask(s);
        let env = self.operator_env();
        let connectors = self.attempt_connectors(ctx.attempt);
        let receivers = std::mem::take(&mut channels.receivers[s]);
        let mut tasks = Vec::new();
        for (subtask, rx) in receivers.into_iter().enumerate() {
            let mut sub_connectors = connectors.clone();
            sub_connectors.subtask = subtask;
            let (operators, sink) = build_chain(&nodes, &sub_connectors, &env)?;
            let (operator_indices, operators): (Vec<usize>, Vec<Box<dyn Operator>>) =
                operators.into_iter().unzip();
            let mut chain = Chain::new(operators);
            if let Some(r) = restore {
                let per_operator = operator_indices
                    .iter()
                    .map(|i| {
                        let batches = r.state.get(i).map(|b| &b[..]).unwrap_or(&[]);
                        owned_key_groups(
                            batches,
                            subtask,
                            stage.parallelism,
                            self.config.max_parallelism,
                        )
                    })
                    .collect::<Result<Vec<_>>>()?;
                chain.restore(&per_operator)?;
            }
            let outputs = channels.outputs(graph, s, subtask, self.config.max_parallelism)?;
            let output = if sink.is_none() && outputs.is_empty() && cp.two_phase() {
                ResultOutput::Buffered(Vec::new())
            } else {
                ResultOutput::Direct(self.out_tx.clone())
            };
            let task = OperatorTask {
                chain,
                operator_indices,
                sink,
                output,
                outputs,
                channel_inputs: channel_inputs.clone(),
                updating: self.updating,
                time_zone: connectors.time_zone.clone(),
                subtask: first_subtask + subtask,
                max_parallelism: self.config.max_parallelism,
                gate: InputGate::new(
                    gate_channels.len(),
                    cp.mode == CheckpointingMode::ExactlyOnce,
                ),
                // The watermark this stage had reached at the restored checkpoint.
                restored_watermark: restore
                    .and_then(|r| r.manifest.stage_watermarks.get(&stage_id).copied())
                    .filter(|w| *w > sluice_common::time::WATERMARK_MIN),
                stage: stage_id,
                watermark_ms: sluice_common::time::WATERMARK_MIN,
                clock: self.config.clock.clone(),
                ctx: ctx.clone(),
            };
            tasks.push((subtask, task, rx));
        }
        Ok(tasks)
    }
}

/// A task's work, run on its own thread.
type TaskBody = Box<dyn FnOnce() -> Result<()> + Send>;

/// The input channels of every operator subtask of an attempt (by stage, then subtask).
struct Channels {
    senders: Vec<Vec<SyncSender<Envelope>>>,
    receivers: Vec<Vec<Receiver<Envelope>>>,
}

impl Channels {
    fn new(graph: &JobGraph) -> Self {
        let mut senders = Vec::new();
        let mut receivers = Vec::new();
        for stage in &graph.stages {
            let n = match stage.kind {
                StageKind::Operators => stage.parallelism,
                StageKind::Source(_) => 0,
            };
            let (t, r): (Vec<_>, Vec<_>) = (0..n).map(|_| sync_channel::<Envelope>(8)).unzip();
            senders.push(t);
            receivers.push(r);
        }
        Channels { senders, receivers }
    }

    /// Where subtask `subtask` of stage `s` sends: one target per edge into a consuming
    /// stage.
    fn outputs(
        &self,
        graph: &JobGraph,
        s: usize,
        subtask: usize,
        max_parallelism: u32,
    ) -> Result<Outputs> {
        let mut targets = Vec::new();
        for &c in &graph.stages[s].consumers {
            let consumer = &graph.stages[c];
            for (e, edge) in consumer.inputs.iter().enumerate() {
                if edge.from != s {
                    continue;
                }
                let (keys, subtasks) = match &edge.exchange {
                    Exchange::Hash(k) => (
                        Some(physical_all(&k.exprs, &k.schema)?),
                        self.senders[c].clone(),
                    ),
                    Exchange::Single => (None, vec![self.senders[c][0].clone()]),
                };
                targets.push(Target {
                    keys,
                    subtasks,
                    max_parallelism,
                    input: consumer.channel_of(graph, e, subtask),
                });
            }
        }
        Ok(Outputs(targets))
    }
}
