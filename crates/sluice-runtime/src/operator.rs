//! The operator contract.
//!
//! An operator is synchronous CPU work over Arrow batches; all waiting (channels, I/O)
//! happens in the task driver around it ([`crate::job`]). The driver calls, in order:
//! `process_batch` for each data batch, `on_watermark` for each watermark (already
//! combined over inputs; never decreasing), and `on_end` once at the end of a bounded
//! input. An operator emits into the [`Collector`]; every batch it emits has exactly its
//! declared output schema. A watermark an operator receives is forwarded by the default
//! `on_watermark`; an operator that holds results until event time passes (a window)
//! emits them before forwarding the watermark, so downstream sees rows before the
//! watermark that made them final.
//!
//! State: stateful operators keep their state behind the keyed, columnar state types of
//! [`crate::state`], which the checkpoint layer snapshots.

use datafusion_common::arrow::record_batch::RecordBatch;
use sluice_common::Result;

use crate::message::{Message, StreamBatch};

/// Where an operator puts what it emits.
#[derive(Debug, Default)]
pub struct Collector {
    messages: Vec<Message>,
}

impl Collector {
    /// Emits a batch of rows (empty batches are dropped).
    pub fn emit(&mut self, batch: StreamBatch) {
        if batch.num_rows() > 0 {
            self.messages.push(Message::Data(batch));
        }
    }

    /// Forwards a watermark (ms).
    pub fn watermark(&mut self, watermark_ms: i64) {
        self.messages.push(Message::Watermark(watermark_ms));
    }

    pub(crate) fn take(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.messages)
    }
}

/// A streaming operator. See the module docs for the call order.
pub trait Operator: Send {
    /// Short name for logs and errors.
    fn name(&self) -> &'static str;

    /// Processes one batch of rows.
    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()>;

    /// Processes one batch of rows of input `input` (an operator with several inputs:
    /// `UNION ALL`, joins). Watermarks, barriers and the end of the inputs are combined
    /// before they reach the operator (the task's input gate: the watermark is the minimum
    /// over the inputs). The default, for one-input operators, is
    /// [`Operator::process_batch`].
    fn process_input(
        &mut self,
        input: usize,
        batch: StreamBatch,
        out: &mut Collector,
    ) -> Result<()> {
        let _ = input;
        self.process_batch(batch, out)
    }

    /// Event time reached `watermark_ms`: emit what became final, then forward.
    fn on_watermark(&mut self, watermark_ms: i64, out: &mut Collector) -> Result<()> {
        out.watermark(watermark_ms);
        Ok(())
    }

    /// The processing time (ms since the epoch, [`crate::clock::ProcessingClock`]) at
    /// which the operator wants [`Operator::on_processing_time`] called, if any: its
    /// processing-time timer. The task calls it when the time comes even if no row
    /// arrives, and before the next message it processes (so a timer due before a
    /// checkpoint barrier has fired when the operator snapshots).
    fn next_processing_timer(&self) -> Option<i64> {
        None
    }

    /// Processing time reached `now_ms` (at or after the operator's timer).
    fn on_processing_time(&mut self, now_ms: i64, out: &mut Collector) -> Result<()> {
        let _ = (now_ms, out);
        Ok(())
    }

    /// Rows the operator holds in its state (its own unit: a join's distinct rows, buffered
    /// rows, groups), for the job's metrics; `None` for stateless operators.
    fn state_rows(&self) -> Option<u64> {
        None
    }

    /// End of a bounded input: behave as if the watermark were +infinity (emit all held
    /// results). The driver forwards the end itself.
    fn on_end(&mut self, out: &mut Collector) -> Result<()> {
        let _ = out;
        Ok(())
    }

    /// The operator's keyed state as one columnar batch, for a checkpoint; `None` when the
    /// operator keeps no state (stateless operators) or has none right now. The batch has a
    /// `key_group` column (`UInt32`: the key group of the row's key, see
    /// [`crate::state::key_groups`]) so a restore at another parallelism can split it; the
    /// other columns are the operator's own (see each operator). Taking a snapshot leaves
    /// the state unchanged.
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        let _ = max_parallelism;
        Ok(None)
    }

    /// Adds the state of snapshots taken by [`Operator::snapshot_state`] (of the same
    /// operator in the same plan, possibly by several subtasks, already reduced to the key
    /// groups this subtask owns). Called before the first message.
    ///
    /// # Errors
    /// A snapshot whose columns do not match the operator.
    fn restore_state(&mut self, snapshots: &[RecordBatch]) -> Result<()> {
        if snapshots.iter().any(|b| b.num_rows() > 0) {
            return Err(sluice_common::SluiceError::Execution(format!(
                "the checkpoint holds state for the stateless operator {}",
                self.name()
            )));
        }
        Ok(())
    }
}

/// Operators fused into one task (Flink's operator chaining): each message runs through
/// all of them in order.
pub struct Chain {
    operators: Vec<Box<dyn Operator>>,
}

impl Chain {
    /// A chain of operators, first to last.
    pub fn new(operators: Vec<Box<dyn Operator>>) -> Self {
        Chain { operators }
    }

    /// Runs `msg` through the chain, handing what comes out of the last operator to
    /// `sink`.
    pub fn push(
        &mut self,
        msg: Message,
        sink: &mut dyn FnMut(Message) -> Result<()>,
    ) -> Result<()> {
        run_from(&mut self.operators, 0, msg, sink)
    }

    /// Runs `msg`, from input `input` of the first operator, through the chain.
    pub fn push_input(
        &mut self,
        input: usize,
        msg: Message,
        sink: &mut dyn FnMut(Message) -> Result<()>,
    ) -> Result<()> {
        match (msg, self.operators.first_mut()) {
            (Message::Data(b), Some(first)) => {
                let mut out = Collector::default();
                first.process_input(input, b, &mut out)?;
                for m in out.take() {
                    run_from(&mut self.operators, 1, m, sink)?;
                }
                Ok(())
            }
            (msg, _) => run_from(&mut self.operators, 0, msg, sink),
        }
    }

    /// The earliest processing-time timer of the chain's operators.
    pub fn next_processing_timer(&self) -> Option<i64> {
        self.operators
            .iter()
            .filter_map(|op| op.next_processing_timer())
            .min()
    }

    /// Fires the processing-time timers due at `now_ms`; what the operators emit runs
    /// through the rest of the chain to `sink`.
    pub fn fire_processing_timers(
        &mut self,
        now_ms: i64,
        sink: &mut dyn FnMut(Message) -> Result<()>,
    ) -> Result<()> {
        for i in 0..self.operators.len() {
            if self.operators[i]
                .next_processing_timer()
                .is_some_and(|t| t <= now_ms)
            {
                let mut out = Collector::default();
                self.operators[i].on_processing_time(now_ms, &mut out)?;
                for m in out.take() {
                    run_from(&mut self.operators, i + 1, m, sink)?;
                }
            }
        }
        Ok(())
    }

    /// Snapshots every operator of the chain (in order; `None` for stateless ones).
    pub fn snapshot(&mut self, max_parallelism: u32) -> Result<Vec<Option<RecordBatch>>> {
        self.operators
            .iter_mut()
            .map(|op| op.snapshot_state(max_parallelism))
            .collect()
    }

    /// Restores operator `i` from `snapshots[i]`.
    pub fn restore(&mut self, snapshots: &[Vec<RecordBatch>]) -> Result<()> {
        for (op, batches) in self.operators.iter_mut().zip(snapshots) {
            op.restore_state(batches)?;
        }
        Ok(())
    }

    /// Each operator's [`Operator::state_rows`], in chain order.
    pub fn state_rows(&self) -> Vec<Option<u64>> {
        self.operators.iter().map(|op| op.state_rows()).collect()
    }

    /// Number of operators.
    pub fn len(&self) -> usize {
        self.operators.len()
    }

    /// The chain has no operator.
    pub fn is_empty(&self) -> bool {
        self.operators.is_empty()
    }
}

fn run_from(
    ops: &mut [Box<dyn Operator>],
    idx: usize,
    msg: Message,
    sink: &mut dyn FnMut(Message) -> Result<()>,
) -> Result<()> {
    let Some(op) = ops.get_mut(idx) else {
        return sink(msg);
    };
    let mut out = Collector::default();
    let is_end = matches!(msg, Message::End);
    match msg {
        Message::Data(b) => op.process_batch(b, &mut out)?,
        Message::Watermark(w) => op.on_watermark(w, &mut out)?,
        Message::End => op.on_end(&mut out)?,
        // Barriers pass operators untouched; the task driver snapshots the chain.
        Message::Barrier(_) | Message::Idle => return sink(msg),
    }
    let mut produced = out.take();
    if is_end {
        produced.push(Message::End);
    }
    for m in produced {
        run_from(ops, idx + 1, m, sink)?;
    }
    Ok(())
}
