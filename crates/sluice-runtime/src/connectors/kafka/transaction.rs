//! Kafka transactions of an exactly-once sink (`'sink.delivery-guarantee' =
//! 'exactly-once'`; Flink docs, "Kafka SQL Connector", "Consistency guarantees"; Flink's
//! `KafkaSink` with `DeliveryGuarantee.EXACTLY_ONCE`):
//!
//! - Each sink subtask writes every checkpoint interval in its own transaction, under the
//!   transactional id [`transactional_id`] `<prefix>-<subtask>-<checkpoint>` (Flink's
//!   naming), with its own librdkafka producer. At a barrier the sink flushes (pre-commit),
//!   hands the producer to this module's registry and returns a [`KafkaTransaction`] (the
//!   id, producer id and epoch) that the checkpoint keeps; the next checkpoint's
//!   transaction opens at once, before this one commits.
//! - When the checkpoint completes, [`KafkaTransaction::commit`] commits through the live
//!   producer; after a failure, when the producer is gone with its process, through an
//!   EndTxn request of its own ([`super::protocol::end_transaction`]).
//! - A restore (or a fresh start) first takes over every transactional id the job's
//!   earlier runs may have left open ([`abort_lingering`]): InitProducerId on each makes
//!   the broker abort its transaction, as Flink's `TransactionAborter` does.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::producer::{BaseProducer, Producer};
use serde::{Deserialize, Serialize};
use sluice_common::{Result, SluiceError};

use super::protocol::{self, Ended};
use super::sink::SinkClient;
use crate::checkpoint::coordinator::warn;

/// How long librdkafka may take to commit (it flushes first, and retries).
const COMMIT_TIMEOUT: Duration = Duration::from_secs(120);

/// The transactional id of `subtask`'s transaction for checkpoint `checkpoint` (Flink's
/// `TransactionalIdFactory`: `<prefix>-<subtask>-<checkpoint>`).
pub fn transactional_id(prefix: &str, subtask: usize, checkpoint: u64) -> String {
    format!("{prefix}-{subtask}-{checkpoint}")
}

/// A pre-committed Kafka transaction: flushed, every message acknowledged, not yet
/// committed. Serialized in checkpoint manifests (`{"sink": "kafka", ...}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaTransaction {
    /// The brokers to reach its coordinator through (`host:port,...`).
    pub bootstrap_servers: String,
    /// `<prefix>-<subtask>-<checkpoint>` ([`transactional_id`]).
    pub transactional_id: String,
    /// The producer id the broker gave the transaction's producer (InitProducerId).
    pub producer_id: i64,
    /// Its epoch: a later InitProducerId of the same transactional id fences it.
    pub producer_epoch: i16,
    /// The table it wrote (for messages).
    pub table: String,
}

/// A producer whose transaction was pre-committed, kept until it commits.
struct Live {
    producer: BaseProducer<SinkClient>,
    producer_id: i64,
    producer_epoch: i16,
}

/// The pre-committed transactions of this process, by transactional id.
static LIVE: Mutex<BTreeMap<String, Live>> = Mutex::new(BTreeMap::new());

fn live() -> std::sync::MutexGuard<'static, BTreeMap<String, Live>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

impl KafkaTransaction {
    /// Keeps `producer` (whose transaction this is) until [`Self::commit`].
    pub(crate) fn hold(&self, producer: BaseProducer<SinkClient>) {
        live().insert(
            self.transactional_id.clone(),
            Live {
                producer,
                producer_id: self.producer_id,
                producer_epoch: self.producer_epoch,
            },
        );
    }

    /// Commits the transaction: through its producer if this process holds it, else with
    /// an EndTxn request. Idempotent: a transaction committed before commits again without
    /// effect. A transaction the broker no longer has (it timed out, or a newer producer
    /// took the id over) cannot be committed: a warning says its messages may be lost, and
    /// the job goes on (as Flink's `KafkaCommitter` does).
    ///
    /// # Errors
    /// The broker cannot be reached or refuses the commit.
    pub fn commit(&self) -> Result<()> {
        let held = live().remove(&self.transactional_id);
        if let Some(l) = held.filter(|l| {
            (l.producer_id, l.producer_epoch) == (self.producer_id, self.producer_epoch)
        }) {
            return l.producer.commit_transaction(COMMIT_TIMEOUT).map_err(|e| {
                super::kafka_error(
                    &self.table,
                    &format!("committing transaction '{}'", self.transactional_id),
                    e,
                )
            });
        }
        match protocol::end_transaction(
            &self.bootstrap_servers,
            &self.transactional_id,
            self.producer_id,
            self.producer_epoch,
            true,
        )
        .map_err(|e| SluiceError::Execution(format!("Kafka table '{}': {e}", self.table)))?
        {
            Ended::Done => {}
            Ended::Gone(reason) => warn(&format!(
                "Kafka table '{}': transaction '{}' (producer {}, epoch {}) could not be \
                 committed: {reason}. Either it was committed before, or it timed out \
                 ('properties.transaction.timeout.ms' shorter than the checkpoint interval \
                 plus the downtime) or another job took its transactional id over: then its \
                 messages are lost",
                self.table, self.transactional_id, self.producer_id, self.producer_epoch
            )),
        }
        Ok(())
    }
}

/// Aborts every transaction the sink's earlier runs may have left open: for each subtask
/// below `subtasks`, the transactional ids of checkpoints `from`, `from + 1`, ... up to at
/// least `through`, and on until an id the broker never saw (it answers InitProducerId
/// with epoch 0). Producers this process holds for them are dropped.
///
/// # Errors
/// The broker cannot be reached or refuses InitProducerId.
pub fn abort_lingering(
    bootstrap: &str,
    prefix: &str,
    subtasks: usize,
    from: u64,
    through: u64,
    transaction_timeout_ms: i32,
) -> Result<()> {
    for subtask in 0..subtasks {
        let mut checkpoint = from;
        loop {
            let id = transactional_id(prefix, subtask, checkpoint);
            drop(live().remove(&id));
            let (_, epoch) = protocol::init_producer_id(bootstrap, &id, transaction_timeout_ms)?;
            if checkpoint >= through && epoch == 0 {
                break;
            }
            checkpoint += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_round_trips_through_the_manifest_form() {
        let t = crate::connectors::commit::PendingCommit::Kafka(KafkaTransaction {
            bootstrap_servers: "127.0.0.1:9094".into(),
            transactional_id: transactional_id("job", 2, 17),
            producer_id: 4001,
            producer_epoch: 3,
            table: "out".into(),
        });
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["sink"], "kafka");
        assert_eq!(json["transactional_id"], "job-2-17");
        let back: crate::connectors::commit::PendingCommit = serde_json::from_value(json).unwrap();
        assert_eq!(back, t);
    }
}
