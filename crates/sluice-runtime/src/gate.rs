//! The input gate of a task with several inputs: combines watermarks, aligns checkpoint
//! barriers, and ends when every input has ended.
//!
//! - **Watermarks** (Flink's `StatusWatermarkValve`): the task's watermark is the minimum
//!   over its active inputs. An input that ended counts as +infinity; an input that
//!   declared itself idle ([`Message::Idle`], after `'table.exec.source.idle-timeout'`
//!   without data) is left out until it sends again, so it does not hold event time back
//!   forever; when every live input is idle, the watermark moves to the maximum over all
//!   inputs (Flink's `StatusWatermarkValve`). Rows keep the per-row watermark contract of [`crate::message::StreamBatch`]:
//!   a row's watermark becomes the minimum of its own input's and the other active
//!   inputs' watermarks.
//! - **Barriers** (asynchronous barrier snapshotting, Carbone et al. 2015): barrier `id` is
//!   passed on (and the task snapshots) once it has arrived on every input that has not
//!   ended. Exactly-once **aligns**: after an input's barrier, its later messages wait in
//!   the gate until the last input's barrier arrives, so the snapshot holds exactly the
//!   rows before the barrier. At-least-once does not wait: rows after an early barrier are
//!   processed, land in the snapshot, and are replayed after a restore (duplicates).

use std::collections::VecDeque;

use sluice_common::time::{WATERMARK_MAX, WATERMARK_MIN};

use crate::message::Message;

/// See the module docs.
pub(crate) struct InputGate {
    watermarks: Vec<i64>,
    ended: Vec<bool>,
    idle: Vec<bool>,
    /// The last combined watermark passed on.
    emitted: i64,
    /// Exactly-once: hold inputs whose barrier arrived.
    align: bool,
    /// Barriers in flight and which inputs delivered each (exactly-once: at most one, the
    /// one being aligned).
    barriers: std::collections::BTreeMap<u64, Vec<bool>>,
    blocked: Vec<VecDeque<Message>>,
}

impl InputGate {
    /// A gate over `inputs` inputs; `align`: exactly-once barrier alignment.
    pub(crate) fn new(inputs: usize, align: bool) -> Self {
        InputGate {
            watermarks: vec![WATERMARK_MIN; inputs],
            ended: vec![false; inputs],
            idle: vec![false; inputs],
            emitted: WATERMARK_MIN,
            align,
            barriers: Default::default(),
            blocked: (0..inputs).map(|_| VecDeque::new()).collect(),
        }
    }

    /// After a restore: every input and the task start at the watermark of the restored
    /// checkpoint (`watermark_ms`, the minimum over the sources' restored watermarks), so
    /// rows are never judged against less than the operators had already seen (a window
    /// fired before the checkpoint must not be recreated by a late row).
    pub(crate) fn restore_watermark(&mut self, watermark_ms: i64) {
        for w in &mut self.watermarks {
            *w = (*w).max(watermark_ms);
        }
        self.emitted = self.emitted.max(watermark_ms);
    }

    fn inputs(&self) -> usize {
        self.watermarks.len()
    }

    /// Takes message `msg` of input `input`; appends what the task processes now, in
    /// order, to `out`.
    #[cfg(test)]
    pub(crate) fn push(&mut self, input: usize, msg: Message, out: &mut Vec<Message>) {
        let mut tagged = Vec::new();
        self.push_tagged(input, msg, &mut tagged);
        out.extend(tagged.into_iter().map(|(_, m)| m));
    }

    /// [`InputGate::push`], with the input each message passed on came from (for rows; a
    /// combined watermark, barrier or end carries the input that completed it).
    pub(crate) fn push_tagged(
        &mut self,
        input: usize,
        msg: Message,
        out: &mut Vec<(usize, Message)>,
    ) {
        if self.inputs() == 1 {
            if !matches!(msg, Message::Idle) {
                out.push((input, msg));
            }
            return;
        }
        if self.align && self.barriers.values().any(|got| got[input]) {
            self.blocked[input].push_back(msg);
            return;
        }
        match msg {
            Message::Data(mut b) => {
                self.idle[input] = false;
                let others = self.min_watermark(Some(input));
                if others < WATERMARK_MAX {
                    if let Some(w) = &b.row_watermarks {
                        if w.values().iter().any(|v| *v > others) {
                            b.row_watermarks =
                                Some(w.values().iter().map(|v| (*v).min(others)).collect());
                        }
                    }
                }
                out.push((input, Message::Data(b)));
            }
            Message::Watermark(w) => {
                self.idle[input] = false;
                self.watermarks[input] = self.watermarks[input].max(w);
                self.advance(input, out);
            }
            Message::Idle => {
                self.idle[input] = true;
                self.advance(input, out);
            }
            Message::Barrier(id) => {
                let inputs = self.inputs();
                self.barriers
                    .entry(id)
                    .or_insert_with(|| vec![false; inputs])[input] = true;
                self.release(input, out);
            }
            Message::End => {
                self.ended[input] = true;
                if self.ended.iter().all(|e| *e) {
                    self.release(input, out);
                    out.push((input, Message::End));
                } else {
                    self.advance(input, out);
                    self.release(input, out);
                }
            }
        }
    }

    /// The minimum watermark over active inputs (not ended, not idle), leaving out
    /// `except`; +infinity when there is none.
    fn min_watermark(&self, except: Option<usize>) -> i64 {
        (0..self.inputs())
            .filter(|k| Some(*k) != except && !self.ended[*k] && !self.idle[*k])
            .map(|k| self.watermarks[k])
            .min()
            .unwrap_or(WATERMARK_MAX)
    }

    /// Passes on the combined watermark when it advanced. When every input that has not
    /// ended is idle, the watermark moves to the maximum over all inputs (as Flink's
    /// `StatusWatermarkValve` does when its last active channel goes idle).
    fn advance(&mut self, input: usize, out: &mut Vec<(usize, Message)>) {
        let active = (0..self.inputs()).any(|k| !self.ended[k] && !self.idle[k]);
        let any_idle = (0..self.inputs()).any(|k| !self.ended[k] && self.idle[k]);
        let w = if active {
            self.min_watermark(None)
        } else if any_idle {
            self.watermarks
                .iter()
                .copied()
                .max()
                .unwrap_or(WATERMARK_MIN)
        } else {
            return;
        };
        if w > self.emitted && w < WATERMARK_MAX {
            self.emitted = w;
            out.push((input, Message::Watermark(w)));
        }
    }

    /// Passes the aligned barrier on once every live input delivered it, then the
    /// messages held behind it.
    fn release(&mut self, input: usize, out: &mut Vec<(usize, Message)>) {
        // Barriers complete in id order (every input sends them in that order).
        let mut released = false;
        while let Some((&id, got)) = self.barriers.iter().next() {
            if !(0..self.inputs()).all(|k| got[k] || self.ended[k]) {
                break;
            }
            self.barriers.remove(&id);
            out.push((input, Message::Barrier(id)));
            released = true;
            if self.align {
                break;
            }
        }
        if !self.align || !released {
            return;
        }
        let held: Vec<VecDeque<Message>> = self.blocked.iter_mut().map(std::mem::take).collect();
        for (held_input, queue) in held.into_iter().enumerate() {
            for msg in queue {
                self.push_tagged(held_input, msg, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::StreamBatch;
    use datafusion_common::arrow::array::{Int32Array, Int64Array, RecordBatch};
    use datafusion_common::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn data(v: i32, wm: i64) -> Message {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int32, false)]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(vec![v]))]).unwrap();
        Message::Data(StreamBatch {
            data: batch,
            row_watermarks: Some(Int64Array::from(vec![wm])),
            ops: None,
        })
    }

    fn describe(out: &[Message]) -> Vec<String> {
        out.iter()
            .map(|m| match m {
                Message::Data(b) => format!(
                    "row {} wm {}",
                    b.data
                        .column(0)
                        .as_any()
                        .downcast_ref::<Int32Array>()
                        .unwrap()
                        .value(0),
                    match b.watermark_at(0) {
                        WATERMARK_MIN => "min".to_string(),
                        w => w.to_string(),
                    }
                ),
                Message::Watermark(w) => format!("wm {w}"),
                Message::Barrier(id) => format!("barrier {id}"),
                Message::Idle => "idle".into(),
                Message::End => "end".into(),
            })
            .collect()
    }

    #[test]
    fn watermark_is_the_minimum_over_active_inputs() {
        let mut g = InputGate::new(2, true);
        let mut out = Vec::new();
        g.push(0, Message::Watermark(10), &mut out);
        g.push(1, Message::Watermark(5), &mut out);
        g.push(1, Message::Watermark(20), &mut out);
        // A row of input 0 (its own watermark 10) is judged by min(10, input 1's 20).
        g.push(0, data(1, 10), &mut out);
        // Input 0 idle: input 1 alone decides.
        g.push(0, Message::Idle, &mut out);
        g.push(1, Message::Watermark(30), &mut out);
        // Input 1 ends: input 0 (active again with data) decides.
        g.push(1, Message::End, &mut out);
        g.push(0, Message::Watermark(40), &mut out);
        g.push(0, Message::End, &mut out);
        assert_eq!(
            describe(&out),
            [
                "wm 5",
                "wm 10",
                "row 1 wm 10",
                "wm 20",
                "wm 30",
                "wm 40",
                "end"
            ]
        );
    }

    #[test]
    fn when_the_live_inputs_are_idle_the_watermark_moves_to_the_maximum() {
        let mut g = InputGate::new(2, true);
        let mut out = Vec::new();
        g.push(0, Message::Watermark(50), &mut out);
        g.push(0, Message::End, &mut out);
        g.push(1, Message::Idle, &mut out);
        g.push(1, data(3, 0), &mut out);
        assert_eq!(describe(&out), ["wm 50", "row 3 wm 0"]);
    }

    #[test]
    fn a_row_watermark_is_capped_by_the_other_inputs() {
        let mut g = InputGate::new(2, true);
        let mut out = Vec::new();
        g.push(1, Message::Watermark(3), &mut out);
        g.push(0, data(7, 50), &mut out);
        assert_eq!(describe(&out), ["row 7 wm 3"]);
    }

    #[test]
    fn exactly_once_aligns_barriers() {
        let mut g = InputGate::new(2, true);
        let mut out = Vec::new();
        g.push(0, Message::Barrier(1), &mut out);
        g.push(0, data(2, 0), &mut out); // after input 0's barrier: held
        g.push(1, data(1, 0), &mut out); // before input 1's barrier: processed
        g.push(1, Message::Barrier(1), &mut out);
        // Rows are capped by the other input's watermark (none yet: min).
        assert_eq!(
            describe(&out),
            ["row 1 wm min", "barrier 1", "row 2 wm min"]
        );
    }

    #[test]
    fn at_least_once_processes_rows_after_an_early_barrier() {
        let mut g = InputGate::new(2, false);
        let mut out = Vec::new();
        g.push(0, Message::Barrier(1), &mut out);
        g.push(0, data(2, 0), &mut out); // processed before the snapshot: replayed later
        g.push(1, data(1, 0), &mut out);
        g.push(1, Message::Barrier(1), &mut out);
        assert_eq!(
            describe(&out),
            ["row 2 wm min", "row 1 wm min", "barrier 1"]
        );
    }

    #[test]
    fn at_least_once_tracks_several_barriers_in_flight() {
        let mut g = InputGate::new(2, false);
        let mut out = Vec::new();
        g.push(0, Message::Barrier(1), &mut out);
        g.push(0, Message::Barrier(2), &mut out);
        g.push(1, Message::Barrier(1), &mut out);
        g.push(1, Message::Barrier(2), &mut out);
        assert_eq!(describe(&out), ["barrier 1", "barrier 2"]);
    }

    #[test]
    fn a_restored_watermark_caps_rows_from_below() {
        let mut g = InputGate::new(2, true);
        g.restore_watermark(40);
        let mut out = Vec::new();
        g.push(0, data(1, 50), &mut out); // input 1 has not sent yet: 40, not min
        g.push(1, Message::Watermark(30), &mut out); // below the restored one: ignored
        g.push(0, Message::Watermark(60), &mut out);
        g.push(1, Message::Watermark(45), &mut out);
        assert_eq!(describe(&out), ["row 1 wm 40", "wm 45"]);
    }

    #[test]
    fn an_ended_input_does_not_block_a_barrier() {
        let mut g = InputGate::new(2, true);
        let mut out = Vec::new();
        g.push(1, Message::End, &mut out);
        g.push(0, Message::Barrier(4), &mut out);
        g.push(0, Message::End, &mut out);
        assert_eq!(describe(&out), ["barrier 4", "end"]);
    }
}
