//! The Flink SQL front end: splits a script into statements and parses each one.
//!
//! sqlparser's AST has no place for Flink's `WATERMARK FOR`, computed columns, the
//! `TABLE t` / `DESCRIPTOR(c)` arguments of window table functions, or
//! `MATCH_RECOGNIZE ... WITHIN` (see ARCHITECTURE.md). So:
//! - Flink-only statements (`CREATE TABLE`, `CREATE VIEW`, `INSERT INTO`, `SET`, `RESET`,
//!   `SHOW`, `DESCRIBE`, `EXPLAIN`) are parsed here into our own [`Statement`] types with
//!   sqlparser's [`Parser`] building blocks;
//! - inside a query, each window table function call `TABLE(TUMBLE(...))` and each
//!   `MATCH_RECOGNIZE (...)` clause is parsed here and replaced, at token level, by a
//!   placeholder table name; the rest of the query is sqlparser's standard [`ast::Query`].
//!
//! Token positions are kept from the original text, so every error names the line and
//! column (1-based) in the script.

use std::sync::atomic::{AtomicU64, Ordering};

use datafusion_common::arrow::datatypes::DataType;
use datafusion_sql::sqlparser::ast;
use datafusion_sql::sqlparser::keywords::Keyword;
use datafusion_sql::sqlparser::parser::Parser;
use datafusion_sql::sqlparser::tokenizer::{
    Location, Span, Token, TokenWithSpan, Tokenizer, Whitespace, Word,
};
use sluice_common::{Result, SluiceError};

/// The SQL dialect sqlparser is driven with (double quotes and backticks quote
/// identifiers, as in Flink).
pub(crate) const DIALECT: crate::dialect::FlinkDialect = crate::dialect::FlinkDialect;

/// One statement of a script, with where it starts.
#[derive(Debug, Clone)]
pub struct ParsedStatement {
    /// The statement.
    pub statement: Statement,
    /// The statement's text as written (without the trailing `;`).
    pub text: String,
    /// Line and column (1-based) of the statement's first token.
    pub location: Location,
}

/// The statements Sluice runs.
#[derive(Debug, Clone)]
pub enum Statement {
    /// `CREATE [TEMPORARY] TABLE name (...) WITH (...) [LIKE source (...)]`.
    CreateTable(CreateTable),
    /// `CREATE TABLE name WITH (...) AS query` (CTAS): a table of the query's columns, and
    /// a job that writes the query's rows into it.
    CreateTableAs {
        /// The table (no columns: they are the query's).
        table: CreateTable,
        /// The query.
        query: QueryStatement,
    },
    /// `ALTER TABLE [IF EXISTS] name SET (...) | RESET (...) | RENAME TO new`.
    AlterTable {
        /// The table.
        name: String,
        /// `IF EXISTS`: altering a table that does not exist is not an error.
        if_exists: bool,
        /// The change.
        change: AlterTable,
    },
    /// `CREATE [TEMPORARY] VIEW name AS query`.
    CreateView {
        /// View name.
        name: String,
        /// `IF NOT EXISTS` was given.
        if_not_exists: bool,
        /// The view's query.
        query: QueryStatement,
    },
    /// `INSERT INTO table query`.
    Insert {
        /// Target table.
        table: String,
        /// The query whose rows are written.
        query: QueryStatement,
    },
    /// A `SELECT` (or `WITH ... SELECT`, `VALUES`) whose results go to the caller.
    Query(QueryStatement),
    /// `EXPLAIN [FORMAT TEXT] query`: the physical operator graph as indented text.
    Explain(QueryStatement),
    /// `EXPLAIN FORMAT DOT query`: the physical operator graph as a Graphviz digraph.
    ExplainDot(QueryStatement),
    /// `SET 'key' = 'value'`, or `SET` alone (list the settings).
    Set {
        /// Key and value; `None` for a bare `SET`.
        pair: Option<(String, String)>,
    },
    /// `RESET 'key'`, or `RESET` alone (all keys).
    Reset {
        /// The key, or `None` for all.
        key: Option<String>,
    },
    /// `SHOW TABLES`.
    ShowTables,
    /// `SHOW CREATE TABLE name`: the table's DDL.
    ShowCreateTable {
        /// The table.
        name: String,
    },
    /// `SHOW CREATE VIEW name`: the view's DDL.
    ShowCreateView {
        /// The view.
        name: String,
    },
    /// `DROP [TEMPORARY] TABLE [IF EXISTS] name` (a running job that reads the table
    /// keeps running).
    DropTable {
        /// The table.
        name: String,
        /// `IF EXISTS`: dropping a table that does not exist is not an error.
        if_exists: bool,
    },
    /// `DROP [TEMPORARY] VIEW [IF EXISTS] name`.
    DropView {
        /// The view.
        name: String,
        /// `IF EXISTS`: dropping a view that does not exist is not an error.
        if_exists: bool,
    },
    /// `SHOW VIEWS`.
    ShowViews,
    /// `CREATE [TEMPORARY [SYSTEM]] FUNCTION [IF NOT EXISTS] name AS 'identifier'
    /// [LANGUAGE ...]`: binds `name` to the function the embedding application registered
    /// under `identifier` (`Engine::register_udf` / `register_udaf`).
    CreateFunction {
        /// The name SQL calls it by.
        name: String,
        /// The identifier it was registered under (Flink: the class name).
        identifier: String,
        /// `IF NOT EXISTS`: a name already bound is no error.
        if_not_exists: bool,
        /// `SYSTEM`: the name shadows a built-in function of the same name (Flink's
        /// temporary system functions); otherwise built-ins are looked up first.
        system: bool,
    },
    /// `DROP [TEMPORARY [SYSTEM]] FUNCTION [IF EXISTS] name`.
    DropFunction {
        /// The function's name.
        name: String,
        /// `IF EXISTS`: dropping a name that is not bound is not an error.
        if_exists: bool,
    },
    /// `DESCRIBE name` / `DESC name`.
    Describe {
        /// Table or view name.
        name: String,
    },
    /// `SHOW JOBS`: the session's background jobs (Flink SQL client).
    ShowJobs,
    /// `SHOW FUNCTIONS`: the functions SQL can call.
    ShowFunctions,
    /// `EXECUTE STATEMENT SET BEGIN INSERT ...; INSERT ...; END`: the `INSERT`s run as one
    /// job (a source several of them read is read once; one checkpoint covers every sink).
    StatementSet(Vec<InsertStatement>),
    /// `EXPLAIN [FORMAT TEXT|DOT] STATEMENT SET BEGIN INSERT ...; ...; END`: the job graph
    /// of the statement set.
    ExplainStatementSet {
        /// The `INSERT`s.
        inserts: Vec<InsertStatement>,
        /// `FORMAT DOT`.
        dot: bool,
    },
    /// `BEGIN STATEMENT SET` (Flink SQL client): the session collects the `INSERT`s that
    /// follow until `END`, then runs them as one job.
    BeginStatementSet,
    /// `END`: runs the statement set begun with `BEGIN STATEMENT SET`.
    EndStatementSet,
    /// `STOP JOB 'id' [WITH SAVEPOINT] [WITH DRAIN]` (Flink SQL client): stops a
    /// background job, after a final checkpoint to restart from when `WITH SAVEPOINT`.
    StopJob {
        /// The job id, as `SHOW JOBS` lists it.
        id: String,
        /// `WITH SAVEPOINT`: take a checkpoint first and report where it is.
        savepoint: bool,
    },
}

/// One `INSERT INTO table query` of a statement set.
#[derive(Debug, Clone)]
pub struct InsertStatement {
    /// Target table.
    pub table: String,
    /// The query whose rows are written.
    pub query: QueryStatement,
}

/// A query, with the window table function calls and `MATCH_RECOGNIZE` clauses that were
/// lifted out of it (each replaced by a placeholder table name in `query`).
#[derive(Debug, Clone)]
pub struct QueryStatement {
    /// The standard part, as sqlparser's AST.
    pub query: Box<ast::Query>,
    /// Window table function calls, by placeholder name.
    pub window_tvfs: Vec<WindowTvfCall>,
    /// `MATCH_RECOGNIZE` clauses, by placeholder name.
    pub match_recognize: Vec<MatchRecognizeClause>,
    /// `table FOR SYSTEM_TIME AS OF expr` references, by placeholder name.
    pub temporal: Vec<TemporalRef>,
}

/// `table FOR SYSTEM_TIME AS OF expr` in a `FROM` clause (Flink SQL "Joins > Temporal
/// Joins"): the table as it was at the time `expr` gives (a time attribute of the other
/// input of the join). Lifted out of the query like a window call: a placeholder table
/// name stands for it.
#[derive(Debug, Clone)]
pub struct TemporalRef {
    /// The placeholder table name that stands for the reference in the query.
    pub placeholder: String,
    /// The table or view named.
    pub table: String,
    /// The `AS OF` expression.
    pub as_of: ast::Expr,
    /// Where `FOR` is.
    pub location: Location,
}

/// `CREATE TABLE`.
#[derive(Debug, Clone)]
pub struct CreateTable {
    /// Table name.
    pub name: String,
    /// `IF NOT EXISTS` was given.
    pub if_not_exists: bool,
    /// Columns in declared order (physical and computed).
    pub columns: Vec<ColumnDef>,
    /// `WATERMARK FOR column AS expr`.
    pub watermark: Option<WatermarkDef>,
    /// `PRIMARY KEY (...) NOT ENFORCED` columns, if declared.
    pub primary_key: Vec<String>,
    /// `WITH ('key' = 'value', ...)`, in written order.
    pub options: Vec<(String, String)>,
    /// `LIKE source (...)`: merged with the source's definition when created.
    pub like: Option<crate::ddl::LikeClause>,
    /// `PARTITIONED BY (column, ...)`: a filesystem sink writes each row under
    /// `<path>/<column>=<value>/...`.
    pub partition_keys: Vec<String>,
}

/// What `ALTER TABLE` changes.
#[derive(Debug, Clone)]
pub enum AlterTable {
    /// `SET ('key' = 'value', ...)`: options added or replaced.
    Set(Vec<(String, String)>),
    /// `RESET ('key', ...)`: options removed.
    Reset(Vec<String>),
    /// `RENAME TO new`.
    Rename(String),
}

/// A column of `CREATE TABLE`.
#[derive(Debug, Clone)]
pub struct ColumnDef {
    /// Column name.
    pub name: String,
    /// Arrow type of a physical column; `None` for a computed column (typed by planning).
    pub data_type: Option<DataType>,
    /// The type as written (Flink spelling), for DESCRIBE.
    pub type_text: String,
    /// `NOT NULL` was given.
    pub not_null: bool,
    /// The expression of a computed column `name AS expr`.
    pub computed: Option<ast::Expr>,
    /// `METADATA [FROM 'key'] [VIRTUAL]`: a column the connector fills from (or writes
    /// to) a message's metadata.
    pub metadata: Option<MetadataDef>,
    /// Where the column is declared.
    pub location: Location,
}

/// A metadata column's `FROM 'key'` (`None`: the column's name is the key) and `VIRTUAL`
/// (read only: not written by an `INSERT`). Flink docs, "CREATE Statements", "Metadata
/// Columns".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataDef {
    /// The metadata key, if not the column's name.
    pub key: Option<String>,
    /// `VIRTUAL`: excluded from what an `INSERT` writes.
    pub is_virtual: bool,
}

/// `WATERMARK FOR column AS expr`.
#[derive(Debug, Clone)]
pub struct WatermarkDef {
    /// The rowtime column.
    pub column: String,
    /// The watermark expression.
    pub expr: ast::Expr,
    /// Where the clause is.
    pub location: Location,
}

/// The window table functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TvfKind {
    /// `TUMBLE(data, timecol, size [, offset])`
    Tumble,
    /// `HOP(data, timecol, slide, size [, offset])`
    Hop,
    /// `CUMULATE(data, timecol, step, max_size [, offset])`
    Cumulate,
    /// `SESSION(data [PARTITION BY keys], timecol, gap)`
    Session,
}

impl TvfKind {
    fn from_name(name: &str) -> Option<TvfKind> {
        match name.to_ascii_uppercase().as_str() {
            "TUMBLE" => Some(TvfKind::Tumble),
            "HOP" => Some(TvfKind::Hop),
            "CUMULATE" => Some(TvfKind::Cumulate),
            "SESSION" => Some(TvfKind::Session),
            _ => None,
        }
    }

    /// The function's name in SQL.
    pub fn name(&self) -> &'static str {
        match self {
            TvfKind::Tumble => "TUMBLE",
            TvfKind::Hop => "HOP",
            TvfKind::Cumulate => "CUMULATE",
            TvfKind::Session => "SESSION",
        }
    }

    /// Names of the interval parameters in positional order (Flink's parameter names).
    fn interval_params(&self) -> &'static [&'static str] {
        match self {
            TvfKind::Tumble => &["SIZE", "OFFSET"],
            TvfKind::Hop => &["SLIDE", "SIZE", "OFFSET"],
            TvfKind::Cumulate => &["STEP", "SIZE", "OFFSET"],
            TvfKind::Session => &["GAP"],
        }
    }
}

/// A window table function call lifted out of a query.
#[derive(Debug, Clone)]
pub struct WindowTvfCall {
    /// The placeholder table name that stands for the call in the query.
    pub placeholder: String,
    /// Which function.
    pub kind: TvfKind,
    /// The input relation (`TABLE name`): a table or a view.
    pub input: String,
    /// `PARTITION BY` columns (SESSION only).
    pub partition_by: Vec<String>,
    /// The time attribute (`DESCRIPTOR(col)`).
    pub time_column: String,
    /// Interval arguments by Flink parameter name (`SIZE`, `SLIDE`, `STEP`, `OFFSET`,
    /// `GAP`), in milliseconds.
    pub intervals: Vec<(&'static str, i64)>,
    /// Where the call is.
    pub location: Location,
    /// A legacy group window's (`GROUP BY TUMBLE(ts, ...)`): its window columns have
    /// internal names, which the query cannot name and the input's columns cannot clash
    /// with ([`WindowTvfCall::window_columns`]).
    pub legacy: bool,
}

impl WindowTvfCall {
    /// The names of the `window_start`, `window_end`, `window_time` columns it appends.
    pub fn window_columns(&self) -> [&'static str; 3] {
        use crate::catalog::{WINDOW_END, WINDOW_START, WINDOW_TIME};
        if self.legacy {
            crate::catalog::LEGACY_WINDOW_COLUMNS
        } else {
            [WINDOW_START, WINDOW_END, WINDOW_TIME]
        }
    }

    /// The interval argument named `name`, in milliseconds.
    pub fn interval(&self, name: &str) -> Option<i64> {
        self.intervals
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    }
}

pub use crate::match_recognize::{MatchRecognizeClause, SkipTo};

static NEXT_PLACEHOLDER: AtomicU64 = AtomicU64::new(0);

/// A fresh placeholder relation name `__sluice_<prefix>_<n>`.
pub(crate) fn next_placeholder(prefix: &str) -> String {
    format!(
        "__sluice_{prefix}_{}",
        NEXT_PLACEHOLDER.fetch_add(1, Ordering::Relaxed)
    )
}

pub(crate) fn sql_err(e: impl std::fmt::Display) -> SluiceError {
    let msg = e.to_string();
    SluiceError::Sql(
        msg.strip_prefix("sql parser error: ")
            .unwrap_or(&msg)
            .to_string(),
    )
}

pub(crate) fn err_at(location: Location, msg: impl std::fmt::Display) -> SluiceError {
    SluiceError::Sql(format!("{msg}{location}"))
}

/// Splits a script into statements (at top-level `;`, skipping `--` and `/* */`
/// comments) and parses each.
///
/// # Errors
/// [`SluiceError::Sql`] naming the line and column of the first token that does not fit,
/// and what was expected there.
pub fn parse_script(sql: &str) -> Result<Vec<ParsedStatement>> {
    let tokens = Tokenizer::new(&DIALECT, sql)
        .tokenize_with_location()
        .map_err(sql_err)?;
    let (pieces, rest) = split_statements(tokens);
    let mut statements = Vec::new();
    for piece in pieces.into_iter().chain(std::iter::once(rest)) {
        if piece.iter().any(|t| !is_trivia(&t.token)) {
            statements.push(parse_statement_tokens(sql, piece)?);
        }
    }
    Ok(statements)
}

/// The statements of a token stream, cut at top-level `;` (a statement set's `;`s, up to
/// its `END`, stay inside it), and what follows the last `;`.
fn split_statements(tokens: Vec<TokenWithSpan>) -> (Vec<Vec<TokenWithSpan>>, Vec<TokenWithSpan>) {
    let mut statements = Vec::new();
    let mut current: Vec<TokenWithSpan> = Vec::new();
    for tok in tokens {
        if tok.token == Token::SemiColon && !is_open_statement_set(&current) {
            statements.push(std::mem::take(&mut current));
        } else {
            current.push(tok);
        }
    }
    (statements, current)
}

/// Whether `sql` (a shell's input so far) ends inside a statement set that has not reached
/// its `END` (so a `;` there does not end the input). Text that does not tokenize (an
/// unclosed string) is not.
pub fn ends_inside_statement_set(sql: &str) -> bool {
    match Tokenizer::new(&DIALECT, sql).tokenize_with_location() {
        Ok(tokens) => is_open_statement_set(&split_statements(tokens).1),
        Err(_) => false,
    }
}

/// Whether `tokens` start a statement set (`EXECUTE STATEMENT SET BEGIN`, or `EXPLAIN
/// [FORMAT f] STATEMENT SET BEGIN`) and have not reached its `END`.
fn is_open_statement_set(tokens: &[TokenWithSpan]) -> bool {
    let words: Vec<&Token> = tokens
        .iter()
        .map(|t| &t.token)
        .filter(|t| !is_trivia(t))
        .take(6)
        .collect();
    let at = |i: usize, w: &str| words.get(i).is_some_and(|t| word_is(t, w));
    let set_at = |i: usize| at(i, "STATEMENT") && at(i + 1, "SET") && at(i + 2, "BEGIN");
    let starts = (at(0, "EXECUTE") && set_at(1))
        || (at(0, "EXPLAIN") && (set_at(1) || (at(1, "FORMAT") && set_at(3))));
    if !starts {
        return false;
    }
    // Open until the END that closes BEGIN: every CASE inside has its own END.
    let mut depth = 0i64;
    for t in tokens.iter().map(|t| &t.token) {
        if word_is(t, "BEGIN") || word_is(t, "CASE") {
            depth += 1;
        } else if word_is(t, "END") {
            depth -= 1;
        }
    }
    depth > 0
}

pub(crate) fn is_trivia(t: &Token) -> bool {
    matches!(t, Token::Whitespace(_) | Token::EOF)
}

/// The text between two locations (inclusive start, exclusive end) of `sql`.
fn text_between(sql: &str, start: Location, end: Location) -> String {
    let offset = |loc: Location| -> usize {
        let mut line = 1u64;
        let mut col = 1u64;
        for (i, ch) in sql.char_indices() {
            if line == loc.line && col == loc.column {
                return i;
            }
            if ch == '\n' {
                line += 1;
                col = 1;
            } else {
                col += 1;
            }
        }
        sql.len()
    };
    let (a, b) = (offset(start), offset(end));
    if a <= b {
        sql[a..b].to_string()
    } else {
        String::new()
    }
}

fn parse_statement_tokens(sql: &str, tokens: Vec<TokenWithSpan>) -> Result<ParsedStatement> {
    // Trim leading and trailing trivia (whitespace and comments) for the statement text.
    let first = tokens
        .iter()
        .position(|t| !is_trivia(&t.token))
        .unwrap_or(0);
    let last = tokens
        .iter()
        .rposition(|t| !is_trivia(&t.token))
        .unwrap_or(0);
    let location = tokens[first].span.start;
    let text = text_between(sql, tokens[first].span.start, tokens[last].span.end);
    let tokens: Vec<TokenWithSpan> = tokens[first..=last].to_vec();
    let statement = StatementParser::new(tokens).parse()?;
    Ok(ParsedStatement {
        statement,
        text,
        location,
    })
}

pub(crate) fn word_is(t: &Token, upper: &str) -> bool {
    matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(upper))
}

struct StatementParser {
    tokens: Vec<TokenWithSpan>,
}

impl StatementParser {
    fn new(tokens: Vec<TokenWithSpan>) -> Self {
        StatementParser { tokens }
    }

    /// Meaningful (non-trivia) tokens, for dispatching on the leading keywords.
    fn words(&self) -> Vec<&Token> {
        self.tokens
            .iter()
            .map(|t| &t.token)
            .filter(|t| !is_trivia(t))
            .take(4)
            .collect()
    }

    fn parse(self) -> Result<Statement> {
        let lead = self.words();
        let is = |i: usize, w: &str| lead.get(i).is_some_and(|t| word_is(t, w));
        if is(0, "CREATE") && (is(1, "TABLE") || (is(1, "TEMPORARY") && is(2, "TABLE"))) {
            return self.parse_create_table();
        }
        if is(0, "CREATE") && (is(1, "VIEW") || (is(1, "TEMPORARY") && is(2, "VIEW"))) {
            return self.parse_create_view();
        }
        let after_modifiers = (1..4)
            .find(|&i| !is(i, "TEMPORARY") && !is(i, "SYSTEM"))
            .unwrap_or(4);
        if is(0, "CREATE") && is(after_modifiers, "FUNCTION") {
            return self.parse_create_function();
        }
        if is(0, "INSERT") {
            return self.parse_insert();
        }
        if is(0, "EXECUTE") && is(1, "STATEMENT") && is(2, "SET") {
            return self.parse_statement_set();
        }
        if is(0, "BEGIN") && is(1, "STATEMENT") && is(2, "SET") && lead.len() == 3 {
            return Ok(Statement::BeginStatementSet);
        }
        if is(0, "END") && lead.len() == 1 {
            return Ok(Statement::EndStatementSet);
        }
        if is(0, "ALTER") && is(1, "TABLE") {
            return self.parse_alter_table();
        }
        if is(0, "SET") {
            return self.parse_set();
        }
        if is(0, "RESET") {
            return self.parse_reset();
        }
        if is(0, "SHOW") {
            let mut p = self.parser();
            p.next_token();
            let what = p.next_token();
            let stmt = if word_is(&what.token, "TABLES") {
                Statement::ShowTables
            } else if word_is(&what.token, "CREATE") {
                let kind = p.next_token();
                let view = word_is(&kind.token, "VIEW");
                if !view && !word_is(&kind.token, "TABLE") {
                    return Err(err_at(
                        kind.span.start,
                        format!("Expected: TABLE or VIEW after SHOW CREATE, found: {kind}"),
                    ));
                }
                let name = object_name(&p.parse_object_name(false).map_err(sql_err)?);
                if view {
                    Statement::ShowCreateView { name }
                } else {
                    Statement::ShowCreateTable { name }
                }
            } else if word_is(&what.token, "VIEWS") {
                Statement::ShowViews
            } else if word_is(&what.token, "JOBS") {
                Statement::ShowJobs
            } else if word_is(&what.token, "FUNCTIONS") {
                Statement::ShowFunctions
            } else {
                return Err(err_at(
                    what.span.start,
                    format!(
                        "Expected: TABLES, VIEWS, FUNCTIONS, JOBS or CREATE TABLE after SHOW, found: {what}"
                    ),
                ));
            };
            expect_end(&mut p)?;
            return Ok(stmt);
        }
        if is(0, "DROP") {
            return self.parse_drop();
        }
        if is(0, "STOP") && is(1, "JOB") {
            return self.parse_stop_job();
        }
        if is(0, "DESCRIBE") || is(0, "DESC") {
            let mut p = self.parser();
            p.next_token();
            let name = p.parse_object_name(false).map_err(sql_err)?;
            expect_end(&mut p)?;
            return Ok(Statement::Describe {
                name: object_name(&name),
            });
        }
        if is(0, "EXPLAIN") {
            let start = self
                .tokens
                .iter()
                .position(|t| word_is(&t.token, "EXPLAIN"))
                .unwrap_or(0);
            // EXPLAIN FORMAT TEXT|DOT query
            let rest: Vec<usize> = (start + 1..self.tokens.len())
                .filter(|i| !matches!(self.tokens[*i].token, Token::Whitespace(_)))
                .take(2)
                .collect();
            let format = match rest.as_slice() {
                [f, v] if word_is(&self.tokens[*f].token, "FORMAT") => {
                    let dot = word_is(&self.tokens[*v].token, "DOT");
                    if !dot && !word_is(&self.tokens[*v].token, "TEXT") {
                        return Err(SluiceError::Sql(format!(
                            "EXPLAIN FORMAT must be TEXT or DOT, found {}{}",
                            self.tokens[*v].token, self.tokens[*v].span.start
                        )));
                    }
                    Some((*v, dot))
                }
                _ => None,
            };
            let (mut from, dot) = match format {
                Some((v, dot)) => (v + 1, dot),
                None => (start + 1, false),
            };
            // `EXPLAIN PLAN FOR query` (Flink's older spelling) is `EXPLAIN query`.
            let next: Vec<usize> = (from..self.tokens.len())
                .filter(|i| !is_trivia(&self.tokens[*i].token))
                .take(2)
                .collect();
            if let [plan, for_] = next.as_slice() {
                if word_is(&self.tokens[*plan].token, "PLAN")
                    && word_is(&self.tokens[*for_].token, "FOR")
                {
                    from = for_ + 1;
                }
            }
            let rest = &self.tokens[from..];
            let first = rest.iter().position(|t| !is_trivia(&t.token));
            if first.is_some_and(|f| word_is(&rest[f].token, "STATEMENT")) {
                let Statement::StatementSet(inserts) =
                    StatementParser::new(rest[first.unwrap_or(0)..].to_vec())
                        .parse_statement_set()?
                else {
                    unreachable!("parse_statement_set returns a statement set")
                };
                return Ok(Statement::ExplainStatementSet { inserts, dot });
            }
            // `EXPLAIN INSERT INTO t query`: the plan of a statement set of one INSERT.
            if first.is_some_and(|f| word_is(&rest[f].token, "INSERT")) {
                let insert =
                    StatementParser::new(rest[first.unwrap_or(0)..].to_vec()).parse_insert()?;
                let Statement::Insert { table, query } = insert else {
                    unreachable!("parse_insert returns an INSERT")
                };
                let inserts = vec![InsertStatement { table, query }];
                return Ok(Statement::ExplainStatementSet { inserts, dot });
            }
            let query = parse_query_tokens(self.tokens[from..].to_vec())?;
            return Ok(if dot {
                Statement::ExplainDot(query)
            } else {
                Statement::Explain(query)
            });
        }
        let starts_query = is(0, "SELECT")
            || is(0, "WITH")
            || is(0, "VALUES")
            || lead.first().is_some_and(|t| **t == Token::LParen);
        if starts_query {
            return Ok(Statement::Query(parse_query_tokens(self.tokens)?));
        }
        let first = self
            .tokens
            .iter()
            .find(|t| !is_trivia(&t.token))
            .cloned()
            .unwrap_or_else(TokenWithSpan::new_eof);
        Err(err_at(
            first.span.start,
            format!(
                "Expected: a statement (CREATE TABLE, CREATE VIEW, DROP, INSERT INTO, SELECT, SET, \
                 RESET, SHOW, DESCRIBE, EXPLAIN, STOP JOB), found: {first}"
            ),
        ))
    }

    fn parser(&self) -> Parser<'static> {
        Parser::new(&DIALECT).with_tokens_with_locations(self.tokens.clone())
    }

    fn parse_create_table(self) -> Result<Statement> {
        let mut p = self.parser();
        p.next_token(); // CREATE
        let _ = parse_word(&mut p, "TEMPORARY");
        p.next_token(); // TABLE
        let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
        let name = object_name(&p.parse_object_name(false).map_err(sql_err)?);
        let mut columns = Vec::new();
        let mut watermark = None;
        let mut primary_key = Vec::new();
        // The column list is optional with LIKE and AS.
        let has_columns = p.consume_token(&Token::LParen);
        while has_columns {
            let tok = p.peek_token();
            if parse_word(&mut p, "WATERMARK") {
                if !parse_word(&mut p, "FOR") {
                    return Err(unexpected(&p, "FOR after WATERMARK"));
                }
                let column = p.parse_identifier().map_err(sql_err)?.value;
                p.expect_keyword_is(Keyword::AS).map_err(sql_err)?;
                let expr = p.parse_expr().map_err(sql_err)?;
                if watermark.is_some() {
                    return Err(err_at(
                        tok.span.start,
                        "a table can declare only one WATERMARK",
                    ));
                }
                watermark = Some(WatermarkDef {
                    column,
                    expr,
                    location: tok.span.start,
                });
            } else if parse_word(&mut p, "PRIMARY") || {
                // [CONSTRAINT name] PRIMARY KEY
                if parse_word(&mut p, "CONSTRAINT") {
                    p.parse_identifier().map_err(sql_err)?;
                    if !parse_word(&mut p, "PRIMARY") {
                        return Err(unexpected(&p, "PRIMARY KEY after CONSTRAINT name"));
                    }
                    true
                } else {
                    false
                }
            } {
                p.expect_keyword_is(Keyword::KEY).map_err(sql_err)?;
                p.expect_token(&Token::LParen).map_err(sql_err)?;
                primary_key = p
                    .parse_comma_separated(|p| p.parse_identifier())
                    .map_err(sql_err)?
                    .into_iter()
                    .map(|i| i.value)
                    .collect();
                p.expect_token(&Token::RParen).map_err(sql_err)?;
                if parse_word(&mut p, "NOT") && !parse_word(&mut p, "ENFORCED") {
                    return Err(unexpected(&p, "ENFORCED after NOT"));
                }
            } else {
                columns.push(parse_column(&mut p)?);
            }
            if p.consume_token(&Token::Comma) {
                continue;
            }
            p.expect_token(&Token::RParen).map_err(sql_err)?;
            break;
        }
        let mut options = Vec::new();
        let mut like = None;
        let mut partition_keys = Vec::new();
        loop {
            if parse_word(&mut p, "LIKE") {
                like = Some(parse_like(&mut p)?);
            } else if p.parse_keyword(Keyword::AS) {
                if has_columns || like.is_some() {
                    return Err(unexpected(
                        &p,
                        "the end of the statement: CREATE TABLE ... AS SELECT takes its \
                         columns from the query (no column list, no LIKE)",
                    ));
                }
                let rest = p.index();
                let query = parse_query_tokens(remaining_tokens(&self.tokens, rest))?;
                return Ok(Statement::CreateTableAs {
                    table: CreateTable {
                        name,
                        if_not_exists,
                        columns,
                        watermark,
                        primary_key,
                        options,
                        like: None,
                        partition_keys,
                    },
                    query,
                });
            } else if parse_word(&mut p, "COMMENT") {
                p.parse_literal_string().map_err(sql_err)?;
            } else if parse_word(&mut p, "PARTITIONED") {
                p.expect_keyword_is(Keyword::BY).map_err(sql_err)?;
                p.expect_token(&Token::LParen).map_err(sql_err)?;
                partition_keys = p
                    .parse_comma_separated(|p| p.parse_identifier())
                    .map_err(sql_err)?
                    .into_iter()
                    .map(|i| i.value)
                    .collect();
                p.expect_token(&Token::RParen).map_err(sql_err)?;
            } else if p.parse_keyword(Keyword::WITH) {
                options = parse_options(&mut p)?;
            } else {
                break;
            }
        }
        expect_end(&mut p)?;
        if !has_columns && like.is_none() {
            return Err(unexpected(&p, "a column list, LIKE or AS"));
        }
        Ok(Statement::CreateTable(CreateTable {
            name,
            if_not_exists,
            columns,
            watermark,
            primary_key,
            options,
            like,
            partition_keys,
        }))
    }

    fn parse_create_view(self) -> Result<Statement> {
        let mut p = self.parser();
        p.next_token(); // CREATE
        let _ = parse_word(&mut p, "TEMPORARY");
        p.next_token(); // VIEW
        let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
        let name = object_name(&p.parse_object_name(false).map_err(sql_err)?);
        p.expect_keyword_is(Keyword::AS).map_err(sql_err)?;
        let rest = p.index();
        let query = parse_query_tokens(remaining_tokens(&self.tokens, rest))?;
        Ok(Statement::CreateView {
            name,
            if_not_exists,
            query,
        })
    }

    /// `CREATE [TEMPORARY [SYSTEM]] FUNCTION [IF NOT EXISTS] name AS 'identifier'
    /// [LANGUAGE JAVA|SCALA|PYTHON|RUST]` (the language is accepted and ignored: every
    /// function Sluice runs is one the application registered).
    fn parse_create_function(self) -> Result<Statement> {
        let mut p = self.parser();
        p.next_token(); // CREATE
        let _ = parse_word(&mut p, "TEMPORARY");
        let system = parse_word(&mut p, "SYSTEM");
        if !parse_word(&mut p, "FUNCTION") {
            return Err(unexpected(&p, "FUNCTION"));
        }
        let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
        let name = object_name(&p.parse_object_name(false).map_err(sql_err)?);
        p.expect_keyword_is(Keyword::AS).map_err(sql_err)?;
        let identifier = p.parse_literal_string().map_err(sql_err)?;
        if parse_word(&mut p, "LANGUAGE") {
            p.next_token();
        }
        expect_end(&mut p)?;
        Ok(Statement::CreateFunction {
            name,
            identifier,
            if_not_exists,
            system,
        })
    }

    /// `ALTER TABLE [IF EXISTS] name SET ('k' = 'v', ...) | RESET ('k', ...) | RENAME TO
    /// new`.
    fn parse_alter_table(self) -> Result<Statement> {
        let mut p = self.parser();
        p.next_token(); // ALTER
        p.next_token(); // TABLE
        let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
        let name = object_name(&p.parse_object_name(false).map_err(sql_err)?);
        let change = if p.parse_keyword(Keyword::SET) {
            AlterTable::Set(parse_options(&mut p)?)
        } else if parse_word(&mut p, "RESET") {
            p.expect_token(&Token::LParen).map_err(sql_err)?;
            let keys = p
                .parse_comma_separated(|p| p.parse_literal_string())
                .map_err(sql_err)?;
            p.expect_token(&Token::RParen).map_err(sql_err)?;
            AlterTable::Reset(keys)
        } else if parse_word(&mut p, "RENAME") {
            if !parse_word(&mut p, "TO") {
                return Err(unexpected(&p, "TO after RENAME"));
            }
            AlterTable::Rename(object_name(&p.parse_object_name(false).map_err(sql_err)?))
        } else {
            return Err(unexpected(&p, "SET, RESET or RENAME TO"));
        };
        expect_end(&mut p)?;
        Ok(Statement::AlterTable {
            name,
            if_exists,
            change,
        })
    }

    /// `DROP [TEMPORARY [SYSTEM]] TABLE|VIEW|FUNCTION [IF EXISTS] name`.
    fn parse_drop(self) -> Result<Statement> {
        let mut p = self.parser();
        p.next_token(); // DROP
        let _ = parse_word(&mut p, "TEMPORARY");
        let _ = parse_word(&mut p, "SYSTEM");
        let kind = p.next_token();
        if word_is(&kind.token, "FUNCTION") {
            let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
            let name = object_name(&p.parse_object_name(false).map_err(sql_err)?);
            expect_end(&mut p)?;
            return Ok(Statement::DropFunction { name, if_exists });
        }
        let view = word_is(&kind.token, "VIEW");
        if !view && !word_is(&kind.token, "TABLE") {
            return Err(err_at(
                kind.span.start,
                format!("Expected: TABLE, VIEW or FUNCTION after DROP, found: {kind}"),
            ));
        }
        let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
        let name = object_name(&p.parse_object_name(false).map_err(sql_err)?);
        expect_end(&mut p)?;
        Ok(if view {
            Statement::DropView { name, if_exists }
        } else {
            Statement::DropTable { name, if_exists }
        })
    }

    fn parse_insert(self) -> Result<Statement> {
        let mut p = self.parser();
        p.next_token(); // INSERT
        if !p.parse_keyword(Keyword::INTO) {
            return Err(unexpected(&p, "INTO after INSERT"));
        }
        let table = object_name(&p.parse_object_name(false).map_err(sql_err)?);
        let rest = p.index();
        let query = parse_query_tokens(remaining_tokens(&self.tokens, rest))?;
        Ok(Statement::Insert { table, query })
    }

    /// `EXECUTE STATEMENT SET BEGIN INSERT ...; ...; END`: each piece between `BEGIN`,
    /// the `;`s and `END` must be an `INSERT`.
    fn parse_statement_set(self) -> Result<Statement> {
        let begin = self
            .tokens
            .iter()
            .position(|t| word_is(&t.token, "BEGIN"))
            .filter(|&b| {
                let before: Vec<&Token> = self.tokens[..b]
                    .iter()
                    .map(|t| &t.token)
                    .filter(|t| !is_trivia(t))
                    .collect();
                before.len() >= 2
                    && word_is(before[before.len() - 2], "STATEMENT")
                    && word_is(before[before.len() - 1], "SET")
            })
            .ok_or_else(|| {
                err_at(
                    self.tokens[0].span.start,
                    "Expected: BEGIN after STATEMENT SET",
                )
            })?;
        let body = &self.tokens[begin + 1..];
        let end = body
            .iter()
            .rposition(|t| !is_trivia(&t.token))
            .filter(|&e| word_is(&body[e].token, "END"))
            .ok_or_else(|| {
                err_at(
                    self.tokens[begin].span.start,
                    "Expected: END to close STATEMENT SET BEGIN",
                )
            })?;
        let mut inserts = Vec::new();
        for piece in body[..end].split(|t| t.token == Token::SemiColon) {
            let Some(first) = piece.iter().position(|t| !is_trivia(&t.token)) else {
                continue;
            };
            match StatementParser::new(piece[first..].to_vec()).parse()? {
                Statement::Insert { table, query } => {
                    inserts.push(InsertStatement { table, query })
                }
                _ => {
                    return Err(err_at(
                        piece[first].span.start,
                        "a statement set holds only INSERT INTO statements",
                    ))
                }
            }
        }
        if inserts.is_empty() {
            return Err(err_at(
                self.tokens[begin].span.start,
                "a statement set needs at least one INSERT INTO statement",
            ));
        }
        Ok(Statement::StatementSet(inserts))
    }

    /// `STOP JOB 'id' [WITH SAVEPOINT] [WITH DRAIN]` (Flink's SQL client syntax; DRAIN
    /// is accepted: a stopped Sluice job always ends its windows from its checkpoint on
    /// restart, so it changes nothing).
    fn parse_stop_job(self) -> Result<Statement> {
        let mut p = self.parser();
        p.next_token(); // STOP
        p.next_token(); // JOB
        let id_token = p.next_token();
        let id = match &id_token.token {
            Token::SingleQuotedString(s) => s.clone(),
            other => {
                return Err(err_at(
                    id_token.span.start,
                    format!("Expected: the job id as a string ('...'), found: {other}"),
                ))
            }
        };
        let mut savepoint = false;
        loop {
            let t = p.peek_token();
            if !word_is(&t.token, "WITH") {
                break;
            }
            p.next_token();
            let what = p.next_token();
            if word_is(&what.token, "SAVEPOINT") {
                savepoint = true;
            } else if !word_is(&what.token, "DRAIN") {
                return Err(err_at(
                    what.span.start,
                    format!("Expected: SAVEPOINT or DRAIN after WITH, found: {what}"),
                ));
            }
        }
        expect_end(&mut p)?;
        Ok(Statement::StopJob { id, savepoint })
    }

    fn parse_set(self) -> Result<Statement> {
        let mut p = self.parser();
        p.next_token(); // SET
        if p.peek_token().token == Token::EOF {
            return Ok(Statement::Set { pair: None });
        }
        let key = parse_key_or_value(&mut p)?;
        p.expect_token(&Token::Eq).map_err(sql_err)?;
        let value = parse_key_or_value(&mut p)?;
        expect_end(&mut p)?;
        Ok(Statement::Set {
            pair: Some((key, value)),
        })
    }

    fn parse_reset(self) -> Result<Statement> {
        let mut p = self.parser();
        p.next_token(); // RESET
        if p.peek_token().token == Token::EOF {
            return Ok(Statement::Reset { key: None });
        }
        let key = parse_key_or_value(&mut p)?;
        expect_end(&mut p)?;
        Ok(Statement::Reset { key: Some(key) })
    }
}

/// The tokens from the parser's position `index` on (the parser counts every token,
/// trivia included, so this is a plain slice).
fn remaining_tokens(tokens: &[TokenWithSpan], index: usize) -> Vec<TokenWithSpan> {
    tokens[index.min(tokens.len())..].to_vec()
}

/// A `SET` key or value: `'quoted'`, or a bare dotted name / number.
fn parse_key_or_value(p: &mut Parser) -> Result<String> {
    let tok = p.next_token();
    match &tok.token {
        Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => Ok(s.clone()),
        Token::Number(n, _) => Ok(n.clone()),
        Token::Word(w) => {
            let mut s = w.value.clone();
            while p.consume_token(&Token::Period) {
                let next = p.next_token();
                s.push('.');
                s.push_str(&next.token.to_string());
            }
            Ok(s)
        }
        _ => Err(err_at(
            tok.span.start,
            format!("Expected: a quoted key or value ('...'), found: {tok}"),
        )),
    }
}

/// `source [(INCLUDING|EXCLUDING|OVERWRITING ALL|CONSTRAINTS|GENERATED|METADATA|OPTIONS|
/// PARTITIONS|WATERMARKS ...)]` after `LIKE`.
fn parse_like(p: &mut Parser) -> Result<crate::ddl::LikeClause> {
    use crate::ddl::{LikeFeature as F, LikeStrategy as S};
    let source = object_name(&p.parse_object_name(false).map_err(sql_err)?);
    let mut options = Vec::new();
    if p.consume_token(&Token::LParen) {
        loop {
            let strategy = if parse_word(p, "INCLUDING") {
                S::Including
            } else if parse_word(p, "EXCLUDING") {
                S::Excluding
            } else if parse_word(p, "OVERWRITING") {
                S::Overwriting
            } else if p.consume_token(&Token::RParen) {
                break;
            } else {
                return Err(unexpected(p, "INCLUDING, EXCLUDING or OVERWRITING"));
            };
            let feature = [
                ("ALL", F::All),
                ("CONSTRAINTS", F::Constraints),
                ("GENERATED", F::Generated),
                ("METADATA", F::Metadata),
                ("OPTIONS", F::Options),
                ("PARTITIONS", F::Partitions),
                ("WATERMARKS", F::Watermarks),
            ]
            .into_iter()
            .find(|(w, _)| parse_word(p, w))
            .map(|(_, f)| f)
            .ok_or_else(|| {
                unexpected(
                    p,
                    "ALL, CONSTRAINTS, GENERATED, METADATA, OPTIONS, PARTITIONS or WATERMARKS",
                )
            })?;
            options.push((strategy, feature));
            let _ = p.consume_token(&Token::Comma);
        }
    }
    Ok(crate::ddl::LikeClause { source, options })
}

fn parse_options(p: &mut Parser) -> Result<Vec<(String, String)>> {
    p.expect_token(&Token::LParen).map_err(sql_err)?;
    let mut options = Vec::new();
    if p.consume_token(&Token::RParen) {
        return Ok(options);
    }
    loop {
        let key = p.parse_literal_string().map_err(sql_err)?;
        p.expect_token(&Token::Eq).map_err(sql_err)?;
        let value = p.parse_literal_string().map_err(sql_err)?;
        options.push((key, value));
        if p.consume_token(&Token::Comma) {
            continue;
        }
        p.expect_token(&Token::RParen).map_err(sql_err)?;
        return Ok(options);
    }
}

fn parse_column(p: &mut Parser) -> Result<ColumnDef> {
    let start = p.peek_token();
    let name = p.parse_identifier().map_err(sql_err)?.value;
    let mut column = ColumnDef {
        name,
        data_type: None,
        type_text: String::new(),
        not_null: false,
        computed: None,
        metadata: None,
        location: start.span.start,
    };
    if p.parse_keyword(Keyword::AS) {
        column.computed = Some(p.parse_expr().map_err(sql_err)?);
    } else {
        let (dt, text) = crate::flink_types::parse_flink_type(p)?;
        column.data_type = Some(dt);
        column.type_text = text;
        loop {
            if p.parse_keywords(&[Keyword::NOT, Keyword::NULL]) {
                column.not_null = true;
            } else if p.parse_keyword(Keyword::NULL) {
            } else if column.metadata.is_none() && parse_word(p, "METADATA") {
                let key = if p.parse_keyword(Keyword::FROM) {
                    Some(p.parse_literal_string().map_err(sql_err)?)
                } else {
                    None
                };
                let is_virtual = parse_word(p, "VIRTUAL");
                column.metadata = Some(MetadataDef { key, is_virtual });
            } else {
                break;
            }
        }
    }
    if parse_word(p, "COMMENT") {
        p.parse_literal_string().map_err(sql_err)?;
    }
    Ok(column)
}

pub(crate) fn parse_word(p: &mut Parser, upper: &str) -> bool {
    if word_is(&p.peek_token().token, upper) {
        p.next_token();
        true
    } else {
        false
    }
}

pub(crate) fn unexpected(p: &Parser, expected: &str) -> SluiceError {
    let tok = p.peek_token();
    err_at(
        tok.span.start,
        format!("Expected: {expected}, found: {tok}"),
    )
}

fn expect_end(p: &mut Parser) -> Result<()> {
    expect_eof(p, "end of statement")
}

/// Nothing may follow: else "Expected: `expected`, found: ..." at the next token.
pub(crate) fn expect_eof(p: &mut Parser, expected: &str) -> Result<()> {
    if p.peek_token().token == Token::EOF {
        Ok(())
    } else {
        Err(unexpected(p, expected))
    }
}

/// The keyword `upper` must come next (and is consumed): else "Expected: `upper`,
/// found: ..." at the next token.
pub(crate) fn expect_word(p: &mut Parser, upper: &str) -> Result<()> {
    if parse_word(p, upper) {
        Ok(())
    } else {
        Err(unexpected(p, upper))
    }
}

fn object_name(name: &ast::ObjectName) -> String {
    name.0
        .iter()
        .map(|part| match part.as_ident() {
            Some(ident) => ident.value.clone(),
            None => part.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Parses a query after lifting out window table function calls and `MATCH_RECOGNIZE`.
fn parse_query_tokens(tokens: Vec<TokenWithSpan>) -> Result<QueryStatement> {
    let tokens = drop_json_object_key_words(tokens);
    let tokens = map_constructor_calls(tokens)?;
    let (tokens, window_tvfs, match_recognize, temporal) = lift_table_functions(tokens)?;
    let mut p = Parser::new(&DIALECT).with_tokens_with_locations(tokens);
    let query = p.parse_query().map_err(sql_err)?;
    expect_end(&mut p)?;
    Ok(QueryStatement {
        query,
        window_tvfs,
        match_recognize,
        temporal,
    })
}

/// Index of the next non-trivia token at or after `i`.
fn next_meaningful(tokens: &[TokenWithSpan], mut i: usize) -> Option<usize> {
    while i < tokens.len() {
        if !is_trivia(&tokens[i].token) {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// `MAP[k1, v1, ...]` (Flink's map constructor, which sqlparser reads as a subscript of a
/// column `MAP`) becomes the call `MAP(k1, v1, ...)` of `functions::collection`'s `map`.
fn map_constructor_calls(mut tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    for i in 0..tokens.len() {
        if word_is(&tokens[i].token, "MAP") {
            if let Some(open) = next_meaningful(&tokens, i + 1) {
                if tokens[open].token == Token::LBracket {
                    let Some(close) = matching_close(&tokens, open) else {
                        return Err(err_at(tokens[open].span.start, "MAP[ is never closed by ]"));
                    };
                    tokens[open].token = Token::LParen;
                    tokens[close].token = Token::RParen;
                }
            }
        }
    }
    Ok(tokens)
}

/// Drops the optional `KEY` before a key in `JSON_OBJECT(KEY 'k' VALUE v, ...)` and
/// `JSON_OBJECTAGG(KEY k VALUE v)` (Flink's syntax; sqlparser reads `'k' VALUE v` only).
fn drop_json_object_key_words(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    // For each open parenthesis: whether it opens a JSON_OBJECT call.
    let mut parens: Vec<bool> = Vec::new();
    let mut last: Option<Token> = None;
    for (i, t) in tokens.iter().enumerate() {
        match &t.token {
            Token::LParen => {
                parens.push(matches!(&last, Some(Token::Word(w))
                    if w.value.eq_ignore_ascii_case("JSON_OBJECT")
                        || w.value.eq_ignore_ascii_case("JSON_OBJECTAGG")));
            }
            Token::RParen => {
                parens.pop();
            }
            Token::Word(w)
                if w.value.eq_ignore_ascii_case("KEY")
                    && w.quote_style.is_none()
                    && parens.last() == Some(&true)
                    && matches!(last, Some(Token::LParen | Token::Comma))
                    && next_meaningful(&tokens, i + 1).is_some_and(|n| {
                        !matches!(&tokens[n].token, Token::Comma | Token::RParen)
                            && !word_is(&tokens[n].token, "VALUE")
                    }) =>
            {
                continue;
            }
            _ => {}
        }
        if !is_trivia(&t.token) {
            last = Some(t.token.clone());
        }
        out.push(t.clone());
    }
    out
}

/// Index of the `)` matching the `(` at `open`.
fn matching_paren(tokens: &[TokenWithSpan], open: usize) -> Result<usize> {
    matching_close(tokens, open).ok_or_else(|| {
        err_at(
            tokens[open].span.start,
            "Expected: ')' to close this '(', found: end of statement",
        )
    })
}

/// The index of the `)` or `]` that closes the `(` or `[` at `open` (nested pairs of the
/// same kind skipped), `None` when the statement ends first.
pub(crate) fn matching_close(tokens: &[TokenWithSpan], open: usize) -> Option<usize> {
    let (opener, closer) = match tokens[open].token {
        Token::LBracket => (Token::LBracket, Token::RBracket),
        _ => (Token::LParen, Token::RParen),
    };
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate().skip(open) {
        if t.token == opener {
            depth += 1;
        } else if t.token == closer {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

fn placeholder_token(name: &str, span: Span) -> TokenWithSpan {
    TokenWithSpan::new(
        Token::Word(Word {
            value: name.to_string(),
            quote_style: Some('"'),
            keyword: Keyword::NoKeyword,
        }),
        span,
    )
}

type Lifted = (
    Vec<TokenWithSpan>,
    Vec<WindowTvfCall>,
    Vec<MatchRecognizeClause>,
    Vec<TemporalRef>,
);

/// Pushes `AS alias` onto `out` unless the token at `next` (the first meaningful one after
/// a lifted relation) starts an alias already: without one, the relation's name qualifies
/// its columns (stable output names such as `sum(t.v)`).
fn push_default_alias(
    out: &mut Vec<TokenWithSpan>,
    tokens: &[TokenWithSpan],
    next: Option<usize>,
    alias: &str,
    span: Span,
) {
    let has_alias = next.is_some_and(|n| match &tokens[n].token {
        Token::Word(w) => {
            w.keyword == Keyword::AS || w.keyword == Keyword::NoKeyword || w.quote_style.is_some()
        }
        _ => false,
    });
    if has_alias {
        return;
    }
    let space = || TokenWithSpan::new(Token::Whitespace(Whitespace::Space), span);
    out.push(space());
    out.push(TokenWithSpan::new(
        Token::Word(Word {
            value: "AS".into(),
            quote_style: None,
            keyword: Keyword::AS,
        }),
        span,
    ));
    out.push(space());
    out.push(placeholder_token(alias, span));
}

/// The index of `OF` when `FOR SYSTEM_TIME AS OF` starts at `i`.
fn system_time_as_of(tokens: &[TokenWithSpan], i: usize) -> Option<usize> {
    let mut at = i;
    for word in ["SYSTEM_TIME", "AS", "OF"] {
        at = next_meaningful(tokens, at + 1)?;
        if !word_is(&tokens[at].token, word) {
            return None;
        }
    }
    Some(at)
}

/// Replaces `TABLE(TUMBLE|HOP|CUMULATE|SESSION(...))` and `input MATCH_RECOGNIZE (...)`
/// by placeholder table names, returning the calls.
fn lift_table_functions(tokens: Vec<TokenWithSpan>) -> Result<Lifted> {
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    let mut tvfs = Vec::new();
    let mut mrs = Vec::new();
    let mut temporal = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        // TABLE ( <fn> ( ... ) )
        if word_is(&t.token, "TABLE") {
            if let Some(j) = next_meaningful(&tokens, i + 1) {
                if tokens[j].token == Token::LParen {
                    if let Some(k) = next_meaningful(&tokens, j + 1) {
                        if let Token::Word(w) = &tokens[k].token {
                            if let Some(kind) = TvfKind::from_name(&w.value) {
                                let open = next_meaningful(&tokens, k + 1);
                                if let Some(open) =
                                    open.filter(|&o| tokens[o].token == Token::LParen)
                                {
                                    let close = matching_paren(&tokens, open)?;
                                    let outer_close = matching_paren(&tokens, j)?;
                                    let call = parse_tvf_call(
                                        kind,
                                        &tokens[open + 1..close],
                                        tokens[k].span.start,
                                        tokens[close].span.start,
                                    )?;
                                    if next_meaningful(&tokens, close + 1) != Some(outer_close) {
                                        let at = next_meaningful(&tokens, close + 1)
                                            .unwrap_or(outer_close);
                                        return Err(err_at(
                                            tokens[at].span.start,
                                            format!(
                                                "Expected: ')' after the {} call, found: {}",
                                                kind.name(),
                                                tokens[at]
                                            ),
                                        ));
                                    }
                                    out.push(placeholder_token(&call.placeholder, t.span));
                                    let next = next_meaningful(&tokens, outer_close + 1);
                                    let alias =
                                        call.input.rsplit('.').next().unwrap_or(&call.input);
                                    push_default_alias(&mut out, &tokens, next, alias, t.span);
                                    tvfs.push(call);
                                    i = outer_close + 1;
                                    continue;
                                }
                            }
                        }
                    }
                }
            }
        }
        // table FOR SYSTEM_TIME AS OF expr
        if word_is(&t.token, "FOR") {
            if let Some(of) = system_time_as_of(&tokens, i) {
                // The table name: the identifiers (joined by dots) emitted last.
                let mut start = out.len();
                let mut expect_word = true;
                while let Some(p) = out[..start].iter().rposition(|t| !is_trivia(&t.token)) {
                    match &out[p].token {
                        Token::Word(_) if expect_word => {}
                        Token::Period if !expect_word => {}
                        _ => break,
                    }
                    expect_word = !expect_word;
                    start = p;
                }
                let name: Vec<String> = out[start..]
                    .iter()
                    .filter_map(|t| match &t.token {
                        Token::Word(w) => Some(w.value.clone()),
                        _ => None,
                    })
                    .collect();
                if name.is_empty() || expect_word {
                    return Err(err_at(
                        t.span.start,
                        "Expected: a table or view name before FOR SYSTEM_TIME AS OF",
                    ));
                }
                let mut p =
                    Parser::new(&DIALECT).with_tokens_with_locations(tokens[of + 1..].to_vec());
                let as_of = p.parse_expr().map_err(sql_err)?;
                let end = of + 1 + p.index();
                let table = name.join(".");
                let placeholder = next_placeholder("asof");
                let span = out[start].span;
                out.truncate(start);
                out.push(placeholder_token(&placeholder, span));
                let alias = name.last().expect("a name").clone();
                push_default_alias(
                    &mut out,
                    &tokens,
                    next_meaningful(&tokens, end),
                    &alias,
                    span,
                );
                temporal.push(TemporalRef {
                    placeholder,
                    table,
                    as_of,
                    location: t.span.start,
                });
                i = end;
                continue;
            }
        }
        // input MATCH_RECOGNIZE ( ... )
        if word_is(&t.token, "MATCH_RECOGNIZE") {
            let open = next_meaningful(&tokens, i + 1)
                .filter(|&o| tokens[o].token == Token::LParen)
                .ok_or_else(|| err_at(t.span.end, "Expected: '(' after MATCH_RECOGNIZE"))?;
            let close = matching_paren(&tokens, open)?;
            // The input: the last identifier emitted before the keyword.
            let input_pos = out.iter().rposition(|t| !is_trivia(&t.token));
            let input = match input_pos.map(|p| &out[p].token) {
                Some(Token::Word(w)) => w.value.clone(),
                _ => {
                    return Err(err_at(
                        t.span.start,
                        "Expected: a table name before MATCH_RECOGNIZE",
                    ))
                }
            };
            let input_pos = input_pos.unwrap_or(0);
            // The table name follows FROM, JOIN or a comma directly: an alias belongs
            // after the clause (`FROM t MATCH_RECOGNIZE (...) AS m`).
            let before = out[..input_pos].iter().rposition(|t| !is_trivia(&t.token));
            if let Some(b) = before {
                let tok = &out[b].token;
                let starts_relation = word_is(tok, "FROM")
                    || word_is(tok, "JOIN")
                    || matches!(tok, Token::Comma | Token::LParen);
                if !starts_relation {
                    return Err(err_at(
                        out[input_pos].span.start,
                        format!(
                            "MATCH_RECOGNIZE takes a table or view name right after FROM; \
                             put an alias after the clause: FROM <table> MATCH_RECOGNIZE \
                             (...) AS {input}"
                        ),
                    ));
                }
            }
            let placeholder = next_placeholder("mr");
            let span = out[input_pos].span;
            out.truncate(input_pos);
            out.push(placeholder_token(&placeholder, span));
            mrs.push(crate::match_recognize::parse_clause(
                &tokens[open + 1..close],
                placeholder,
                input,
                t.span.start,
            )?);
            i = close + 1;
            continue;
        }
        out.push(t.clone());
        i += 1;
    }
    Ok((out, tvfs, mrs, temporal))
}

/// Parses the arguments of a window table function call.
fn parse_tvf_call(
    kind: TvfKind,
    args: &[TokenWithSpan],
    location: Location,
    end: Location,
) -> Result<WindowTvfCall> {
    // Split at top-level commas.
    let mut parts: Vec<&[TokenWithSpan]> = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, t) in args.iter().enumerate() {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => {
                parts.push(&args[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&args[start..]);

    let mut input: Option<(String, Vec<String>)> = None;
    let mut time_column: Option<String> = None;
    let mut intervals: Vec<(&'static str, i64)> = Vec::new();
    let mut positional_interval = 0usize;
    for part in parts {
        // Named argument: NAME => value
        let mut name: Option<String> = None;
        let mut part = part;
        if let Some(i) = next_meaningful(part, 0) {
            if let (Token::Word(w), Some(j)) = (&part[i].token, next_meaningful(part, i + 1)) {
                if part[j].token == Token::RArrow {
                    name = Some(w.value.to_ascii_uppercase());
                    part = &part[j + 1..];
                }
            }
        }
        let mut p = Parser::new(&DIALECT).with_tokens_with_locations(part.to_vec());
        let first = p.peek_token();
        if first.token == Token::EOF {
            return Err(err_at(
                end,
                format!(
                    "Expected: an argument of {}, found: ',' or ')'",
                    kind.name()
                ),
            ));
        }
        let head = p.peek_token();
        if word_is(&head.token, "TABLE") {
            p.next_token();
            let table = object_name(&p.parse_object_name(false).map_err(sql_err)?);
            let mut partition_by = Vec::new();
            if p.parse_keywords(&[Keyword::PARTITION, Keyword::BY]) {
                let parens = p.consume_token(&Token::LParen);
                partition_by = p
                    .parse_comma_separated(|p| p.parse_identifier())
                    .map_err(sql_err)?
                    .into_iter()
                    .map(|i| i.value)
                    .collect();
                if parens {
                    p.expect_token(&Token::RParen).map_err(sql_err)?;
                }
                if kind != TvfKind::Session {
                    return Err(err_at(
                        head.span.start,
                        format!(
                            "PARTITION BY is only allowed in SESSION, not in {}",
                            kind.name()
                        ),
                    ));
                }
            }
            expect_end(&mut p)?;
            input = Some((table, partition_by));
        } else if word_is(&head.token, "DESCRIPTOR") {
            p.next_token();
            p.expect_token(&Token::LParen).map_err(sql_err)?;
            let col = p.parse_identifier().map_err(sql_err)?.value;
            p.expect_token(&Token::RParen).map_err(sql_err)?;
            expect_end(&mut p)?;
            time_column = Some(col);
        } else {
            let expr = p.parse_expr().map_err(sql_err)?;
            expect_end(&mut p)?;
            let ms = interval_ms(&expr).map_err(|m| err_at(head.span.start, m))?;
            let params = kind.interval_params();
            let param: &'static str = match &name {
                Some(n) => match params.iter().find(|p| **p == n.as_str()) {
                    Some(p) => p,
                    None if n == "MAX_SIZE" && kind == TvfKind::Cumulate => "SIZE",
                    None => {
                        return Err(err_at(
                            first.span.start,
                            format!(
                                "{} has no parameter {n}; its interval parameters are {}",
                                kind.name(),
                                params.join(", ")
                            ),
                        ))
                    }
                },
                None => {
                    let Some(p) = params.get(positional_interval) else {
                        return Err(err_at(
                            head.span.start,
                            format!(
                                "too many arguments for {}: it takes DATA, TIMECOL, {}",
                                kind.name(),
                                params.join(", ")
                            ),
                        ));
                    };
                    positional_interval += 1;
                    p
                }
            };
            if ms <= 0 && param != "OFFSET" {
                return Err(err_at(
                    head.span.start,
                    format!("{} of {} must be a positive interval", param, kind.name()),
                ));
            }
            intervals.push((param, ms));
        }
    }
    let Some((input, partition_by)) = input else {
        return Err(err_at(
            location,
            format!("{} needs its input as `TABLE name`", kind.name()),
        ));
    };
    let Some(time_column) = time_column else {
        return Err(err_at(
            location,
            format!(
                "{} needs its time attribute as `DESCRIPTOR(column)`",
                kind.name()
            ),
        ));
    };
    let required: &[&str] = match kind {
        TvfKind::Tumble => &["SIZE"],
        TvfKind::Hop => &["SLIDE", "SIZE"],
        TvfKind::Cumulate => &["STEP", "SIZE"],
        TvfKind::Session => &["GAP"],
    };
    for r in required {
        if !intervals.iter().any(|(n, _)| n == r) {
            return Err(err_at(
                location,
                format!("{} is missing its {r} interval", kind.name()),
            ));
        }
    }
    Ok(WindowTvfCall {
        legacy: false,
        placeholder: next_placeholder("tvf"),
        kind,
        input,
        partition_by,
        time_column,
        intervals,
        location,
    })
}

/// The length in milliseconds of a day-time interval literal (`INTERVAL '5' MINUTE`,
/// `INTERVAL '1:30' HOUR TO MINUTE`, `INTERVAL '2.5' SECOND`).
///
/// # Errors
/// A year-month interval (`MONTH`, `YEAR`) has no fixed length in milliseconds; any other
/// expression is not an interval literal.
pub fn interval_ms(expr: &ast::Expr) -> std::result::Result<i64, String> {
    let ast::Expr::Interval(iv) = expr else {
        return Err(format!(
            "Expected: an interval literal such as INTERVAL '1' HOUR, found: {expr}"
        ));
    };
    let text = match iv.value.as_ref() {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) => s.clone(),
            ast::Value::Number(n, _) => n.clone(),
            other => return Err(format!("invalid interval value {other}")),
        },
        ast::Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            ast::Expr::Value(v) => format!("-{}", v.value).replace('\'', ""),
            other => return Err(format!("invalid interval value {other}")),
        },
        other => return Err(format!("invalid interval value {other}")),
    };
    let unit_ms = |f: &ast::DateTimeField| -> std::result::Result<f64, String> {
        use ast::DateTimeField as F;
        Ok(match f {
            F::Day | F::Days => 86_400_000.0,
            F::Hour | F::Hours => 3_600_000.0,
            F::Minute | F::Minutes => 60_000.0,
            F::Second | F::Seconds => 1000.0,
            F::Millisecond | F::Milliseconds => 1.0,
            F::Week(_) | F::Weeks => 7.0 * 86_400_000.0,
            F::Month | F::Months | F::Year | F::Years => {
                return Err(format!(
                    "a window size must be a day-time interval; {f} has no fixed length"
                ))
            }
            other => return Err(format!("unsupported interval unit {other}")),
        })
    };
    let leading = iv
        .leading_field
        .clone()
        .unwrap_or(ast::DateTimeField::Second);
    let (negative, body) = match text.trim().strip_prefix('-') {
        Some(rest) => (true, rest.to_string()),
        None => (false, text.trim().to_string()),
    };
    let total = match &iv.last_field {
        None => {
            // '5' MINUTE, or Flink-style '5 MINUTE' / '10 SECONDS' inside the string.
            let mut words = body.split_whitespace();
            let num = words.next().unwrap_or("");
            let value: f64 = num
                .parse()
                .map_err(|_| format!("invalid interval value '{text}'"))?;
            let unit = match words.next() {
                Some(u) => {
                    let u = u.to_ascii_uppercase();
                    let u = u.trim_end_matches('S');
                    match u {
                        "DAY" => 86_400_000.0,
                        "HOUR" => 3_600_000.0,
                        "MINUTE" => 60_000.0,
                        "SECOND" => 1000.0,
                        "MILLISECOND" => 1.0,
                        _ => return Err(format!("invalid interval unit in '{text}'")),
                    }
                }
                None => unit_ms(&leading)?,
            };
            value * unit
        }
        Some(last) => {
            // 'a:b:c' with fields from leading to last, e.g. '1:30' HOUR TO MINUTE,
            // '1 02:00:00' DAY TO SECOND.
            let parts: Vec<&str> = body.split([':', ' ']).collect();
            use ast::DateTimeField as F;
            let order = [F::Day, F::Hour, F::Minute, F::Second];
            let pos = |f: &F| order.iter().position(|o| o == f);
            let (Some(a), Some(b)) = (pos(&leading), pos(last)) else {
                return Err(format!("unsupported interval {leading} TO {last}"));
            };
            if b < a || parts.len() != b - a + 1 {
                return Err(format!(
                    "invalid interval value '{text}' for {leading} TO {last}"
                ));
            }
            let mut total = 0.0;
            for (k, part) in parts.iter().enumerate() {
                let v: f64 = part
                    .parse()
                    .map_err(|_| format!("invalid interval value '{text}'"))?;
                total += v * unit_ms(&order[a + k])?;
            }
            total
        }
    };
    let ms = total.round() as i64;
    Ok(if negative { -ms } else { ms })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::datatypes::TimeUnit;

    fn one(sql: &str) -> Statement {
        let mut v = parse_script(sql).unwrap();
        assert_eq!(v.len(), 1);
        v.remove(0).statement
    }

    #[test]
    fn create_table_with_watermark_computed_and_options() {
        let s = one(
            "CREATE TABLE t (\n  a INT NOT NULL,\n  ts TIMESTAMP(3),\n  b AS a + 1,\n  \
             WATERMARK FOR ts AS ts - INTERVAL '1' MONTH\n) WITH ('connector' = 'filesystem', 'path' = 'x.csv')",
        );
        let Statement::CreateTable(ct) = s else {
            panic!("not a create table")
        };
        assert_eq!(ct.name, "t");
        assert_eq!(ct.columns.len(), 3);
        assert_eq!(
            ct.columns[1].data_type,
            Some(DataType::Timestamp(TimeUnit::Millisecond, None))
        );
        assert!(ct.columns[0].not_null);
        assert_eq!(
            ct.columns[2].computed.as_ref().unwrap().to_string(),
            "a + 1"
        );
        let wm = ct.watermark.unwrap();
        assert_eq!(wm.column, "ts");
        assert_eq!(wm.expr.to_string(), "ts - INTERVAL '1' MONTH");
        assert_eq!(ct.options[1], ("path".to_string(), "x.csv".to_string()));
    }

    #[test]
    fn splits_statements_and_skips_comments() {
        let v = parse_script(
            "-- a comment; with a semicolon\nSET 'a' = 'b';\n/* block ; */ SHOW TABLES;\n\n",
        )
        .unwrap();
        assert_eq!(v.len(), 2);
        assert!(
            matches!(&v[0].statement, Statement::Set { pair: Some((k, v)) } if k == "a" && v == "b")
        );
        assert!(matches!(v[1].statement, Statement::ShowTables));
        assert_eq!(v[1].location.line, 3);
    }

    /// A statement set is one statement: its `;`s separate the INSERTs inside it, up to
    /// `END` (also under EXPLAIN); the client's `BEGIN STATEMENT SET` / `END` are their own.
    #[test]
    fn a_statement_set_spans_its_semicolons() {
        let v = parse_script(
            "EXECUTE STATEMENT SET BEGIN\n INSERT INTO a SELECT x FROM t;\n\
             INSERT INTO b SELECT y FROM t; END; SHOW TABLES;\n\
             EXPLAIN FORMAT DOT STATEMENT SET BEGIN INSERT INTO a SELECT x FROM t; END;\n\
             BEGIN STATEMENT SET; END;",
        )
        .unwrap();
        assert_eq!(v.len(), 5);
        let Statement::StatementSet(inserts) = &v[0].statement else {
            panic!("{:?}", v[0].statement)
        };
        let tables: Vec<&str> = inserts.iter().map(|i| i.table.as_str()).collect();
        assert_eq!(tables, ["a", "b"]);
        assert!(matches!(v[1].statement, Statement::ShowTables));
        assert!(matches!(
            &v[2].statement,
            Statement::ExplainStatementSet { inserts, dot: true } if inserts.len() == 1
        ));
        assert!(matches!(v[3].statement, Statement::BeginStatementSet));
        assert!(matches!(v[4].statement, Statement::EndStatementSet));
        // A CASE ... END inside an INSERT does not close the set.
        let v = parse_script(
            "EXECUTE STATEMENT SET BEGIN INSERT INTO a SELECT CASE WHEN x > 1 THEN 1 END FROM t;\n\
             INSERT INTO b SELECT y FROM t; END; SHOW TABLES",
        )
        .unwrap();
        assert!(matches!(&v[0].statement, Statement::StatementSet(i) if i.len() == 2));
        assert!(matches!(v[1].statement, Statement::ShowTables));
        let err = parse_script("EXECUTE STATEMENT SET BEGIN INSERT INTO a SELECT x FROM t;")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("Expected: END to close STATEMENT SET BEGIN"),
            "{err}"
        );
    }

    #[test]
    fn lifts_window_tvf_positional_and_named() {
        let Statement::Query(q) = one(
            "SELECT * FROM TABLE(HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND, INTERVAL '1' SECOND))",
        ) else {
            panic!()
        };
        let call = &q.window_tvfs[0];
        assert_eq!(call.kind, TvfKind::Hop);
        assert_eq!(call.input, "t");
        assert_eq!(call.time_column, "ts");
        assert_eq!(call.interval("SLIDE"), Some(2000));
        assert_eq!(call.interval("SIZE"), Some(10_000));
        assert_eq!(call.interval("OFFSET"), Some(1000));
        assert!(q.query.to_string().contains(&call.placeholder));

        let Statement::Query(q) = one(
            "SELECT * FROM TABLE(SESSION(DATA => TABLE t PARTITION BY k, TIMECOL => DESCRIPTOR(ts), GAP => INTERVAL '1' MINUTE))",
        ) else {
            panic!()
        };
        assert_eq!(q.window_tvfs[0].partition_by, vec!["k".to_string()]);
        assert_eq!(q.window_tvfs[0].interval("GAP"), Some(60_000));
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = parse_script("SELECT 1;\nCREATE TABLE t (a INT,, b INT)").unwrap_err();
        assert!(e.to_string().contains("Line: 2, Column: 23"), "{e}");
        let e = parse_script("SELEC 1").unwrap_err();
        assert!(e.to_string().contains("Line: 1, Column: 1"), "{e}");
        let e = parse_script("SELECT * FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts)))").unwrap_err();
        assert!(e.to_string().contains("missing its SIZE"), "{e}");
    }

    #[test]
    fn parses_job_statements() {
        let v = parse_script("SHOW JOBS; STOP JOB 'abc-1' WITH SAVEPOINT; stop job 'x';").unwrap();
        assert!(matches!(v[0].statement, Statement::ShowJobs));
        assert!(
            matches!(&v[1].statement, Statement::StopJob { id, savepoint: true } if id == "abc-1")
        );
        assert!(
            matches!(&v[2].statement, Statement::StopJob { id, savepoint: false } if id == "x")
        );
        let e = parse_script("STOP JOB abc").unwrap_err().to_string();
        assert!(
            e.contains("Expected: the job id") && e.contains("Column: 10"),
            "{e}"
        );
        let e = parse_script("STOP JOB 'a' WITH NOTHING")
            .unwrap_err()
            .to_string();
        assert!(e.contains("Expected: SAVEPOINT or DRAIN"), "{e}");
    }

    #[test]
    fn parses_match_recognize_into_a_clause() {
        let Statement::Query(q) = one(
            "SELECT * FROM ticks MATCH_RECOGNIZE (PARTITION BY s ORDER BY ts MEASURES A.p AS p PATTERN (A B+?) WITHIN INTERVAL '1' SECOND DEFINE A AS A.p > 1)",
        ) else {
            panic!()
        };
        assert_eq!(q.match_recognize.len(), 1);
        let mr = &q.match_recognize[0];
        assert_eq!(mr.input, "ticks");
        assert_eq!(mr.partition_by.len(), 1);
        assert_eq!(mr.order_by[0].expr.to_string(), "ts");
        assert_eq!(mr.measures.len(), 1);
        assert_eq!(mr.measures[0].0.to_string(), "A.p");
        assert_eq!(mr.measures[0].1, "p");
        use sluice_common::row_pattern::RowPattern;
        assert_eq!(
            mr.pattern,
            RowPattern::Concat(vec![
                RowPattern::var("A"),
                RowPattern::repeat(RowPattern::var("B"), 1, None, false)
            ])
        );
        assert_eq!(mr.within_ms, Some(1000));
        assert_eq!(mr.skip, SkipTo::PastLastRow);
        assert!(!mr.all_rows);
        assert_eq!(mr.define[0].0, "A");
        assert_eq!(mr.define[0].1.to_string(), "A.p > 1");

        let Statement::Query(q) = one(
            "SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts ALL ROWS PER MATCH \
             AFTER MATCH SKIP TO FIRST B PATTERN (PERMUTE(A, B) C{2,}?) SUBSET U = (A, B) \
             DEFINE A AS x > 1) AS m",
        ) else {
            panic!()
        };
        let mr = &q.match_recognize[0];
        assert!(mr.all_rows);
        assert_eq!(mr.skip, SkipTo::First("B".into()));
        assert_eq!(
            mr.subsets,
            vec![("U".to_string(), vec!["A".to_string(), "B".to_string()])]
        );
        assert_eq!(mr.pattern.to_string(), "PERMUTE(A, B) C{2,}?");

        let err = |sql: &str| parse_script(sql).unwrap_err().to_string();
        let e = err(
            "SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts\nPATTERN (A B{3,1}) DEFINE A AS x > 1)",
        );
        assert!(
            e.contains("PATTERN: ") && e.contains("Line: 2, Column: 13"),
            "{e}"
        );
        let e = err("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A))");
        assert!(e.contains("needs DEFINE"), "{e}");
        let e = err("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) PATTERN (B) DEFINE A AS true)");
        assert!(e.contains("second PATTERN"), "{e}");
        let e = err("SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts MEASURES A.x PATTERN (A) DEFINE A AS true)");
        assert!(e.contains("needs a name"), "{e}");
    }

    #[test]
    fn interval_lengths() {
        let p = |s: &str| {
            let mut p = Parser::new(&DIALECT).try_with_sql(s).unwrap();
            interval_ms(&p.parse_expr().unwrap())
        };
        assert_eq!(p("INTERVAL '1' HOUR"), Ok(3_600_000));
        assert_eq!(p("INTERVAL '1:30' HOUR TO MINUTE"), Ok(5_400_000));
        assert_eq!(p("INTERVAL '0.5' SECOND"), Ok(500));
        assert_eq!(p("INTERVAL '10' MINUTES"), Ok(600_000));
        assert!(p("INTERVAL '1' MONTH").is_err());
    }
}
