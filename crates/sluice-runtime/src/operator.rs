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

    fn take(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.messages)
    }
}

/// A streaming operator. See the module docs for the call order.
pub trait Operator: Send {
    /// Short name for logs and errors.
    fn name(&self) -> &'static str;

    /// Processes one batch of rows.
    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()>;

    /// Event time reached `watermark_ms`: emit what became final, then forward.
    fn on_watermark(&mut self, watermark_ms: i64, out: &mut Collector) -> Result<()> {
        out.watermark(watermark_ms);
        Ok(())
    }

    /// End of a bounded input: behave as if the watermark were +infinity (emit all held
    /// results). The driver forwards the end itself.
    fn on_end(&mut self, out: &mut Collector) -> Result<()> {
        let _ = out;
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
