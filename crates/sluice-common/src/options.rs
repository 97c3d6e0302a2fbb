//! Every option Sluice reads, declared once (the way DataFusion's `config_namespace!`
//! declares its settings): the session settings (`SET 'key' = 'value'`) and the `WITH
//! (...)` options of each connector and format, each with its kind of value, default and
//! description. `SET` checks the values of known keys ([`check_setting`]), a table's
//! options are checked when a query reads or writes it ([`check_table_options`]: an
//! unknown key is Flink's "Unsupported options found" error listing the supported ones),
//! and the shell's completion and README's option tables ([`markdown_table`]) are made
//! from these lists.

use std::collections::BTreeMap;

/// The kind of value an option takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Any text.
    Text,
    /// `true` or `false` (any case).
    Bool,
    /// A whole number from `min` to `max`.
    Int {
        /// Smallest value.
        min: i64,
        /// Largest value.
        max: i64,
    },
    /// A duration: milliseconds, `<n> ms|s|min|h|d` or ISO-8601 `PT..` ([`parse_duration_ms`]).
    Duration,
    /// One of these words (any case).
    Choice(&'static [&'static str]),
    /// One character (or `\t`).
    Char,
    /// A size in bytes: `<n>` or `<n> b|kb|mb|gb` ([`parse_memory_size`]).
    MemorySize,
}

/// One option.
#[derive(Debug, Clone, Copy)]
pub struct OptionDecl {
    /// The key; `#` stands for a column name (`fields.#.kind`).
    pub key: &'static str,
    /// Its kind of value.
    pub kind: Kind,
    /// The default, as text (`""`: none; the option is then off or required).
    pub default: &'static str,
    /// What it does.
    pub description: &'static str,
}

const fn opt(
    key: &'static str,
    kind: Kind,
    default: &'static str,
    description: &'static str,
) -> OptionDecl {
    OptionDecl {
        key,
        kind,
        default,
        description,
    }
}

const BOOL: Kind = Kind::Bool;
const TEXT: Kind = Kind::Text;
const DURATION: Kind = Kind::Duration;
const fn int(min: i64, max: i64) -> Kind {
    Kind::Int { min, max }
}

/// Whether `key` is an option declared as `pattern`: `#` matches one of `columns`, a last
/// `*` any non-empty rest (`properties.*`: client properties passed on as they are).
fn key_matches(pattern: &str, key: &str, columns: &[&str]) -> bool {
    if let Some(prefix) = pattern.strip_suffix('*') {
        return key.len() > prefix.len() && key.starts_with(prefix);
    }
    match pattern.split_once('#') {
        None => pattern == key,
        Some((before, after)) => key
            .strip_prefix(before)
            .and_then(|rest| rest.strip_suffix(after))
            .is_some_and(|column| columns.contains(&column)),
    }
}

impl OptionDecl {
    /// Whether `key` is this option (`#` matching one of `columns`).
    pub fn matches(&self, key: &str, columns: &[&str]) -> bool {
        key_matches(self.key, key, columns)
    }

    /// Checks `value` against the option's kind.
    ///
    /// # Errors
    /// A message naming the key, what it takes and the value found.
    pub fn check(&self, key: &str, value: &str) -> Result<(), String> {
        let v = value.trim();
        let ok = match self.kind {
            Kind::Text => true,
            Kind::Bool => v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false"),
            Kind::Int { min, max } => v.parse::<i64>().is_ok_and(|n| n >= min && n <= max),
            Kind::Duration => parse_duration_ms(v).is_ok(),
            // Any case, `-` and `_` alike (`EXACTLY_ONCE`, `exactly-once`).
            Kind::Choice(words) => {
                let norm = |w: &str| w.to_ascii_lowercase().replace('_', "-");
                words.iter().any(|w| norm(w) == norm(v))
            }
            Kind::Char => value == "\\t" || value.chars().count() == 1,
            Kind::MemorySize => parse_memory_size(v).is_ok(),
        };
        if ok {
            return Ok(());
        }
        Err(format!(
            "'{key}' must be {}, found '{value}'",
            self.kind.describe()
        ))
    }
}

impl Kind {
    /// What the kind takes, in words (`'true' or 'false'`).
    pub fn describe(&self) -> String {
        match self {
            Kind::Text => "text".into(),
            Kind::Bool => "'true' or 'false'".into(),
            Kind::Int { min, max } => format!("a whole number from {min} to {max}"),
            Kind::Duration => "a duration such as '10 s', '500ms', '5 min' or 'PT10S'".into(),
            Kind::Choice(words) => {
                let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
                format!("one of {}", quoted.join(", "))
            }
            Kind::Char => "a single character".into(),
            Kind::MemorySize => "a size such as '200b', '1 kb' or '64mb'".into(),
        }
    }
}

/// A duration in milliseconds: a plain number (ms), `<n> ms|s|min|h|d` (with or without
/// the space, long unit names too), or ISO-8601 `PT<n>H<n>M<n>S`, as Flink's durations.
///
/// # Errors
/// Anything else.
pub fn parse_duration_ms(value: &str) -> Result<i64, String> {
    let bad = || {
        format!(
            "a duration such as '10 s', '500ms', '5 min' or 'PT10S' was expected, found '{value}'"
        )
    };
    let t = value.trim().to_ascii_lowercase();
    if let Some(iso) = t.strip_prefix("pt") {
        let mut total = 0f64;
        let mut num = String::new();
        for ch in iso.chars() {
            match ch {
                '0'..='9' | '.' => num.push(ch),
                'h' | 'm' | 's' => {
                    let n: f64 = num.parse().map_err(|_| bad())?;
                    num.clear();
                    total += n * match ch {
                        'h' => 3_600_000.0,
                        'm' => 60_000.0,
                        _ => 1000.0,
                    };
                }
                _ => return Err(bad()),
            }
        }
        return if num.is_empty() {
            Ok(total as i64)
        } else {
            Err(bad())
        };
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| bad())?;
    let factor = match unit.trim() {
        "" | "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => 1.0,
        "s" | "sec" | "secs" | "second" | "seconds" => 1000.0,
        "min" | "mins" | "minute" | "minutes" => 60_000.0,
        "h" | "hour" | "hours" => 3_600_000.0,
        "d" | "day" | "days" => 86_400_000.0,
        _ => return Err(bad()),
    };
    Ok((n * factor) as i64)
}

/// A size in bytes, as Flink's `MemorySize` reads it: a number of bytes, or a number and
/// a unit `b`/`bytes`, `k`/`kb`/`kibibytes`, `m`/`mb`/`mebibytes`, `g`/`gb`/`gibibytes`
/// (powers of 1024; with or without a space; any case).
///
/// # Errors
/// Anything else, or a size above `u64::MAX`.
pub fn parse_memory_size(value: &str) -> Result<u64, String> {
    let bad = || format!("a size such as '200b', '1 kb' or '64mb' was expected, found '{value}'");
    let t = value.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim() {
        "" | "b" | "bytes" => 0,
        "k" | "kb" | "kibibytes" => 10,
        "m" | "mb" | "mebibytes" => 20,
        "g" | "gb" | "gibibytes" => 30,
        _ => return Err(bad()),
    };
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

/// The session settings (`SET 'key' = 'value'`; Flink's names where Flink has them).
pub const SESSION: &[OptionDecl] = &[
    opt("parallelism.default", int(1, 32_768), "1", "subtasks of each keyed operator and of sources that split"),
    opt("pipeline.max-parallelism", int(1, 32_768), "128", "key groups: the most subtasks a keyed operator can be rescaled to"),
    opt("pipeline.name", TEXT, "", "the job's name and its directory under the checkpoint dir (default `job-<plan fingerprint>`)"),
    opt("execution.checkpointing.interval", DURATION, "", "checkpoint every this long (off when not set)"),
    opt("execution.checkpointing.mode", Kind::Choice(&["EXACTLY_ONCE", "AT_LEAST_ONCE", "AT_MOST_ONCE"]), "EXACTLY_ONCE", "the result guarantee (README \"Checkpoints\"); `AT_MOST_ONCE` is ours"),
    opt("execution.checkpointing.dir", TEXT, "checkpoints", "where checkpoints go: a path, `file://`, `s3://bucket/prefix`, `memory://name`"),
    opt("state.checkpoints.dir", TEXT, "", "the same as `execution.checkpointing.dir` (Flink's older name)"),
    opt("execution.checkpointing.num-retained", int(1, 1_000_000), "3", "completed checkpoints kept; older and failed ones are deleted"),
    opt("execution.state-recovery.path", TEXT, "", "`latest` or a `chk-<id>` path to restore from (what `--from-checkpoint` sets)"),
    opt("execution.savepoint.path", TEXT, "", "the same as `execution.state-recovery.path` (Flink's older name)"),
    opt("restart-strategy.type", Kind::Choice(&["fixed-delay", "fixeddelay", "none", "disable", "off"]), "fixed-delay", "restart a failed job from its last checkpoint (`fixed-delay` when checkpointing)"),
    opt("restart-strategy", Kind::Choice(&["fixed-delay", "fixeddelay", "none", "disable", "off"]), "", "the same as `restart-strategy.type` (Flink's older name)"),
    opt("restart-strategy.fixed-delay.attempts", int(0, 1_000_000), "3", "restarts before the job fails with the cause"),
    opt("restart-strategy.fixed-delay.delay", DURATION, "1 s", "wait before each restart"),
    opt("table.exec.state.ttl", DURATION, "", "keys of updating aggregates and rows of regular joins idle this long (processing time) are forgotten"),
    opt("table.exec.source.idle-timeout", DURATION, "", "a source subtask without rows this long stops holding back the watermark"),
    opt("table.exec.source.cdc-events-duplicate", BOOL, "false", "change-data-capture events may repeat: deduplicate by the primary key"),
    opt("table.exec.sink.not-null-enforcer", Kind::Choice(&["ERROR", "DROP"]), "ERROR", "a NULL written into a NOT NULL sink column (declared, or a primary key's) fails the job, or drops its row"),
    opt("table.local-time-zone", TEXT, "the system's", "the session time zone (IANA name or offset) for TIMESTAMP_LTZ"),
    opt("sql-client.execution.result-mode", Kind::Choice(&["tableau", "changelog", "table"]), "tableau", "how the shell shows a query's result"),
];

/// A connector's options (every connector takes `connector`).
#[derive(Debug, Clone, Copy)]
pub struct ConnectorDecl {
    /// `'connector' = '<name>'`.
    pub name: &'static str,
    /// The keys that name a format, each with the prefix of that format's options:
    /// `("format", "")` for the filesystem (`'format' = 'csv'`, `'csv.header'`); Kafka's
    /// `("value.format", "value.")` (`'value.csv.field-delimiter'`). Empty: no format.
    pub formats: &'static [(&'static str, &'static str)],
    /// Its options besides `connector` and the format keys.
    pub options: &'static [OptionDecl],
    /// The metadata a `METADATA [FROM 'key']` column can read (and, if writable, write).
    pub metadata: &'static [MetadataDecl],
}

/// One metadata key of a connector (Flink docs, the connector's "Available Metadata").
#[derive(Debug, Clone, Copy)]
pub struct MetadataDecl {
    /// The key (`timestamp`, `partition`, ...).
    pub key: &'static str,
    /// Its Flink type, as the connector produces it.
    pub flink_type: &'static str,
    /// An `INSERT` can write it (a read-only key's column must be `VIRTUAL` in a table
    /// that is written to).
    pub writable: bool,
    /// What it holds.
    pub description: &'static str,
}

const fn meta(
    key: &'static str,
    flink_type: &'static str,
    writable: bool,
    description: &'static str,
) -> MetadataDecl {
    MetadataDecl {
        key,
        flink_type,
        writable,
        description,
    }
}

/// Kafka's metadata (Flink docs, "Apache Kafka SQL Connector", "Available Metadata").
const KAFKA_METADATA: &[MetadataDecl] = &[
    meta("topic", "STRING NOT NULL", false, "the message's topic"),
    meta(
        "partition",
        "INT NOT NULL",
        false,
        "the message's partition",
    ),
    meta(
        "headers",
        "MAP<STRING, BYTES> NOT NULL",
        true,
        "the message's headers",
    ),
    meta(
        "leader-epoch",
        "INT NULL",
        false,
        "the epoch of the partition leader that wrote the message (NULL when the broker does not say)",
    ),
    meta(
        "offset",
        "BIGINT NOT NULL",
        false,
        "the message's offset in its partition",
    ),
    meta(
        "timestamp",
        "TIMESTAMP_LTZ(3) NOT NULL",
        true,
        "the message's timestamp",
    ),
    meta(
        "timestamp-type",
        "STRING NOT NULL",
        false,
        "`NoTimestampType`, `CreateTime` or `LogAppendTime`",
    ),
];

/// The option that tells a connector a physical column is a metadata column (set by the
/// planner, never by users): `sluice.metadata.<column>` = `<key>`.
pub const METADATA_OPTION_PREFIX: &str = "sluice.metadata.";

/// The connector's metadata keys (none for an unknown connector).
pub fn metadata_keys(connector: &str) -> &'static [MetadataDecl] {
    CONNECTORS
        .iter()
        .find(|c| c.name == connector)
        .map_or(&[], |c| c.metadata)
}

/// A format's options (keys start with `<name>.`).
#[derive(Debug, Clone, Copy)]
pub struct FormatDecl {
    /// `'format' = '<name>'`.
    pub name: &'static str,
    /// The connectors that take it (empty: every connector with a format).
    pub connectors: &'static [&'static str],
    /// Its options.
    pub options: &'static [OptionDecl],
}

impl FormatDecl {
    /// Whether `connector` takes this format.
    pub fn serves(&self, connector: &str) -> bool {
        self.connectors.is_empty() || self.connectors.contains(&connector)
    }
}

const LOOKUP: &[OptionDecl] = &[
    opt(
        "lookup.cache",
        Kind::Choice(&["NONE", "PARTIAL", "FULL"]),
        "NONE",
        "a lookup join's cache of this table",
    ),
    opt(
        "lookup.partial-cache.max-rows",
        int(1, i64::MAX),
        "",
        "rows the partial cache holds",
    ),
    opt(
        "lookup.partial-cache.expire-after-write",
        DURATION,
        "",
        "a cached row expires this long after it was loaded",
    ),
    opt(
        "lookup.partial-cache.expire-after-access",
        DURATION,
        "",
        "a cached row expires this long after it was last read",
    ),
    opt(
        "lookup.partial-cache.cache-missing-key",
        BOOL,
        "true",
        "cache that a key has no row",
    ),
    opt(
        "lookup.full-cache.reload-strategy",
        Kind::Choice(&["PERIODIC", "TIMED"]),
        "PERIODIC",
        "when the full cache reloads",
    ),
    opt(
        "lookup.full-cache.periodic-reload.interval",
        DURATION,
        "",
        "reload the full cache this often",
    ),
];

/// The connectors.
pub const CONNECTORS: &[ConnectorDecl] = &[
    ConnectorDecl {
        name: "filesystem",
        formats: &[("format", "")],
        metadata: &[],
        options: &[
            opt(
                "path",
                TEXT,
                "",
                "a file or directory (required); relative to the working directory",
            ),
            opt(
                "scan.parallelism",
                int(1, 1024),
                "parallelism.default",
                "source subtasks splitting the files",
            ),
            opt(
                "sink.delivery-guarantee",
                Kind::Choice(&["exactly-once", "at-least-once", "none"]),
                "exactly-once",
                "`at-least-once`: write part files directly (no two-phase commit)",
            ),
            opt("partition.default-name", TEXT, "__DEFAULT_PARTITION__", "the partition directory of a NULL or empty `PARTITIONED BY` value"),
            opt("sink.partition-commit.policy.kind", Kind::Choice(&["success-file"]), "", "commit a complete partition by writing a success file into it (none when not set)"),
            opt("sink.partition-commit.success-file.name", TEXT, "_SUCCESS", "the success file's name"),
            opt("sink.partition-commit.trigger", Kind::Choice(&["process-time", "partition-time"]), "process-time", "a partition is complete when the processing time, or the watermark, passed its time + the delay"),
            opt("sink.partition-commit.delay", DURATION, "0 s", "how long after its time a partition is complete"),
            opt("partition.time-extractor.kind", Kind::Choice(&["default"]), "default", "how a partition's time is read from its values"),
            opt("partition.time-extractor.timestamp-pattern", TEXT, "", "the partition's time from its values, e.g. `$dt $hm:00` (default: the first value)"),
            opt("partition.time-extractor.timestamp-formatter", Kind::Choice(&["yyyy-MM-dd HH:mm:ss"]), "yyyy-MM-dd HH:mm:ss", "how that time reads (a date alone is midnight)"),
            opt("sink.rolling-policy.file-size", TEXT, "", "accepted for Flink's DDL: Sluice rolls a part file at each checkpoint (and at the end)"),
            opt("sink.rolling-policy.rollover-interval", DURATION, "", "accepted for Flink's DDL: Sluice rolls a part file at each checkpoint"),
            opt("sink.rolling-policy.check-interval", DURATION, "", "accepted for Flink's DDL: Sluice rolls a part file at each checkpoint"),
            opt("sink.rolling-policy.inactivity-interval", DURATION, "", "accepted for Flink's DDL: Sluice rolls a part file at each checkpoint"),
            LOOKUP[0],
            LOOKUP[1],
            LOOKUP[2],
            LOOKUP[3],
            LOOKUP[4],
            LOOKUP[5],
            LOOKUP[6],
        ],
    },
    ConnectorDecl {
        name: "datagen",
        formats: &[],
        metadata: &[],
        options: &[
            opt(
                "number-of-rows",
                int(0, i64::MAX),
                "",
                "rows to generate (unbounded when not set)",
            ),
            opt(
                "rows-per-second",
                int(1, i64::MAX),
                "",
                "pace (unpaced when not set)",
            ),
            opt(
                "seed",
                int(i64::MIN, i64::MAX),
                "",
                "seed of the random values (reproducible runs)",
            ),
            opt(
                "fields.#.kind",
                Kind::Choice(&["random", "sequence"]),
                "random",
                "how column # is generated",
            ),
            opt(
                "fields.#.min",
                TEXT,
                "",
                "smallest random value of column #",
            ),
            opt("fields.#.max", TEXT, "", "largest random value of column #"),
            opt(
                "fields.#.start",
                TEXT,
                "",
                "first value of a sequence column #",
            ),
            opt(
                "fields.#.end",
                TEXT,
                "",
                "last value of a sequence column #",
            ),
            opt(
                "fields.#.length",
                int(0, i64::MAX),
                "",
                "length of random strings of column #",
            ),
            opt(
                "fields.#.max-past",
                DURATION,
                "",
                "random timestamps of column # reach this far into the past",
            ),
        ],
    },
    ConnectorDecl {
        name: "nexmark",
        formats: &[],
        metadata: &[],
        options: &[
            opt("events.num", int(0, i64::MAX), "0", "events to generate, persons, auctions and bids together (0: unbounded)"),
            opt("first-event.rate", int(1, i64::MAX), "10000", "events per second of event time (spaces the events' `dateTime`)"),
            opt("next-event.rate", int(1, i64::MAX), "first-event.rate", "must equal `first-event.rate` (a changing rate is not supported yet)"),
            opt("rate.shape", Kind::Choice(&["square", "sine"]), "square", "accepted for Flink's DDL (one rate: no effect)"),
            opt("rate.period", DURATION, "600 s", "accepted for Flink's DDL (one rate: no effect)"),
            opt("rate.limited", BOOL, "false", "pace the events in wall-clock time as their `dateTime`s are spaced (otherwise as fast as they are generated)"),
            opt("person.proportion", int(1, 1000), "1", "persons among every `person + auction + bid` proportion events"),
            opt("auction.proportion", int(1, 1000), "3", "auctions among them"),
            opt("bid.proportion", int(1, 1000), "46", "bids among them"),
            opt("person.avg-size", Kind::MemorySize, "200b", "average size of a person (its `extra` pads it; at most 1 mb)"),
            opt("auction.avg-size", Kind::MemorySize, "500b", "average size of an auction"),
            opt("bid.avg-size", Kind::MemorySize, "100b", "average size of a bid"),
            opt("bid.hot-ratio.auctions", int(1, i64::MAX), "2", "bids on hot auctions per bid on another"),
            opt("bid.hot-ratio.bidders", int(1, i64::MAX), "4", "bids by hot bidders per bid by another"),
            opt("auction.hot-ratio.sellers", int(1, i64::MAX), "4", "auctions of hot sellers per auction of another"),
            opt("base-time", TEXT, "2015-07-15 00:00:00", "ours: the first event's `dateTime` (UTC), fixed so that every run and every replay generates the same events"),
            opt("out-of-order.group-size", int(1, i64::MAX), "1", "ours: events are shuffled in groups of this many (1: in order)"),
            opt("keep-alive", BOOL, "false", "accepted for Flink's DDL: the source ends after `events.num` events"),
            opt("stop-at", int(-1, i64::MAX), "-1", "accepted for Flink's DDL (no effect)"),
            opt("max-emit-speed", BOOL, "true", "accepted for Flink's DDL (no effect)"),
            opt("scan.parallelism", int(1, 1024), "1", "source subtasks, each generating every n-th event"),
        ],
    },
    ConnectorDecl {
        name: "kafka",
        formats: &[("format", ""), ("value.format", "value."), ("key.format", "key.")],
        metadata: KAFKA_METADATA,
        options: &[
            opt("topic", TEXT, "", "topic(s) to read, separated by `;`; the topic to write"),
            opt("topic-pattern", TEXT, "", "read every topic whose name matches this regular expression (instead of `topic`)"),
            opt("properties.bootstrap.servers", TEXT, "", "the brokers, `host:port,...` (required)"),
            opt("properties.group.id", TEXT, "", "the consumer group: its committed offsets are read by `group-offsets` and written when a checkpoint completes"),
            opt("properties.*", TEXT, "", "any other client property, passed to librdkafka as it is (`properties.isolation.level`, `properties.auto.offset.reset`, `properties.transaction.timeout.ms`, ...)"),
            opt("key.fields", TEXT, "", "columns that make the message key, separated by `;` (with `key.format`)"),
            opt("key.fields-prefix", TEXT, "", "prefix of the key columns' names that the key format does not see"),
            opt("value.fields-include", Kind::Choice(&["ALL", "EXCEPT_KEY"]), "ALL", "whether the value holds the key columns too"),
            opt("scan.startup.mode", Kind::Choice(&["earliest-offset", "latest-offset", "group-offsets", "timestamp", "specific-offsets"]), "group-offsets", "where reading starts (a restore starts at the checkpoint's offsets)"),
            opt("scan.startup.specific-offsets", TEXT, "", "`partition:0,offset:42;partition:1,offset:300` for `specific-offsets` (other partitions: the group's offset, else the earliest)"),
            opt("scan.startup.timestamp-millis", int(0, i64::MAX), "", "for `timestamp`: the first message at or after this time (ms since the epoch)"),
            opt("scan.bounded.mode", Kind::Choice(&["unbounded", "latest-offset", "group-offsets", "timestamp", "specific-offsets"]), "unbounded", "where reading ends: never, or the offsets of that kind when the job starts"),
            opt("scan.bounded.specific-offsets", TEXT, "", "end offsets (exclusive) for `specific-offsets`, as `scan.startup.specific-offsets`"),
            opt("scan.bounded.timestamp-millis", int(0, i64::MAX), "", "for `timestamp`: end before the first message at or after this time (ms)"),
            opt("scan.topic-partition-discovery.interval", DURATION, "5 min", "how often new partitions (and topics of `topic-pattern`) are looked for; `0` never"),
            opt("scan.parallelism", int(1, 1024), "1", "source subtasks; partitions are spread over them as Flink spreads them"),
            opt("sink.partitioner", TEXT, "default", "`default` (by key hash, murmur2 as Kafka's Java client; no key: sticky), `fixed` (subtask i writes partition i mod n), `round-robin`"),
            opt("sink.delivery-guarantee", Kind::Choice(&["none", "at-least-once", "exactly-once"]), "at-least-once", "`at-least-once`: every message acknowledged at each checkpoint; `none`: not waited for; `exactly-once`: a Kafka transaction per checkpoint, committed when it completes"),
            opt("sink.semantic", Kind::Choice(&["none", "at-least-once", "exactly-once"]), "", "Flink's older name of `sink.delivery-guarantee` (used when that is not set)"),
            opt("sink.transactional-id-prefix", TEXT, "", "required by `exactly-once`: its transactional ids are `<prefix>-<subtask>-<checkpoint>` (unique to the job)"),
            opt("sink.parallelism", int(1, 1024), "", "accepted for Flink's DDL (the sink runs in its input's subtasks)"),
        ],
    },
    ConnectorDecl {
        name: "upsert-kafka",
        formats: &[("value.format", "value."), ("key.format", "key.")],
        metadata: KAFKA_METADATA,
        options: &[
            opt("topic", TEXT, "", "the topic read and written (one)"),
            opt("properties.bootstrap.servers", TEXT, "", "the brokers, `host:port,...` (required)"),
            opt("properties.*", TEXT, "", "any other client property, passed to librdkafka as it is"),
            opt("key.fields-prefix", TEXT, "", "prefix of the key columns' names that the key format does not see"),
            opt("value.fields-include", Kind::Choice(&["ALL", "EXCEPT_KEY"]), "ALL", "whether the value holds the primary key columns too"),
            opt("scan.bounded.mode", Kind::Choice(&["unbounded", "latest-offset", "timestamp", "specific-offsets"]), "unbounded", "where reading ends, as for `kafka` (reading starts at the earliest offset)"),
            opt("scan.bounded.specific-offsets", TEXT, "", "end offsets for `specific-offsets`: `partition:0,offset:42;...`"),
            opt("scan.bounded.timestamp-millis", int(0, i64::MAX), "", "for `timestamp`: end before the first message at or after this time (ms)"),
            opt("scan.topic-partition-discovery.interval", DURATION, "5 min", "how often new partitions are looked for; `0` never"),
            opt("scan.parallelism", int(1, 1024), "1", "source subtasks; partitions are spread over them as for `kafka`"),
            opt("sink.delivery-guarantee", Kind::Choice(&["none", "at-least-once", "exactly-once"]), "at-least-once", "as for `kafka`"),
            opt("sink.transactional-id-prefix", TEXT, "", "required by `exactly-once`: its transactional ids are `<prefix>-<subtask>-<checkpoint>` (unique to the job)"),
            opt("sink.buffer-flush.max-rows", int(0, i64::MAX), "0", "accepted for Flink's DDL: every change is written (Flink may fold changes of a key in a buffer first; the last value per key is the same)"),
            opt("sink.buffer-flush.interval", DURATION, "0", "accepted for Flink's DDL (see `sink.buffer-flush.max-rows`)"),
            opt("sink.parallelism", int(1, 1024), "", "accepted for Flink's DDL (the sink runs in its input's subtasks)"),
        ],
    },
    ConnectorDecl {
        name: "channel",
        formats: &[],
        metadata: &[],
        options: &[],
    },
    ConnectorDecl {
        name: "print",
        formats: &[],
        metadata: &[],
        options: &[opt(
            "print-identifier",
            TEXT,
            "",
            "prefix of each printed row",
        )],
    },
    ConnectorDecl {
        name: "blackhole",
        formats: &[],
        metadata: &[],
        options: &[],
    },
];

/// The formats of the `filesystem` connector.
pub const FORMATS: &[FormatDecl] = &[
    FormatDecl {
        name: "csv",
        connectors: &[],
        options: &[
            opt(
                "csv.field-delimiter",
                Kind::Char,
                ",",
                "field separator (`\\t` for a tab)",
            ),
            opt("csv.quote-character", Kind::Char, "\"", "quote character"),
            opt(
                "csv.null-literal",
                TEXT,
                "",
                "text read as NULL (besides the empty field)",
            ),
            opt(
                "csv.ignore-parse-errors",
                BOOL,
                "false",
                "skip (and count) lines that do not parse instead of failing",
            ),
            opt(
                "csv.array-element-delimiter",
                TEXT,
                ";",
                "separates the elements of an ARRAY and the fields of a ROW in one field",
            ),
            opt(
                "csv.header",
                BOOL,
                "",
                "the first line is a header (default: taken as one when it names the columns)",
            ),
        ],
    },
    FormatDecl {
        name: "json",
        connectors: &[],
        options: &[
            opt(
                "json.ignore-parse-errors",
                BOOL,
                "false",
                "skip (and count) lines that do not parse instead of failing",
            ),
            opt(
                "json.fail-on-missing-field",
                BOOL,
                "false",
                "Flink's option; only `false` (a missing field is NULL) is built",
            ),
            opt(
                "json.timestamp-format.standard",
                Kind::Choice(&["SQL", "ISO-8601"]),
                "SQL",
                "timestamps are read in either spelling; written as `SQL` (`2024-01-01 10:00:00.5`): only `SQL` is built",
            ),
            opt(
                "json.map-null-key.mode",
                Kind::Choice(&["FAIL", "DROP", "LITERAL"]),
                "FAIL",
                "accepted for Flink's DDL: a map cannot hold a NULL key here, so there is none to write",
            ),
            opt(
                "json.map-null-key.literal",
                TEXT,
                "null",
                "accepted for Flink's DDL (see `json.map-null-key.mode`)",
            ),
            opt(
                "json.encode.decimal-as-plain-number",
                BOOL,
                "false",
                "accepted for Flink's DDL: decimals are written as plain numbers",
            ),
        ],
    },
    FormatDecl {
        name: "raw",
        connectors: &["kafka", "upsert-kafka"],
        options: &[
            opt(
                "raw.charset",
                TEXT,
                "UTF-8",
                "the charset of a `STRING` column (Kafka tables; UTF-8 only)",
            ),
            opt(
                "raw.endianness",
                Kind::Choice(&["big-endian", "little-endian"]),
                "big-endian",
                "the byte order of a numeric column",
            ),
        ],
    },
    FormatDecl {
        name: "debezium-json",
        connectors: &[],
        options: &[
            opt(
                "debezium-json.ignore-parse-errors",
                BOOL,
                "false",
                "skip (and count) events that do not parse instead of failing",
            ),
            opt(
                "debezium-json.schema-include",
                BOOL,
                "false",
                "each event is Kafka Connect's `{\"schema\": ..., \"payload\": <event>}`",
            ),
        ],
    },
    FormatDecl {
        name: "canal-json",
        connectors: &[],
        options: &[
            opt(
                "canal-json.ignore-parse-errors",
                BOOL,
                "false",
                "skip (and count) events that do not parse instead of failing",
            ),
            opt(
                "canal-json.database.include",
                TEXT,
                "",
                "read only events of databases matching this regular expression",
            ),
            opt(
                "canal-json.table.include",
                TEXT,
                "",
                "read only events of tables matching this regular expression",
            ),
        ],
    },
];

/// Checks a session setting: a known key's value must be of its kind.
///
/// # Errors
/// The key's message ([`OptionDecl::check`]).
pub fn check_setting(key: &str, value: &str) -> Result<(), String> {
    match SESSION.iter().find(|d| d.key == key) {
        Some(d) => d.check(key, value),
        None => Ok(()),
    }
}

/// Whether Sluice reads the session setting `key` (test settings `sluice.test.*` too).
pub fn is_known_setting(key: &str) -> bool {
    key.starts_with("sluice.test.") || SESSION.iter().any(|d| d.key == key)
}

/// Checks a table's `WITH` options (Flink validates them when a query uses the table):
/// `connector` is known, `format` is one of the connector's, every key is one the
/// connector or format declares (`#` a column of the table), and each value is of its kind.
///
/// # Errors
/// For unknown keys Flink's message: `Unsupported options found for 'filesystem'.`, then the
/// unsupported and the supported options, one per line.
pub fn check_table_options(
    table: &str,
    options: &BTreeMap<String, String>,
    columns: &[&str],
) -> crate::Result<()> {
    use crate::SluiceError;
    let Some(name) = options.get("connector") else {
        return Err(SluiceError::Config(format!(
            "table '{table}' needs the option 'connector'"
        )));
    };
    let Some(connector) = CONNECTORS.iter().find(|c| c.name == name) else {
        let known: Vec<&str> = CONNECTORS.iter().map(|c| c.name).collect();
        return Err(SluiceError::NotSupported(format!(
            "'connector' = '{name}' of table '{table}' (supported: {})",
            known.join(", ")
        )));
    };
    // Format options carry their slot's prefix (`value.json.ignore-parse-errors`).
    let mut decls: Vec<(String, &OptionDecl)> = connector
        .options
        .iter()
        .map(|d| (d.key.to_string(), d))
        .collect();
    for (format_key, prefix) in connector.formats {
        let Some(format) = options.get(*format_key) else {
            continue;
        };
        match FORMATS.iter().find(|f| f.name == format && f.serves(name)) {
            Some(f) => decls.extend(f.options.iter().map(|d| (format!("{prefix}{}", d.key), d))),
            None => {
                let known: Vec<String> = FORMATS
                    .iter()
                    .filter(|f| f.serves(name))
                    .map(|f| format!("'{}'", f.name))
                    .collect();
                return Err(SluiceError::NotSupported(format!(
                    "'{format_key}' = '{format}' of table '{table}' (supported: {})",
                    known.join(", ")
                )));
            }
        }
    }
    let mut unsupported = Vec::new();
    for (key, value) in options {
        if key == "connector" || connector.formats.iter().any(|(k, _)| k == key) {
            continue;
        }
        let found = decls.iter().find(|(k, _)| key_matches(k, key, columns));
        match found {
            Some((_, d)) => d
                .check(key, value)
                .map_err(|m| SluiceError::Config(format!("{m} (table '{table}')")))?,
            None => unsupported.push(key.as_str()),
        }
    }
    if unsupported.is_empty() {
        return Ok(());
    }
    let mut supported: Vec<String> = vec!["connector".into()];
    supported.extend(connector.formats.iter().map(|(k, _)| k.to_string()));
    supported.extend(decls.iter().map(|(k, _)| k.replace('#', "<column>")));
    supported.sort();
    Err(SluiceError::Config(format!(
        "Unsupported options found for '{name}' (table '{table}').\n\nUnsupported options:\n\n{}\n\nSupported options:\n\n{}",
        unsupported.join("\n"),
        supported.join("\n")
    )))
}

/// Every table option key (for completion): each connector's and format's, without the
/// per-column patterns.
pub fn table_keys() -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = vec!["connector"];
    for c in CONNECTORS {
        keys.extend(c.formats.iter().map(|(k, _)| *k));
        keys.extend(c.options.iter().map(|d| d.key));
    }
    for f in FORMATS {
        keys.extend(f.options.iter().map(|d| d.key));
    }
    keys.retain(|k| !k.contains('#') && !k.ends_with('*'));
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// A markdown table of `options`: key, default, what it takes, description.
pub fn markdown_table(options: &[OptionDecl]) -> String {
    let mut out = String::from("| option | default | value | description |\n|---|---|---|---|\n");
    for d in options {
        let default = if d.default.is_empty() {
            String::new()
        } else {
            format!("`{}`", d.default)
        };
        out.push_str(&format!(
            "| `{}` | {default} | {} | {} |\n",
            d.key.replace('#', "<column>"),
            d.kind.describe().replace('|', "\\|"),
            d.description
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_misspelt_option_lists_the_supported_ones() {
        let err = check_table_options(
            "t",
            &options(&[
                ("connector", "filesystem"),
                ("path", "x"),
                ("format", "csv"),
                ("csv.heade", "true"),
            ]),
            &["a"],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("Unsupported options found for 'filesystem' (table 't')."),
            "{err}"
        );
        assert!(err.contains("Unsupported options:\n\ncsv.heade\n"), "{err}");
        assert!(err.contains("\ncsv.header\n"), "{err}");
    }

    #[test]
    fn column_patterns_and_values_are_checked() {
        let ok = options(&[("connector", "datagen"), ("fields.a.kind", "sequence")]);
        assert!(check_table_options("t", &ok, &["a"]).is_ok());
        assert!(check_table_options("t", &ok, &["b"]).is_err());
        let bad = options(&[("connector", "datagen"), ("fields.a.kind", "sorted")]);
        let err = check_table_options("t", &bad, &["a"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("'fields.a.kind' must be one of 'random', 'sequence'"),
            "{err}"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("10 s"), Ok(10_000));
        assert_eq!(parse_duration_ms("PT1M30S"), Ok(90_000));
        assert_eq!(parse_duration_ms("250"), Ok(250));
        assert!(parse_duration_ms("soon").is_err());
    }
}
