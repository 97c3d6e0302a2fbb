//! The few Kafka protocol requests that librdkafka does not expose, sent over a plain TCP
//! connection (Kafka protocol guide, <https://kafka.apache.org/protocol>; messages encoded
//! by the `kafka-protocol` crate):
//!
//! - [`end_transaction`]: commit (or abort) a transaction that another process opened, by
//!   its transactional id, producer id and epoch (EndTxn). A restore does this for the
//!   transactions its checkpoint pre-committed, whose producer died with the old process;
//!   Flink does the same through its `FlinkKafkaInternalProducer`, by reflection.
//! - [`init_producer_id`]: take a transactional id over (InitProducerId). The broker aborts
//!   the id's open transaction and fences its producer; a restore does this to every
//!   transactional id the job's earlier runs may have left open.
//! - [`Connection`]: one broker connection, with versions negotiated by ApiVersions; the
//!   tests also fetch a partition's raw log through it, with its transaction markers.
//!
//! Only `PLAINTEXT` brokers: no TLS, no SASL (the exactly-once sink refuses such
//! properties).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    ApiVersionsRequest, EndTxnRequest, FindCoordinatorRequest, InitProducerIdRequest,
    RequestHeader, ResponseHeader, TransactionalId,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use kafka_protocol::ResponseError;
use sluice_common::{Result, SluiceError};

/// How long one request may take on the wire.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a retriable error (coordinator loading or moving, a transaction still
/// completing) is retried.
const RETRY_FOR: Duration = Duration::from_secs(60);
/// The largest response accepted (bytes).
const MAX_RESPONSE: usize = 256 << 20;

// Kafka error codes (Kafka protocol guide, "Error Codes") this module acts on.
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const PRODUCER_FENCED: i16 = 90;

fn error(doing: &str, e: impl std::fmt::Display) -> SluiceError {
    SluiceError::Execution(format!("Kafka: {doing}: {e}"))
}

fn describe(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        Some(e) => format!("{e:?} (error {code}): {e}"),
        None => format!("error {code}"),
    }
}

/// One connection to a broker, with the API versions it supports.
pub struct Connection {
    stream: TcpStream,
    address: String,
    /// API key → (min, max) version the broker supports.
    versions: HashMap<i16, (i16, i16)>,
    correlation_id: i32,
}

impl Connection {
    /// Connects to the first reachable broker of `bootstrap` (`host:port,...`).
    ///
    /// # Errors
    /// No broker of the list answers an ApiVersions request.
    pub fn open(bootstrap: &str) -> Result<Connection> {
        let mut last = None;
        for address in bootstrap
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
        {
            match Self::open_one(address) {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| error("connecting", "no bootstrap servers")))
    }

    fn open_one(address: &str) -> Result<Connection> {
        let connecting = format!("connecting to {address}");
        let socket = address
            .to_socket_addrs()
            .map_err(|e| error(&connecting, e))?
            .next()
            .ok_or_else(|| error(&connecting, "no address"))?;
        let stream =
            TcpStream::connect_timeout(&socket, IO_TIMEOUT).map_err(|e| error(&connecting, e))?;
        stream
            .set_read_timeout(Some(IO_TIMEOUT))
            .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)))
            .and_then(|()| stream.set_nodelay(true))
            .map_err(|e| error(&connecting, e))?;
        let mut c = Connection {
            stream,
            address: address.to_string(),
            versions: HashMap::new(),
            correlation_id: 0,
        };
        // Version 0: every broker answers it.
        let response = c.send_version(&ApiVersionsRequest::default(), 0)?;
        if response.error_code != 0 {
            return Err(error(&connecting, describe(response.error_code)));
        }
        c.versions = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(c)
    }

    /// The broker this connection is to (`host:port`).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The highest version of request `R` that both the broker and this crate support, at
    /// most `cap`.
    ///
    /// # Errors
    /// The broker does not support `R` at any version at or below `cap`.
    pub fn version<R: Request>(&self, cap: i16) -> Result<i16> {
        let ours = R::VERSIONS;
        let (min, max) = self.versions.get(&R::KEY).copied().ok_or_else(|| {
            error(
                &format!("talking to {}", self.address),
                format!("the broker does not support API {}", R::KEY),
            )
        })?;
        let version = max.min(cap).min(ours.max);
        if version < min.max(ours.min) {
            return Err(error(
                &format!("talking to {}", self.address),
                format!(
                    "the broker supports API {} at versions {min}..={max}, Sluice at {}..={}",
                    R::KEY,
                    ours.min,
                    cap.min(ours.max)
                ),
            ));
        }
        Ok(version)
    }

    /// Sends `request` at `version` and reads its response.
    ///
    /// # Errors
    /// The request cannot be encoded at `version`, the connection fails, or the response
    /// does not decode.
    pub fn send_version<R: Request>(&mut self, request: &R, version: i16) -> Result<R::Response> {
        let doing = format!("request {} to {}", R::KEY, self.address);
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("sluice")));
        let mut buf = bytes::BytesMut::new();
        header
            .encode(&mut buf, R::header_version(version))
            .and_then(|()| request.encode(&mut buf, version))
            .map_err(|e| error(&doing, e))?;
        let length = i32::try_from(buf.len()).map_err(|e| error(&doing, e))?;
        self.stream
            .write_all(&length.to_be_bytes())
            .and_then(|()| self.stream.write_all(&buf))
            .map_err(|e| error(&doing, e))?;
        let mut length = [0u8; 4];
        self.stream
            .read_exact(&mut length)
            .map_err(|e| error(&doing, e))?;
        let length = usize::try_from(i32::from_be_bytes(length))
            .ok()
            .filter(|n| *n <= MAX_RESPONSE)
            .ok_or_else(|| error(&doing, "a response of a bad length"))?;
        let mut body = vec![0u8; length];
        self.stream
            .read_exact(&mut body)
            .map_err(|e| error(&doing, e))?;
        let mut body = bytes::Bytes::from(body);
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(version))
            .map_err(|e| error(&doing, e))?;
        if header.correlation_id != self.correlation_id {
            return Err(error(&doing, "a response to another request"));
        }
        R::Response::decode(&mut body, version).map_err(|e| error(&doing, e))
    }
}

/// A connection to the transaction coordinator of `transactional_id`.
fn coordinator(bootstrap: &str, transactional_id: &str) -> Result<Connection> {
    let mut c = Connection::open(bootstrap)?;
    let deadline = Instant::now() + RETRY_FOR;
    loop {
        let version = c.version::<FindCoordinatorRequest>(4)?;
        let id = StrBytes::from_string(transactional_id.to_string());
        let request = if version >= 4 {
            FindCoordinatorRequest::default()
                .with_key_type(1)
                .with_coordinator_keys(vec![id])
        } else {
            FindCoordinatorRequest::default()
                .with_key(id)
                .with_key_type(1)
        };
        let r = c.send_version(&request, version)?;
        let (code, host, port) = match r.coordinators.first() {
            Some(k) if version >= 4 => (k.error_code, k.host.to_string(), k.port),
            _ => (r.error_code, r.host.to_string(), r.port),
        };
        match code {
            0 => {
                let address = format!("{host}:{port}");
                return if address == c.address {
                    Ok(c)
                } else {
                    Connection::open(&address)
                };
            }
            COORDINATOR_LOAD_IN_PROGRESS | COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR
                if Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            code => {
                return Err(error(
                    &format!("finding the coordinator of transaction '{transactional_id}'"),
                    describe(code),
                ))
            }
        }
    }
}

/// Takes `transactional_id` over (InitProducerId): the broker aborts its open
/// transaction, if any, and fences its producer. Returns the new producer id and epoch;
/// epoch 0 means the id was never used before (or its state expired).
///
/// # Errors
/// The coordinator cannot be reached or refuses (a `transaction_timeout_ms` above the
/// broker's `transaction.max.timeout.ms`, for one).
pub fn init_producer_id(
    bootstrap: &str,
    transactional_id: &str,
    transaction_timeout_ms: i32,
) -> Result<(i64, i16)> {
    let (code, ids) = retrying(bootstrap, transactional_id, |c| {
        let version = c.version::<InitProducerIdRequest>(4)?;
        let mut request = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_string(
                transactional_id.to_string(),
            ))))
            .with_transaction_timeout_ms(transaction_timeout_ms);
        if version >= 3 {
            request = request
                .with_producer_id((-1).into())
                .with_producer_epoch(-1);
        }
        let r = c.send_version(&request, version)?;
        Ok((r.error_code, (r.producer_id.0, r.producer_epoch)))
    })?;
    match code {
        0 => Ok(ids),
        code => Err(error(
            &format!("taking over transactional id '{transactional_id}'"),
            describe(code),
        )),
    }
}

/// Sends a request to the transaction coordinator of `transactional_id` (`attempt`
/// returns the response's error code and value) until its error is not a retriable one:
/// the coordinator loading or not available, a transaction still completing
/// (`CONCURRENT_TRANSACTIONS`, as after the abort an InitProducerId starts), or the
/// coordinator moved (found again). Retries for [`RETRY_FOR`].
fn retrying<T>(
    bootstrap: &str,
    transactional_id: &str,
    mut attempt: impl FnMut(&mut Connection) -> Result<(i16, T)>,
) -> Result<(i16, T)> {
    let deadline = Instant::now() + RETRY_FOR;
    let mut c = coordinator(bootstrap, transactional_id)?;
    loop {
        let (code, value) = attempt(&mut c)?;
        match code {
            CONCURRENT_TRANSACTIONS | COORDINATOR_LOAD_IN_PROGRESS | COORDINATOR_NOT_AVAILABLE
                if Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            NOT_COORDINATOR if Instant::now() < deadline => {
                c = coordinator(bootstrap, transactional_id)?;
            }
            code => return Ok((code, value)),
        }
    }
}

/// How [`end_transaction`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The broker ended the transaction as asked (or had, with this producer epoch).
    Done,
    /// The broker no longer knows the transaction at this producer id and epoch: a newer
    /// producer took the transactional id over, or the transaction ended otherwise (timed
    /// out, or ended before). The reason, from the broker.
    Gone(String),
}

/// Commits (`commit`) or aborts the transaction that producer `producer_id` at
/// `producer_epoch` opened under `transactional_id` (EndTxn), from any process.
///
/// # Errors
/// The coordinator cannot be reached, or refuses for a reason other than those of
/// [`Ended::Gone`].
pub fn end_transaction(
    bootstrap: &str,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
) -> Result<Ended> {
    let doing = format!(
        "{} transaction '{transactional_id}' (producer {producer_id}, epoch {producer_epoch})",
        if commit { "committing" } else { "aborting" }
    );
    let (code, ()) = retrying(bootstrap, transactional_id, |c| {
        // Version 5 (transactions v2, KIP-890) changes how epochs move: not used.
        let version = c.version::<EndTxnRequest>(4)?;
        let request = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(
                transactional_id.to_string(),
            )))
            .with_producer_id(producer_id.into())
            .with_producer_epoch(producer_epoch)
            .with_committed(commit);
        Ok((c.send_version(&request, version)?.error_code, ()))
    })?;
    match code {
        0 => Ok(Ended::Done),
        INVALID_PRODUCER_EPOCH
        | PRODUCER_FENCED
        | INVALID_TXN_STATE
        | INVALID_PRODUCER_ID_MAPPING => Ok(Ended::Gone(describe(code))),
        code => Err(error(&doing, describe(code))),
    }
}
