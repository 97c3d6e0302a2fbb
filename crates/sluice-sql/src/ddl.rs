//! Table definitions made from others (Flink SQL "CREATE Statements > CREATE TABLE"):
//! `CREATE TABLE t (...) WITH (...) LIKE source (<like options>)` merges the source's
//! definition with the new one; `CREATE TABLE t WITH (...) AS SELECT ...` (CTAS) takes its
//! columns from the query; `ALTER TABLE t SET (...) | RESET (...) | RENAME TO n` changes
//! a definition.

use sluice_common::{plan_err, Result};

use crate::parser::CreateTable;

/// What of the source table a `LIKE` clause takes (Flink's like options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LikeFeature {
    /// `ALL`: every feature below.
    All,
    /// `CONSTRAINTS`: the primary key.
    Constraints,
    /// `GENERATED`: computed columns.
    Generated,
    /// `METADATA`: metadata columns (Sluice has none: accepted, no effect).
    Metadata,
    /// `OPTIONS`: the `WITH` options.
    Options,
    /// `PARTITIONS`: `PARTITIONED BY`.
    Partitions,
    /// `WATERMARKS`: the watermark declaration.
    Watermarks,
}

/// How a [`LikeFeature`] of the source merges with the new table's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LikeStrategy {
    /// Take the source's; the same thing declared again is an error.
    Including,
    /// Leave the source's out.
    Excluding,
    /// Take the source's; the new table's declaration of the same thing wins.
    Overwriting,
}

/// `LIKE source [(option, ...)]`.
#[derive(Debug, Clone)]
pub struct LikeClause {
    /// The source table.
    pub source: String,
    /// The like options as written, in order (later ones win for their feature).
    pub options: Vec<(LikeStrategy, LikeFeature)>,
}

impl LikeClause {
    /// The strategy for `feature`: Flink's default `INCLUDING ALL OVERWRITING OPTIONS`,
    /// then each written option in order.
    fn strategy(&self, feature: LikeFeature) -> LikeStrategy {
        let mut s = if feature == LikeFeature::Options {
            LikeStrategy::Overwriting
        } else {
            LikeStrategy::Including
        };
        for &(strategy, f) in &self.options {
            if f == feature || f == LikeFeature::All {
                s = strategy;
            }
        }
        s
    }

    /// Flink refuses `OVERWRITING` for `ALL`, `CONSTRAINTS` and `PARTITIONS`.
    pub fn check(&self) -> Result<()> {
        for &(strategy, f) in &self.options {
            if strategy == LikeStrategy::Overwriting
                && matches!(
                    f,
                    LikeFeature::All | LikeFeature::Constraints | LikeFeature::Partitions
                )
            {
                return plan_err!(
                    "Illegal merging strategy 'OVERWRITING' for '{f:?}' option in LIKE (only \
                     GENERATED, METADATA, OPTIONS and WATERMARKS can be overwritten)"
                );
            }
        }
        Ok(())
    }
}

/// The definition `new` declares `LIKE source` (Flink's merging rules): the source's
/// physical columns, then (per the like options) its computed and metadata columns, then the new
/// table's columns; the watermark, primary key and options merged per feature.
///
/// # Errors
/// A physical column the source has too; a computed column, watermark, primary key or
/// option declared in both under `INCLUDING` (Flink's messages).
pub fn merge_like(
    source: &CreateTable,
    new: &CreateTable,
    like: &LikeClause,
) -> Result<CreateTable> {
    like.check()?;
    let mut columns = Vec::new();
    for c in &source.columns {
        // Computed columns follow GENERATED, metadata columns METADATA (Flink's rules).
        let (special, strategy, kind, feature) = if c.computed.is_some() {
            (
                true,
                like.strategy(LikeFeature::Generated),
                "generated",
                "GENERATED",
            )
        } else if c.metadata.is_some() {
            (
                true,
                like.strategy(LikeFeature::Metadata),
                "metadata",
                "METADATA",
            )
        } else {
            (false, LikeStrategy::Including, "", "")
        };
        if special && strategy == LikeStrategy::Excluding {
            continue;
        }
        let same_kind = |n: &crate::parser::ColumnDef| {
            n.computed.is_some() == c.computed.is_some()
                && n.metadata.is_some() == c.metadata.is_some()
        };
        match new.columns.iter().find(|n| n.name == c.name) {
            Some(n) if !special || !same_kind(n) => {
                return plan_err!(
                    "A column named '{}' already exists in the base table.",
                    n.name
                )
            }
            Some(_) if strategy == LikeStrategy::Including => {
                return plan_err!(
                    "A {kind} column named '{}' already exists in the base table. You \
                     might want to specify EXCLUDING {feature} or OVERWRITING {feature}.",
                    c.name
                )
            }
            // Overwritten by the new table's computed column (added below).
            Some(_) => {}
            // A key column stays NOT NULL without its key (EXCLUDING CONSTRAINTS), as in
            // Flink, where the key made its type NOT NULL.
            None => columns.push(crate::parser::ColumnDef {
                not_null: c.not_null || source.primary_key.contains(&c.name),
                ..c.clone()
            }),
        }
    }
    columns.extend(new.columns.iter().cloned());

    let watermark = match (
        like.strategy(LikeFeature::Watermarks),
        &source.watermark,
        &new.watermark,
    ) {
        (LikeStrategy::Excluding, _, w) => w.clone(),
        (LikeStrategy::Including, Some(s), Some(n)) if s.column == n.column => {
            return plan_err!(
                "There already exists a watermark spec for column '{}' in the base table. You \
                 might want to specify EXCLUDING WATERMARKS or OVERWRITING WATERMARKS.",
                n.column
            )
        }
        (_, s, None) => s.clone(),
        (_, _, Some(n)) => Some(n.clone()),
    };

    let primary_key = match like.strategy(LikeFeature::Constraints) {
        LikeStrategy::Excluding => new.primary_key.clone(),
        _ if !source.primary_key.is_empty() && !new.primary_key.is_empty() => {
            return plan_err!(
                "The base table already has a primary key. You might want to specify \
                 EXCLUDING CONSTRAINTS."
            )
        }
        _ if new.primary_key.is_empty() => source.primary_key.clone(),
        _ => new.primary_key.clone(),
    };

    let options = match like.strategy(LikeFeature::Options) {
        LikeStrategy::Excluding => new.options.clone(),
        strategy => {
            let mut merged = source.options.clone();
            for (k, v) in &new.options {
                match merged.iter_mut().find(|(mk, _)| mk == k) {
                    Some((_, old)) if strategy == LikeStrategy::Including => {
                        return plan_err!(
                            "There already exists an option ['{k}' -> '{old}'] in the base \
                             table. You might want to specify EXCLUDING OPTIONS or OVERWRITING \
                             OPTIONS."
                        )
                    }
                    Some((_, old)) => *old = v.clone(),
                    None => merged.push((k.clone(), v.clone())),
                }
            }
            merged
        }
    };
    let partition_keys = match like.strategy(LikeFeature::Partitions) {
        LikeStrategy::Excluding => new.partition_keys.clone(),
        _ if !source.partition_keys.is_empty() && !new.partition_keys.is_empty() => {
            return plan_err!(
                "The base table already has partitions defined. You might want to specify \
                 EXCLUDING PARTITIONS."
            )
        }
        _ if new.partition_keys.is_empty() => source.partition_keys.clone(),
        _ => new.partition_keys.clone(),
    };
    Ok(CreateTable {
        name: new.name.clone(),
        if_not_exists: new.if_not_exists,
        columns,
        watermark,
        primary_key,
        options,
        like: None,
        partition_keys,
    })
}
