//! Tables declared from others: `LIKE`, `CREATE TABLE ... AS SELECT`, `ALTER TABLE`
//! (the merging rules are in `crate::ddl`).

use sluice_common::types::flink_type_name;
use sluice_common::{plan_err, Result, SluiceError};

use super::Planner;
use crate::ddl::LikeClause;
use crate::parser::{AlterTable, ColumnDef, CreateTable, QueryStatement};

impl Planner {
    /// `ct`'s definition merged with its `LIKE` source's.
    pub(super) fn merged_like(&self, ct: &CreateTable, like: &LikeClause) -> Result<CreateTable> {
        let Some(source) = self.catalog.tables.get(&like.source) else {
            let what = if self.catalog.views.contains_key(&like.source) {
                format!("'{}' is a view; LIKE takes a table", like.source)
            } else {
                self.catalog.unknown_relation(&like.source)
            };
            return plan_err!("{what} (in LIKE of table '{}')", ct.name);
        };
        crate::ddl::merge_like(&source.definition, ct, like)
    }

    /// `CREATE TABLE name WITH (...) AS query`: registers the table with the query's
    /// columns (names and types as the query gives them, `NOT NULL` where it cannot be
    /// NULL); the caller then runs `INSERT INTO name query`.
    ///
    /// # Errors
    /// The name is taken (without `IF NOT EXISTS`), or the query does not plan.
    pub fn create_table_as(&mut self, ct: &CreateTable, query: &QueryStatement) -> Result<()> {
        if self.catalog.contains(&ct.name) && ct.if_not_exists {
            return Ok(());
        }
        let plan = crate::names::with_final_names(self.logical_plan(query)?)?;
        // Columns of the query: declared nowhere in the text.
        let location = datafusion_sql::sqlparser::tokenizer::Location { line: 0, column: 0 };
        let columns = plan
            .schema()
            .fields()
            .iter()
            .map(|f| ColumnDef {
                name: f.name().clone(),
                data_type: Some(f.data_type().clone()),
                type_text: flink_type_name(f.data_type()),
                not_null: !f.is_nullable(),
                computed: None,
                metadata: None,
                location,
            })
            .collect();
        self.create_table(&CreateTable {
            columns,
            ..ct.clone()
        })
    }

    /// `ALTER TABLE name SET (...) | RESET (...) | RENAME TO new`: the table declared again
    /// with the change (so its options are checked as at `CREATE TABLE`); a running job
    /// keeps the definition it started with. Returns whether a table was altered.
    ///
    /// # Errors
    /// No such table (without `IF EXISTS`), a view, a new name that is taken, or a
    /// definition the change makes invalid (the table stays as it was).
    pub fn alter_table(
        &mut self,
        name: &str,
        if_exists: bool,
        change: &AlterTable,
    ) -> Result<bool> {
        let Some(old) = self.catalog.tables.get(name).cloned() else {
            if self.catalog.views.contains_key(name) {
                return plan_err!("'{name}' is a view; ALTER TABLE changes tables");
            }
            if if_exists {
                return Ok(false);
            }
            return Err(SluiceError::Plan(self.catalog.unknown_relation(name)));
        };
        let mut new = old.definition.clone();
        new.if_not_exists = false;
        match change {
            AlterTable::Set(pairs) => {
                for (k, v) in pairs {
                    match new.options.iter_mut().find(|(ok, _)| ok == k) {
                        Some((_, ov)) => *ov = v.clone(),
                        None => new.options.push((k.clone(), v.clone())),
                    }
                }
            }
            AlterTable::Reset(keys) => {
                for k in keys {
                    if k == "connector" {
                        return plan_err!("ALTER TABLE cannot RESET 'connector'");
                    }
                    new.options.retain(|(ok, _)| ok != k);
                }
            }
            AlterTable::Rename(to) => {
                if self.catalog.contains(to) {
                    return plan_err!("Table or view '{to}' already exists");
                }
                new.name = to.clone();
            }
        }
        self.catalog.tables.remove(name);
        if let Err(e) = self.create_table(&new) {
            self.catalog.tables.insert(name.to_string(), old);
            return Err(e);
        }
        Ok(true)
    }
}
