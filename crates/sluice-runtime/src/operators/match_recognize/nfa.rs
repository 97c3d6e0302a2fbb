//! Row pattern matching for `MATCH_RECOGNIZE`: compiling a [`RowPattern`] to an automaton,
//! a streaming matcher per partition ([`Matcher`]), and a backtracking reference matcher
//! ([`reference_matches`]) that implements the SQL:2016 definition directly (used by the
//! tests to check the streaming matcher).
//!
//! # Semantics (SQL:2016, ISO/IEC 9075-2 §7.6 and ISO/IEC TR 19075-5 §4)
//!
//! Rows of one partition are numbered by increasing `u64` row numbers and carry a
//! non-decreasing event time in ms. A *match* maps consecutive rows, one variable per row.
//!
//! * **Search order.** Matches are sought from the earliest start row. At a start row the
//!   *most preferred* match wins; if there is none, the next row is tried. After a match at
//!   start `s` ending at `e`, `AFTER MATCH SKIP` ([`AfterMatchSkip`]) picks where the search
//!   resumes: `PAST LAST ROW` → `e + 1`, `TO NEXT ROW` → `s + 1`, `TO FIRST v` / `TO LAST v`
//!   → the first / last row mapped to `v`. Skipping to a variable not present in the match,
//!   or to the match's first row (which would find the same match forever), is a run-time
//!   error in SQL:2016 ([`MatchError::SkipTarget`]).
//! * **Preference.** Among the matches at one start row, SQL:2016 prefers the one a
//!   backtracking matcher finds first: alternation prefers its left branch, a greedy
//!   quantifier more iterations and a reluctant one fewer, `PERMUTE` its permutations in
//!   lexicographic order, and concatenation is lexicographic on its parts. A greedy quantifier
//!   gives rows back when what follows needs them (`A+ B` where every row satisfies both: `A`
//!   takes all rows but the last, which goes to `B`).
//! * **Empty iterations.** If a quantified group's body can match the empty sequence, an
//!   iteration that maps no row *ends the loop* (the remaining required iterations count as
//!   empty too, since they could only repeat it), so there is no infinite loop. Patterns that
//!   can match the empty sequence as a whole are rejected by [`CompiledPattern::compile`].
//! * **`WITHIN`.** With a bound `within_ms`, a (partial) match may take a row only if
//!   `row.ts - ts(first row of the match) < within_ms` (strictly less; Flink's
//!   `isStateTimedOut`).
//! * **`DEFINE`.** Whether row `r` may be mapped to variable `V` is asked through
//!   [`Conditions::test`], which sees the partial match so far ([`Path`]), so conditions such
//!   as `B.price > A.price` or `AVG(A.price) > 10` work. A variable without a `DEFINE` is a
//!   callback returning `true`.
//!
//! # The automaton
//!
//! The pattern tree is compiled into a Thompson-style NFA of *variable states* (consume one
//! row, mapping it to a variable), ordered *split states* (epsilon moves tried in order) and
//! one *accept state*. Alternation and `PERMUTE` (expanded to the alternation of its
//! permutations) become splits; a quantifier `{n,m}` is expanded into copies of its body
//! (`n` mandatory copies, then optional ones, or a loop for an unbounded maximum), each
//! optional iteration a split that puts "iterate" first when greedy and "stop" first when
//! reluctant. So the order of split targets *is* the SQL:2016 preference order.
//!
//! The "empty iteration ends the loop" rule is built into the states: a body that can match
//! empty is compiled with a flag "has this iteration consumed a row yet?" folded into the
//! states (one copy of the body's epsilon part per nesting context); reaching the end of the
//! body with the flag unset leads out of the loop rather than back to its head. So the
//! epsilon graph is acyclic and the future of a partial match depends only on its automaton
//! state, its position and (for history-dependent conditions) its path.
//!
//! Epsilon moves are resolved at compile time: for the start and for every variable state,
//! the ordered list of variable states (and possibly *accept*) reachable without consuming a
//! row is precomputed (depth-first in split order, keeping the first occurrence of each
//! state, as a backtracking matcher would meet them; a later duplicate has exactly the same
//! future and loses). At run time a *thread* is therefore just (variable state, path).
//!
//! # The streaming matcher (a Pike VM)
//!
//! Every row at or after the current search position starts an *attempt* (a candidate start
//! row). An attempt holds its live threads in preference order and at most one *candidate*
//! (complete) match. On each row every thread of every attempt is advanced by one row: its
//! variable's condition is tested; if it holds, the thread continues into each state of the
//! precomputed successor list, in order. Reaching *accept* makes the thread's path the
//! attempt's candidate and kills every less preferred thread of that attempt; more preferred
//! threads live on and may still replace the candidate. The candidate is *final* once no
//! thread of its attempt is alive (they failed, ran out of `WITHIN` time, or the input ended).
//! Processing threads in order is exactly backtracking order, so the final candidate is the
//! most preferred match.
//!
//! Attempts are resolved in start order: the earliest attempt decides; a final match is
//! emitted and the skip strategy discards the attempts before the new search position; an
//! attempt without threads and candidate is no match. A complete match of a later attempt is
//! *held* until every earlier attempt is resolved (it may still be discarded by an earlier
//! match's skip).
//!
//! With history-free conditions (`MatchOptions::history_free`: a condition depends only on
//! the current row), two threads of one attempt in the same state at the same row have the
//! same future, so only the first (most preferred) is kept, Pike-VM style; the number of
//! threads per attempt is then bounded by the number of states. With history-dependent
//! conditions every path is kept.
//!
//! # The shared path buffer
//!
//! Paths are stored in an arena of nodes `(row, variable, parent, reference count)`: a thread
//! points at the node of its last row, whose parent chain is the partial match in reverse.
//! When one thread branches into several, the branches share one node, so a prefix is stored
//! once however many threads extend it. Nodes are reference-counted (by threads, candidates
//! and child nodes) and recycled through a free list, so the steady state allocates nothing
//! per row; when a matcher has no attempt left its buffers are emptied. An idle matcher is a
//! handful of words with empty `Vec`s.

// The one import of the syntax tree: change only this line to build the file elsewhere.
use sluice_common::row_pattern::*;

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// A pattern variable: its index in [`RowPattern::variables`] (and
/// [`CompiledPattern::variables`]).
pub type VarId = u32;

/// Most automaton states a compiled pattern may have (after expanding bounded quantifiers
/// and `PERMUTE`); larger patterns are refused with [`CompileError::TooLarge`].
pub const MAX_STATES: usize = 10_000;
/// Most elements of one `PERMUTE` (6 elements already expand to 720 permutations).
pub const MAX_PERMUTE_ELEMENTS: usize = 6;
/// Most entries of all precomputed epsilon-closure lists together.
pub const MAX_CLOSURE_ENTRIES: usize = 1_000_000;
/// Most compilation steps (bounds the work for patterns like `(){4000000000}`).
const MAX_COMPILE_STEPS: u64 = 1_000_000;

/// "No node" / "no candidate".
const NIL: u32 = u32::MAX;
/// The accept state in closure lists.
const ACCEPT: u32 = u32::MAX;

// ------------------------------------------------------------------------------------------
// Errors and options
// ------------------------------------------------------------------------------------------

/// Why a pattern could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompileError {
    /// The tree breaks a shape rule of [`RowPattern::validate`].
    Invalid(String),
    /// The pattern can match the empty row sequence ([`RowPattern::can_match_empty`]).
    MatchesEmpty,
    /// A `PERMUTE` has more than [`MAX_PERMUTE_ELEMENTS`] elements.
    PermuteTooLarge {
        /// Number of elements found.
        elements: usize,
    },
    /// The automaton would exceed a size limit ([`MAX_STATES`], [`MAX_CLOSURE_ENTRIES`]).
    TooLarge {
        /// What exceeded its limit.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// `AFTER MATCH SKIP TO FIRST/LAST v` names a variable index the pattern does not have.
    UnknownSkipVariable {
        /// The offending index.
        var: VarId,
    },
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompileError::Invalid(m) => write!(f, "Invalid row pattern: {m}"),
            CompileError::MatchesEmpty => f.write_str(
                "Row pattern can match an empty sequence of rows, which is not supported",
            ),
            CompileError::PermuteTooLarge { elements } => write!(
                f,
                "PERMUTE with {elements} elements is not supported (at most {MAX_PERMUTE_ELEMENTS})"
            ),
            CompileError::TooLarge { what, limit } => {
                write!(f, "Row pattern is too large: more than {limit} {what}")
            }
            CompileError::UnknownSkipVariable { var } => {
                write!(f, "AFTER MATCH SKIP names unknown pattern variable #{var}")
            }
        }
    }
}

impl std::error::Error for CompileError {}

/// A run-time matching error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MatchError {
    /// `AFTER MATCH SKIP TO FIRST/LAST var` after a match that does not map `var`
    /// (`target: None`) or where the target is the match's first row (`target: Some(first)`),
    /// which SQL:2016 makes an exception (the search would find the same match forever).
    SkipTarget {
        /// The skip variable.
        var: VarId,
        /// First row of the match.
        match_start: u64,
        /// The row the skip would go to, if `var` is mapped.
        target: Option<u64>,
    },
    /// Rows must arrive with strictly increasing row numbers.
    RowOrder {
        /// The previous row number.
        previous: u64,
        /// The offending row number.
        row: u64,
    },
    /// Rows must arrive with non-decreasing event time.
    TimeOrder {
        /// The previous row's time.
        previous_ts: i64,
        /// The offending row's time.
        ts: i64,
    },
    /// A snapshot does not fit the pattern it is restored with.
    Restore(String),
}

impl fmt::Display for MatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MatchError::SkipTarget {
                var,
                match_start,
                target: None,
            } => write!(
                f,
                "AFTER MATCH SKIP failed: pattern variable #{var} is not present in the match starting at row {match_start}"
            ),
            MatchError::SkipTarget {
                var, match_start, ..
            } => write!(
                f,
                "AFTER MATCH SKIP failed: cannot skip to the first row of the match (row {match_start}, variable #{var})"
            ),
            MatchError::RowOrder { previous, row } => {
                write!(f, "row {row} arrived after row {previous}: rows must be in increasing order")
            }
            MatchError::TimeOrder { previous_ts, ts } => write!(
                f,
                "row time {ts} arrived after {previous_ts}: rows must be in event-time order"
            ),
            MatchError::Restore(m) => write!(f, "cannot restore matcher state: {m}"),
        }
    }
}

impl std::error::Error for MatchError {}

/// `AFTER MATCH SKIP`: where the search resumes after a match at start `s` ending at `e`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AfterMatchSkip {
    /// `SKIP PAST LAST ROW` (the SQL default): `e + 1`.
    #[default]
    PastLastRow,
    /// `SKIP TO NEXT ROW`: `s + 1`.
    ToNextRow,
    /// `SKIP TO FIRST v`: the first row mapped to `v`.
    ToFirst(VarId),
    /// `SKIP TO LAST v` (also plain `SKIP TO v`): the last row mapped to `v`.
    ToLast(VarId),
}

/// Matching options besides the pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MatchOptions {
    /// The `AFTER MATCH SKIP` strategy.
    pub skip: AfterMatchSkip,
    /// `WITHIN` bound in ms: a match may take a row only if
    /// `row.ts - first_row.ts < within_ms`.
    pub within_ms: Option<i64>,
    /// The caller promises that [`Conditions::test`] ignores the path (depends only on the
    /// variable and the row). Enables Pike-VM deduplication of threads.
    pub history_free: bool,
}

/// What every matcher of one `MATCH_RECOGNIZE` shares: the compiled pattern and the options.
/// Matchers hold it in an [`Arc`], which keeps an idle matcher small.
#[derive(Debug)]
pub struct MatchSpec {
    /// The compiled pattern.
    pub pattern: CompiledPattern,
    /// The options.
    pub options: MatchOptions,
}

impl MatchSpec {
    /// Bundles a compiled pattern with options; fails if a skip variable is out of range.
    pub fn new(pattern: CompiledPattern, options: MatchOptions) -> Result<MatchSpec, CompileError> {
        if let AfterMatchSkip::ToFirst(v) | AfterMatchSkip::ToLast(v) = options.skip {
            if v as usize >= pattern.variables.len() {
                return Err(CompileError::UnknownSkipVariable { var: v });
            }
        }
        Ok(MatchSpec { pattern, options })
    }
}

// ------------------------------------------------------------------------------------------
// Matches, paths and conditions
// ------------------------------------------------------------------------------------------

/// A match: its rows in order, each with the variable it is mapped to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Match {
    /// `(row, variable)` for every row of the match, in row order (never empty).
    pub rows: Vec<(u64, VarId)>,
}

impl Match {
    /// The first row of the match.
    pub fn start(&self) -> u64 {
        self.rows[0].0
    }
    /// The last row of the match.
    pub fn end(&self) -> u64 {
        self.rows[self.rows.len() - 1].0
    }
}

/// The partial match a condition is evaluated against: the rows already mapped (not
/// including the row being tested), in row order. Backed either by the matcher's shared
/// node buffer or by a slice.
#[derive(Clone, Copy)]
pub struct Path<'a> {
    repr: PathRepr<'a>,
}

#[derive(Clone, Copy)]
enum PathRepr<'a> {
    /// Nodes from `tail` back through parents; `first_row` is the attempt's start.
    Arena {
        nodes: &'a [Node],
        tail: u32,
        first_row: u64,
    },
    Slice(&'a [(u64, VarId)]),
}

impl<'a> Path<'a> {
    /// A path over a slice of `(row, variable)` in row order.
    pub fn from_slice(rows: &'a [(u64, VarId)]) -> Path<'a> {
        Path {
            repr: PathRepr::Slice(rows),
        }
    }

    fn arena(nodes: &'a [Node], tail: u32, first_row: u64) -> Path<'a> {
        Path {
            repr: PathRepr::Arena {
                nodes,
                tail,
                first_row,
            },
        }
    }

    /// Number of rows mapped so far. O(1).
    pub fn len(&self) -> usize {
        match self.repr {
            PathRepr::Arena { tail: NIL, .. } => 0,
            PathRepr::Arena { nodes, tail, .. } => nodes[tail as usize].len as usize,
            PathRepr::Slice(s) => s.len(),
        }
    }

    /// Whether no row is mapped yet (the row being tested would be the first of the match).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first row of the match, if any row is mapped. O(1).
    pub fn first_row(&self) -> Option<u64> {
        match self.repr {
            PathRepr::Arena { tail: NIL, .. } => None,
            PathRepr::Arena { first_row, .. } => Some(first_row),
            PathRepr::Slice(s) => s.first().map(|r| r.0),
        }
    }

    /// The last mapped row and its variable. O(1).
    pub fn last(&self) -> Option<(u64, VarId)> {
        self.iter_rev().next()
    }

    /// The last row mapped to `var`: walks back from the end, so it is cheap when `var` was
    /// mapped recently.
    pub fn last_row_of(&self, var: VarId) -> Option<u64> {
        self.iter_rev().find(|r| r.1 == var).map(|r| r.0)
    }

    /// The first row mapped to `var`. O(length).
    pub fn first_row_of(&self, var: VarId) -> Option<u64> {
        self.iter_rev().filter(|r| r.1 == var).last().map(|r| r.0)
    }

    /// How many rows are mapped to `var`. O(length).
    pub fn count_of(&self, var: VarId) -> usize {
        self.iter_rev().filter(|r| r.1 == var).count()
    }

    /// The mapped `(row, variable)` pairs from the last to the first; allocation-free.
    pub fn iter_rev(&self) -> PathRevIter<'a> {
        PathRevIter {
            repr: match self.repr {
                PathRepr::Arena { nodes, tail, .. } => RevRepr::Arena { nodes, cur: tail },
                PathRepr::Slice(s) => RevRepr::Slice(s, s.len()),
            },
        }
    }

    /// Calls `f(row, variable)` for the mapped rows in row order. Allocation-free for paths
    /// of up to 64 rows (longer ones are collected first).
    pub fn for_each(&self, mut f: impl FnMut(u64, VarId)) {
        match self.repr {
            PathRepr::Slice(s) => s.iter().for_each(|&(r, v)| f(r, v)),
            PathRepr::Arena { .. } => {
                let len = self.len();
                if len <= 64 {
                    let mut buf = [(0u64, 0 as VarId); 64];
                    for (i, x) in self.iter_rev().enumerate() {
                        buf[len - 1 - i] = x;
                    }
                    buf[..len].iter().for_each(|&(r, v)| f(r, v));
                } else {
                    self.to_vec().into_iter().for_each(|(r, v)| f(r, v));
                }
            }
        }
    }

    /// The mapped `(row, variable)` pairs in row order (allocates).
    pub fn to_vec(&self) -> Vec<(u64, VarId)> {
        let mut v: Vec<_> = self.iter_rev().collect();
        v.reverse();
        v
    }
}

impl fmt::Debug for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.to_vec()).finish()
    }
}

/// Iterator over a [`Path`] from its last row to its first.
pub struct PathRevIter<'a> {
    repr: RevRepr<'a>,
}

enum RevRepr<'a> {
    Arena { nodes: &'a [Node], cur: u32 },
    Slice(&'a [(u64, VarId)], usize),
}

impl Iterator for PathRevIter<'_> {
    type Item = (u64, VarId);
    fn next(&mut self) -> Option<(u64, VarId)> {
        match &mut self.repr {
            RevRepr::Arena { nodes, cur } => {
                if *cur == NIL {
                    return None;
                }
                let n = &nodes[*cur as usize];
                *cur = n.parent;
                Some((n.row, n.var))
            }
            RevRepr::Slice(s, i) => {
                if *i == 0 {
                    return None;
                }
                *i -= 1;
                Some(s[*i])
            }
        }
    }
}

/// The `DEFINE` conditions, supplied by the caller.
pub trait Conditions {
    /// Can `row` be mapped to variable `var`, given the rows already mapped in this partial
    /// match (`path`, in row order; empty when `row` would be the match's first row)?
    fn test(&mut self, var: VarId, row: u64, path: &Path<'_>) -> bool;
}

impl<F: FnMut(VarId, u64, &Path<'_>) -> bool> Conditions for F {
    fn test(&mut self, var: VarId, row: u64, path: &Path<'_>) -> bool {
        self(var, row, path)
    }
}

/// The `AFTER MATCH SKIP` target row for a match, or the SQL:2016 error.
fn skip_target(skip: AfterMatchSkip, rows: &[(u64, VarId)]) -> Result<u64, MatchError> {
    let s = rows[0].0;
    let e = rows[rows.len() - 1].0;
    let to_var = |var: VarId, found: Option<&(u64, VarId)>| match found {
        Some(&(r, _)) if r != s => Ok(r),
        other => Err(MatchError::SkipTarget {
            var,
            match_start: s,
            target: other.map(|r| r.0),
        }),
    };
    match skip {
        AfterMatchSkip::PastLastRow => Ok(e.saturating_add(1)),
        AfterMatchSkip::ToNextRow => Ok(s.saturating_add(1)),
        AfterMatchSkip::ToFirst(v) => to_var(v, rows.iter().find(|r| r.1 == v)),
        AfterMatchSkip::ToLast(v) => to_var(v, rows.iter().rfind(|r| r.1 == v)),
    }
}

fn expired(within_ms: Option<i64>, ts: i64, start_ts: i64) -> bool {
    within_ms.is_some_and(|w| ts.saturating_sub(start_ts) >= w)
}

// ------------------------------------------------------------------------------------------
// Compilation
// ------------------------------------------------------------------------------------------

/// A pattern compiled to an automaton with precomputed epsilon closures (see the module
/// docs). Immutable; share it between matchers through [`MatchSpec`].
#[derive(Debug, Clone)]
pub struct CompiledPattern {
    variables: Vec<String>,
    /// Per state (a variable state, numbered densely): its variable.
    state_var: Vec<VarId>,
    /// Per state: range in `closures` of the states reached after consuming a row.
    state_succ: Vec<(u32, u32)>,
    /// Range in `closures` of the states a match starts in.
    start: (u32, u32),
    /// Ordered closure lists: state ids, or [`ACCEPT`].
    closures: Vec<u32>,
    fingerprint: u64,
}

/// Build-time automaton state.
enum BState {
    Var {
        var: VarId,
        next: u32,
    },
    Split(Vec<u32>),
    Accept,
    /// A loop head not yet filled in.
    Hole,
}

struct Builder<'a> {
    states: Vec<BState>,
    split_cache: HashMap<Vec<u32>, u32>,
    steps: u64,
    variables: &'a [String],
}

impl Builder<'_> {
    fn add(&mut self, s: BState) -> Result<u32, CompileError> {
        if self.states.len() >= MAX_STATES {
            return Err(CompileError::TooLarge {
                what: "automaton states",
                limit: MAX_STATES,
            });
        }
        self.states.push(s);
        Ok((self.states.len() - 1) as u32)
    }

    /// An ordered split (duplicates removed: a later duplicate target can only repeat what
    /// the first already offered). Identical splits are shared.
    fn split(&mut self, targets: Vec<u32>) -> Result<u32, CompileError> {
        let mut t: Vec<u32> = Vec::with_capacity(targets.len());
        for x in targets {
            if !t.contains(&x) {
                t.push(x);
            }
        }
        if t.len() == 1 {
            return Ok(t[0]);
        }
        if let Some(&s) = self.split_cache.get(&t) {
            return Ok(s);
        }
        let s = self.add(BState::Split(t.clone()))?;
        self.split_cache.insert(t, s);
        Ok(s)
    }

    /// Compiles `p` in front of the continuation `cont`.
    ///
    /// `depth` is the number of enclosing loops whose body can match empty. A *context*
    /// `c` in `0..=depth` says that the current iterations of the outermost `c` of those loops
    /// have consumed a row and the inner `depth - c` have not (consumption of an inner
    /// iteration is consumption of the outer ones, so this prefix form covers all cases;
    /// after any row is consumed the context is `depth`). `cont[c]` is where to go after `p`
    /// in context `c`; the result is `p`'s entry state per context.
    fn compile(
        &mut self,
        p: &RowPattern,
        depth: usize,
        cont: &[u32],
    ) -> Result<Vec<u32>, CompileError> {
        debug_assert_eq!(cont.len(), depth + 1);
        self.steps += 1;
        if self.steps > MAX_COMPILE_STEPS {
            return Err(CompileError::TooLarge {
                what: "compilation steps",
                limit: MAX_COMPILE_STEPS as usize,
            });
        }
        match p {
            RowPattern::Var(name) => {
                let var = self
                    .variables
                    .iter()
                    .position(|v| v == name)
                    .expect("variables() lists every variable") as VarId;
                // Consuming a row sets every flag: continue in the full context.
                let s = self.add(BState::Var {
                    var,
                    next: cont[depth],
                })?;
                Ok(vec![s; depth + 1])
            }
            RowPattern::Concat(ps) => {
                let mut k = cont.to_vec();
                for q in ps.iter().rev() {
                    k = self.compile(q, depth, &k)?;
                }
                Ok(k)
            }
            RowPattern::Alt(ps) => {
                let entries = ps
                    .iter()
                    .map(|q| self.compile(q, depth, cont))
                    .collect::<Result<Vec<_>, _>>()?;
                (0..=depth)
                    .map(|c| self.split(entries.iter().map(|e| e[c]).collect()))
                    .collect()
            }
            RowPattern::Permute(ps) => {
                if ps.len() > MAX_PERMUTE_ELEMENTS {
                    return Err(CompileError::PermuteTooLarge { elements: ps.len() });
                }
                let alt = RowPattern::Alt(
                    permutations(ps.len())
                        .into_iter()
                        .map(|perm| {
                            RowPattern::Concat(perm.into_iter().map(|i| ps[i].clone()).collect())
                        })
                        .collect(),
                );
                self.compile(&alt, depth, cont)
            }
            RowPattern::Repeat {
                body,
                min,
                max,
                greedy,
            } => self.repeat(body, *min, *max, *greedy, depth, cont),
        }
    }

    fn repeat(
        &mut self,
        body: &RowPattern,
        min: u32,
        max: Option<u32>,
        greedy: bool,
        depth: usize,
        exit: &[u32],
    ) -> Result<Vec<u32>, CompileError> {
        // A body that can match empty gets a flag of its own (one more context level).
        let inner = if body.can_match_empty() {
            depth + 1
        } else {
            depth
        };
        // After the body: an iteration that consumed nothing (contexts below `inner`) leaves
        // the loop in that context; a consuming one (context `inner`) goes on to `next`.
        let body_cont = |next: u32| -> Vec<u32> {
            let mut v = exit[..inner].to_vec();
            v.push(next);
            v
        };
        let order = |enter: u32, leave: u32| {
            if greedy {
                vec![enter, leave]
            } else {
                vec![leave, enter]
            }
        };
        match max {
            None => {
                // The loop head: "one more iteration or leave", after `max(min, 1)`
                // iterations, in the full context (any iteration before it consumed). Its
                // body copy `be` also serves as the last mandatory iteration when `min > 0`.
                let head = self.add(BState::Hole)?;
                let be = self.compile(body, inner, &body_cont(head))?;
                let mut t = order(be[depth], exit[depth]);
                t.dedup();
                self.states[head as usize] = BState::Split(t);
                if min == 0 {
                    (0..=depth)
                        .map(|c| {
                            if c == depth {
                                Ok(head)
                            } else {
                                self.split(order(be[c], exit[c]))
                            }
                        })
                        .collect()
                } else {
                    // `be` is iteration `min - 1`; compile iterations `min - 2` down to 0.
                    let mut first = be;
                    for _ in 1..min {
                        first = self.compile(body, inner, &body_cont(first[depth]))?;
                    }
                    Ok(first[..=depth].to_vec())
                }
            }
            Some(max) => {
                let mut next = exit[depth];
                for i in (0..max).rev() {
                    let be = self.compile(body, inner, &body_cont(next))?;
                    if i == 0 {
                        return (0..=depth)
                            .map(|c| {
                                if min > 0 {
                                    Ok(be[c])
                                } else {
                                    self.split(order(be[c], exit[c]))
                                }
                            })
                            .collect();
                    }
                    next = if i < min {
                        be[depth]
                    } else {
                        self.split(order(be[depth], exit[depth]))?
                    };
                }
                Err(CompileError::Invalid(
                    "quantifier upper bound must be at least 1".into(),
                ))
            }
        }
    }
}

/// All permutations of `0..n` in lexicographic order.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    fn rec(rest: &mut Vec<usize>, cur: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if rest.is_empty() {
            out.push(cur.clone());
            return;
        }
        for i in 0..rest.len() {
            let x = rest.remove(i);
            cur.push(x);
            rec(rest, cur, out);
            cur.pop();
            rest.insert(i, x);
        }
    }
    let mut out = Vec::new();
    rec(&mut (0..n).collect(), &mut Vec::new(), &mut out);
    out
}

impl CompiledPattern {
    /// Compiles a pattern. Fails if the tree is malformed ([`RowPattern::validate`]), can
    /// match the empty sequence, has a `PERMUTE` of more than [`MAX_PERMUTE_ELEMENTS`]
    /// elements, or exceeds [`MAX_STATES`] states or [`MAX_CLOSURE_ENTRIES`] closure entries.
    pub fn compile(pattern: &RowPattern) -> Result<CompiledPattern, CompileError> {
        pattern.validate().map_err(CompileError::Invalid)?;
        if pattern.can_match_empty() {
            return Err(CompileError::MatchesEmpty);
        }
        let variables = pattern.variables();
        let mut b = Builder {
            states: Vec::new(),
            split_cache: HashMap::new(),
            steps: 0,
            variables: &variables,
        };
        let accept = b.add(BState::Accept)?;
        let start = b.compile(pattern, 0, &[accept])?[0];
        let states = b.states;

        // Epsilon closures, depth-first in split order, first occurrence wins.
        let mut visited = vec![0u32; states.len()];
        let mut stamp = 0u32;
        let mut stack = Vec::new();
        let mut raw: Vec<u32> = Vec::new(); // build-state ids or ACCEPT
        let mut cache: HashMap<u32, (u32, u32)> = HashMap::new();
        let mut id_of = vec![NIL; states.len()]; // build state -> dense state id
        let mut order: Vec<u32> = Vec::new(); // dense id -> build state
        let mut closure = |from: u32,
                           raw: &mut Vec<u32>,
                           id_of: &mut Vec<u32>,
                           order: &mut Vec<u32>|
         -> Result<(u32, u32), CompileError> {
            if let Some(&r) = cache.get(&from) {
                return Ok(r);
            }
            stamp += 1;
            let begin = raw.len();
            stack.clear();
            stack.push(from);
            while let Some(s) = stack.pop() {
                if visited[s as usize] == stamp {
                    continue;
                }
                visited[s as usize] = stamp;
                match &states[s as usize] {
                    BState::Var { .. } => {
                        if id_of[s as usize] == NIL {
                            id_of[s as usize] = order.len() as u32;
                            order.push(s);
                        }
                        raw.push(s);
                    }
                    BState::Accept => raw.push(ACCEPT),
                    BState::Split(ts) => stack.extend(ts.iter().rev()),
                    BState::Hole => unreachable!("loop heads are filled"),
                }
            }
            if raw.len() > MAX_CLOSURE_ENTRIES {
                return Err(CompileError::TooLarge {
                    what: "closure entries",
                    limit: MAX_CLOSURE_ENTRIES,
                });
            }
            let r = (begin as u32, raw.len() as u32);
            cache.insert(from, r);
            Ok(r)
        };
        let start_range = closure(start, &mut raw, &mut id_of, &mut order)?;
        let mut state_succ = Vec::new();
        let mut state_var = Vec::new();
        let mut i = 0;
        while i < order.len() {
            let BState::Var { var, next } = states[order[i] as usize] else {
                unreachable!("only variable states are numbered")
            };
            state_var.push(var);
            state_succ.push(closure(next, &mut raw, &mut id_of, &mut order)?);
            i += 1;
        }
        let closures: Vec<u32> = raw
            .iter()
            .map(|&s| {
                if s == ACCEPT {
                    ACCEPT
                } else {
                    id_of[s as usize]
                }
            })
            .collect();
        if closures[start_range.0 as usize..start_range.1 as usize].contains(&ACCEPT) {
            return Err(CompileError::MatchesEmpty);
        }
        let mut fingerprint: u64 = 0xcbf2_9ce4_8422_2325;
        let mut mix = |x: u64| {
            fingerprint ^= x;
            fingerprint = fingerprint.wrapping_mul(0x0000_0100_0000_01b3);
        };
        for v in &variables {
            v.bytes().for_each(|b| mix(b as u64));
            mix(0xff);
        }
        state_var.iter().for_each(|&v| mix(v as u64));
        state_succ
            .iter()
            .chain(std::iter::once(&start_range))
            .for_each(|&(a, b)| mix(((a as u64) << 32) | b as u64));
        closures.iter().for_each(|&c| mix(c as u64));
        Ok(CompiledPattern {
            variables,
            state_var,
            state_succ,
            start: start_range,
            closures,
            fingerprint,
        })
    }

    /// The variables, indexed by [`VarId`] (same order as [`RowPattern::variables`]).
    pub fn variables(&self) -> &[String] {
        &self.variables
    }

    /// The id of a variable name (case-sensitive).
    pub fn var_id(&self, name: &str) -> Option<VarId> {
        self.variables
            .iter()
            .position(|v| v == name)
            .map(|i| i as VarId)
    }

    /// Number of automaton (variable) states; the bound on threads per attempt when
    /// deduplicating.
    pub fn num_states(&self) -> usize {
        self.state_var.len()
    }

    /// A hash of the automaton, stored in snapshots to detect restoring with another
    /// pattern.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    fn closure(&self, (a, b): (u32, u32)) -> &[u32] {
        &self.closures[a as usize..b as usize]
    }
}

// ------------------------------------------------------------------------------------------
// The shared path buffer
// ------------------------------------------------------------------------------------------

/// One mapped row of one or more partial matches.
#[derive(Debug, Clone, Copy)]
struct Node {
    row: u64,
    var: VarId,
    /// The previous row's node, or `NIL`; doubles as the free-list link.
    parent: u32,
    /// References from threads, candidates and child nodes.
    refs: u32,
    /// Path length up to and including this node.
    len: u32,
}

fn alloc_node(nodes: &mut Vec<Node>, free: &mut u32, node: Node) -> u32 {
    if *free != NIL {
        let i = *free;
        *free = nodes[i as usize].parent;
        nodes[i as usize] = node;
        i
    } else {
        assert!(
            nodes.len() < NIL as usize - 1,
            "row pattern path buffer overflow"
        );
        nodes.push(node);
        (nodes.len() - 1) as u32
    }
}

/// Drops one reference to `idx`, freeing nodes whose count reaches zero (and so their
/// parent's reference).
fn release(nodes: &mut [Node], free: &mut u32, mut idx: u32) {
    while idx != NIL {
        let n = &mut nodes[idx as usize];
        n.refs -= 1;
        if n.refs > 0 {
            return;
        }
        let parent = n.parent;
        n.parent = *free;
        *free = idx;
        idx = parent;
    }
}

fn path_vec(nodes: &[Node], tail: u32) -> Vec<(u64, VarId)> {
    Path::arena(nodes, tail, 0).to_vec()
}

// ------------------------------------------------------------------------------------------
// The streaming matcher
// ------------------------------------------------------------------------------------------

/// A partial match: an automaton state and the node of its last row.
#[derive(Debug, Clone, Copy)]
struct Thread {
    state: u32,
    node: u32,
}

/// A candidate start row.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    start_row: u64,
    start_ts: i64,
    /// Number of threads; they are contiguous in `Matcher::threads`, in attempt order.
    nthreads: u32,
    /// Node of the best complete match so far, or `NIL`.
    candidate: u32,
}

/// The set of states already taken by an attempt in the current step (deduplication).
enum Seen {
    Off,
    Small(u64),
    Large(Vec<u64>),
}

thread_local! {
    /// Scratch bitset for deduplication in automata of more than 64 states.
    static SEEN_SCRATCH: Cell<Vec<u64>> = const { Cell::new(Vec::new()) };
}

impl Seen {
    fn new(prog: &CompiledPattern, dedup: bool) -> Seen {
        if !dedup {
            Seen::Off
        } else if prog.num_states() <= 64 {
            Seen::Small(0)
        } else {
            let mut v = SEEN_SCRATCH.with(|c| c.take());
            let words = prog.num_states().div_ceil(64);
            if v.len() < words {
                v.resize(words, 0);
            }
            Seen::Large(v)
        }
    }

    /// Marks `state`; false if it was marked already.
    #[inline]
    fn insert(&mut self, state: u32) -> bool {
        match self {
            Seen::Off => true,
            Seen::Small(m) => {
                let bit = 1u64 << state;
                let fresh = *m & bit == 0;
                *m |= bit;
                fresh
            }
            Seen::Large(v) => {
                let (w, bit) = ((state / 64) as usize, 1u64 << (state % 64));
                let fresh = v[w] & bit == 0;
                v[w] |= bit;
                fresh
            }
        }
    }

    /// Unmarks everything (the marked states are exactly those of `taken`).
    fn reset(&mut self, taken: &[Thread]) {
        match self {
            Seen::Off => {}
            Seen::Small(m) => *m = 0,
            Seen::Large(v) => {
                for t in taken {
                    v[(t.state / 64) as usize] = 0;
                }
            }
        }
    }

    fn finish(self) {
        if let Seen::Large(v) = self {
            SEEN_SCRATCH.with(|c| c.set(v));
        }
    }
}

/// Where an attempt's input threads come from.
#[derive(Clone, Copy)]
enum Input {
    /// `threads[lo..hi]` of the previous step.
    Old(usize, usize),
    /// A new attempt: the start states with an empty path.
    Start,
}

/// The streaming matcher of one partition (see the module docs for the algorithm).
///
/// Feed rows in order with [`push_row`](Matcher::push_row), tell it about event time with
/// [`advance_time`](Matcher::advance_time) and the end of input with
/// [`finish`](Matcher::finish); collect final matches with
/// [`drain_matches`](Matcher::drain_matches), which returns them in start order.
/// After a call returns an error the matcher should be discarded (the query has failed).
pub struct Matcher {
    spec: Arc<MatchSpec>,
    /// Rows before this never start a match.
    search_from: u64,
    last_row: u64,
    last_ts: i64,
    started: bool,
    /// Head of the node free list.
    free: u32,
    attempts: Vec<Attempt>,
    threads: Vec<Thread>,
    nodes: Vec<Node>,
    ready: Vec<Match>,
}

impl fmt::Debug for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Matcher")
            .field("state", &self.snapshot())
            .finish()
    }
}

impl Matcher {
    /// A matcher at the start of a partition.
    pub fn new(spec: Arc<MatchSpec>) -> Matcher {
        Matcher {
            spec,
            search_from: 0,
            last_row: 0,
            last_ts: i64::MIN,
            started: false,
            free: NIL,
            attempts: Vec::new(),
            threads: Vec::new(),
            nodes: Vec::new(),
            ready: Vec::new(),
        }
    }

    /// The shared pattern and options.
    pub fn spec(&self) -> &Arc<MatchSpec> {
        &self.spec
    }

    /// Feeds the next row of the partition (row numbers strictly increasing, times
    /// non-decreasing). Advances every partial match by this row, starts a new one at it,
    /// and makes final what became final. Errors: rows out of order, or an
    /// `AFTER MATCH SKIP TO` target error for a match that became final.
    pub fn push_row<C: Conditions + ?Sized>(
        &mut self,
        row: u64,
        ts_ms: i64,
        conds: &mut C,
    ) -> Result<(), MatchError> {
        if self.started {
            if row <= self.last_row {
                return Err(MatchError::RowOrder {
                    previous: self.last_row,
                    row,
                });
            }
            if ts_ms < self.last_ts {
                return Err(MatchError::TimeOrder {
                    previous_ts: self.last_ts,
                    ts: ts_ms,
                });
            }
        }
        self.started = true;
        self.last_row = row;
        self.last_ts = ts_ms;

        let Matcher {
            spec,
            search_from,
            free,
            attempts,
            threads,
            nodes,
            ..
        } = self;
        let prog = &spec.pattern;
        let within = spec.options.within_ms;
        let mut seen = Seen::new(prog, spec.options.history_free);
        let old_len = threads.len();
        let mut read = 0usize;
        let mut kept = 0usize;
        for ai in 0..attempts.len() {
            let mut a = attempts[ai];
            let (lo, hi) = (read, read + a.nthreads as usize);
            read = hi;
            if expired(within, ts_ms, a.start_ts) {
                for t in &threads[lo..hi] {
                    release(nodes, free, t.node);
                }
                a.nthreads = 0;
            } else if hi > lo {
                a.nthreads = step(
                    prog,
                    nodes,
                    free,
                    threads,
                    &mut seen,
                    conds,
                    row,
                    a.start_row,
                    Input::Old(lo, hi),
                    &mut a.candidate,
                );
            }
            if a.nthreads > 0 || a.candidate != NIL {
                attempts[kept] = a;
                kept += 1;
            }
        }
        attempts.truncate(kept);
        if row >= *search_from && !expired(within, ts_ms, ts_ms) {
            let mut a = Attempt {
                start_row: row,
                start_ts: ts_ms,
                nthreads: 0,
                candidate: NIL,
            };
            a.nthreads = step(
                prog,
                nodes,
                free,
                threads,
                &mut seen,
                conds,
                row,
                row,
                Input::Start,
                &mut a.candidate,
            );
            if a.nthreads > 0 || a.candidate != NIL {
                attempts.push(a);
            }
        }
        threads.drain(..old_len);
        seen.finish();
        self.resolve()
    }

    /// Tells the matcher that no future row has an event time below `watermark_ms`: with a
    /// `WITHIN` bound, every partial match whose first row has `watermark_ms - ts >= within`
    /// dies, which may make held matches final.
    pub fn advance_time(&mut self, watermark_ms: i64) -> Result<(), MatchError> {
        let Some(within) = self.spec.options.within_ms else {
            return Ok(());
        };
        let mut toff = 0usize;
        // Attempts are in start order, so their first-row times are non-decreasing and the
        // expired ones are a prefix.
        for a in self.attempts.iter_mut() {
            if !expired(Some(within), watermark_ms, a.start_ts) {
                break;
            }
            for t in &self.threads[toff..toff + a.nthreads as usize] {
                release(&mut self.nodes, &mut self.free, t.node);
            }
            toff += a.nthreads as usize;
            a.nthreads = 0;
        }
        if toff == 0 && self.attempts.first().is_none_or(|a| a.nthreads > 0) {
            return Ok(());
        }
        self.threads.drain(..toff);
        self.resolve()
    }

    /// End of input: every partial match dies and held complete matches become final, in
    /// order.
    pub fn finish(&mut self) -> Result<(), MatchError> {
        for t in self.threads.drain(..) {
            release(&mut self.nodes, &mut self.free, t.node);
        }
        for a in &mut self.attempts {
            a.nthreads = 0;
        }
        self.resolve()
    }

    /// Moves the final matches found so far, in start order, to the end of `out`.
    pub fn drain_matches(&mut self, out: &mut Vec<Match>) {
        out.append(&mut self.ready);
    }

    /// The oldest row any partial or held match still references (rows before it will never
    /// be part of a match or a condition's path again), or `None` if there is none. Matches
    /// already final (drained or not) are not counted.
    pub fn oldest_live_row(&self) -> Option<u64> {
        self.attempts.first().map(|a| a.start_row)
    }

    /// The event time of the oldest unresolved start row (the partial match `WITHIN`
    /// expires first), or `None` if there is none.
    pub fn oldest_start_ts(&self) -> Option<i64> {
        self.attempts.first().map(|a| a.start_ts)
    }

    /// Whether the matcher holds no partial, held or undrained match.
    pub fn is_idle(&self) -> bool {
        self.attempts.is_empty() && self.ready.is_empty()
    }

    /// Resolves attempts from the front: emits final matches, applies the skip strategy,
    /// drops dead attempts; stops at the first attempt with live threads.
    fn resolve(&mut self) -> Result<(), MatchError> {
        let Matcher {
            spec,
            search_from,
            free,
            attempts,
            threads,
            nodes,
            ready,
            ..
        } = self;
        let mut result = Ok(());
        let mut i = 0;
        let mut toff = 0;
        while i < attempts.len() {
            let a = attempts[i];
            if a.start_row < *search_from {
                // Skipped by an earlier match.
                for t in &threads[toff..toff + a.nthreads as usize] {
                    release(nodes, free, t.node);
                }
                toff += a.nthreads as usize;
                release(nodes, free, a.candidate);
                i += 1;
                continue;
            }
            if a.nthreads > 0 {
                break;
            }
            i += 1;
            if a.candidate == NIL {
                continue;
            }
            let rows = path_vec(nodes, a.candidate);
            release(nodes, free, a.candidate);
            match skip_target(spec.options.skip, &rows) {
                Ok(target) => {
                    *search_from = target;
                    ready.push(Match { rows });
                }
                Err(e) => {
                    *search_from = rows[rows.len() - 1].0.saturating_add(1);
                    result = Err(e);
                    break;
                }
            }
        }
        attempts.drain(..i);
        threads.drain(..toff);
        if attempts.is_empty() && !nodes.is_empty() {
            debug_assert!(threads.is_empty());
            nodes.clear();
            *free = NIL;
            if nodes.capacity() > 4096 {
                nodes.shrink_to(64);
            }
            if threads.capacity() > 4096 {
                threads.shrink_to(64);
            }
        }
        result
    }

    /// The matcher's state as plain data (taking it changes nothing).
    pub fn snapshot(&self) -> MatcherState {
        let mut toff = 0;
        let attempts = self
            .attempts
            .iter()
            .map(|a| {
                let threads = self.threads[toff..toff + a.nthreads as usize]
                    .iter()
                    .map(|t| ThreadState {
                        state: t.state,
                        path: path_vec(&self.nodes, t.node),
                    })
                    .collect();
                toff += a.nthreads as usize;
                AttemptState {
                    start_row: a.start_row,
                    start_ts: a.start_ts,
                    threads,
                    candidate: (a.candidate != NIL).then(|| path_vec(&self.nodes, a.candidate)),
                }
            })
            .collect();
        MatcherState {
            fingerprint: self.spec.pattern.fingerprint,
            search_from: self.search_from,
            last_row: self.started.then_some(self.last_row),
            last_ts: self.started.then_some(self.last_ts),
            attempts,
            ready: self.ready.clone(),
        }
    }

    /// Rebuilds a matcher from [`snapshot`](Matcher::snapshot) output; it continues exactly
    /// as the original would. `spec` must hold the same compiled pattern (checked by
    /// fingerprint); the options may differ only if the caller knows what that means.
    /// Common path prefixes are shared again.
    pub fn restore(spec: Arc<MatchSpec>, state: MatcherState) -> Result<Matcher, MatchError> {
        let bad = |m: &str| Err(MatchError::Restore(m.to_string()));
        if state.fingerprint != spec.pattern.fingerprint {
            return bad("the snapshot was taken with a different pattern");
        }
        let nvars = spec.pattern.variables.len() as u32;
        let mut m = Matcher::new(spec);
        m.search_from = state.search_from;
        match (state.last_row, state.last_ts) {
            (Some(r), Some(t)) => {
                m.started = true;
                m.last_row = r;
                m.last_ts = t;
            }
            (None, None) => {}
            _ => return bad("last row and last time must both be present or absent"),
        }
        m.ready = state.ready;
        let mut shared: HashMap<(u32, u64, VarId), u32> = HashMap::new();
        let mut build = |m: &mut Matcher, path: &[(u64, VarId)]| -> Result<u32, MatchError> {
            if path.is_empty() {
                return Err(MatchError::Restore("empty path".into()));
            }
            let mut parent = NIL;
            for (i, &(row, var)) in path.iter().enumerate() {
                if var >= nvars || (i > 0 && row <= path[i - 1].0) {
                    return Err(MatchError::Restore("malformed path".into()));
                }
                let node = *shared.entry((parent, row, var)).or_insert_with(|| {
                    if parent != NIL {
                        m.nodes[parent as usize].refs += 1;
                    }
                    alloc_node(
                        &mut m.nodes,
                        &mut m.free,
                        Node {
                            row,
                            var,
                            parent,
                            refs: 0,
                            len: i as u32 + 1,
                        },
                    )
                });
                parent = node;
            }
            m.nodes[parent as usize].refs += 1;
            Ok(parent)
        };
        let mut prev_start = None;
        for a in state.attempts {
            if prev_start.is_some_and(|p| p >= a.start_row) {
                return bad("attempts out of order");
            }
            prev_start = Some(a.start_row);
            let mut attempt = Attempt {
                start_row: a.start_row,
                start_ts: a.start_ts,
                nthreads: a.threads.len() as u32,
                candidate: NIL,
            };
            for t in &a.threads {
                if t.state as usize >= m.spec.pattern.num_states() {
                    return bad("unknown automaton state");
                }
                if t.path.first().map(|r| r.0) != Some(a.start_row) {
                    return bad("thread path does not begin at the start row");
                }
                let node = build(&mut m, &t.path)?;
                m.threads.push(Thread {
                    state: t.state,
                    node,
                });
            }
            if let Some(c) = &a.candidate {
                if c.first().map(|r| r.0) != Some(a.start_row) {
                    return bad("candidate does not begin at the start row");
                }
                attempt.candidate = build(&mut m, c)?;
            }
            m.attempts.push(attempt);
        }
        Ok(m)
    }

    #[cfg(test)]
    fn live_nodes(&self) -> usize {
        let mut free = 0;
        let mut i = self.free;
        while i != NIL {
            free += 1;
            i = self.nodes[i as usize].parent;
        }
        self.nodes.len() - free
    }
}

/// Advances one attempt's threads over `row` (see the module docs), appending the surviving
/// threads, in order, to `threads`; returns how many.
#[allow(clippy::too_many_arguments)]
#[inline]
fn step<C: Conditions + ?Sized>(
    prog: &CompiledPattern,
    nodes: &mut Vec<Node>,
    free: &mut u32,
    threads: &mut Vec<Thread>,
    seen: &mut Seen,
    conds: &mut C,
    row: u64,
    first_row: u64,
    input: Input,
    candidate: &mut u32,
) -> u32 {
    let out_start = threads.len();
    let n_in = match input {
        Input::Old(lo, hi) => hi - lo,
        Input::Start => (prog.start.1 - prog.start.0) as usize,
    };
    let mut accepted = false;
    for k in 0..n_in {
        let (state, node) = match input {
            Input::Old(lo, _) => {
                let t = threads[lo + k];
                (t.state, t.node)
            }
            Input::Start => (prog.closures[prog.start.0 as usize + k], NIL),
        };
        if accepted {
            // Less preferred than the match just found.
            release(nodes, free, node);
            continue;
        }
        let var = prog.state_var[state as usize];
        if !conds.test(var, row, &Path::arena(nodes, node, first_row)) {
            release(nodes, free, node);
            continue;
        }
        let len = if node == NIL {
            1
        } else {
            nodes[node as usize].len + 1
        };
        // The thread's reference to `node` moves to the new node's parent link.
        let n = alloc_node(
            nodes,
            free,
            Node {
                row,
                var,
                parent: node,
                refs: 0,
                len,
            },
        );
        for &next in prog.closure(prog.state_succ[state as usize]) {
            if next == ACCEPT {
                release(nodes, free, *candidate);
                nodes[n as usize].refs += 1;
                *candidate = n;
                accepted = true;
                break;
            }
            if seen.insert(next) {
                threads.push(Thread {
                    state: next,
                    node: n,
                });
                nodes[n as usize].refs += 1;
            }
        }
        if nodes[n as usize].refs == 0 {
            nodes[n as usize].refs = 1;
            release(nodes, free, n);
        }
    }
    seen.reset(&threads[out_start..]);
    (threads.len() - out_start) as u32
}

/// A [`Matcher`]'s state as plain data, for checkpoints.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct MatcherState {
    /// [`CompiledPattern::fingerprint`] of the pattern the matcher ran.
    pub fingerprint: u64,
    /// Rows before this never start a match.
    pub search_from: u64,
    /// The last row pushed, if any.
    pub last_row: Option<u64>,
    /// The last row's time, if any.
    pub last_ts: Option<i64>,
    /// Unresolved start rows, in order.
    pub attempts: Vec<AttemptState>,
    /// Final matches not yet drained.
    pub ready: Vec<Match>,
}

/// One unresolved start row in a [`MatcherState`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AttemptState {
    /// The start row.
    pub start_row: u64,
    /// Its event time.
    pub start_ts: i64,
    /// Live partial matches, most preferred first.
    pub threads: Vec<ThreadState>,
    /// The best complete match so far (less preferred than every live thread).
    pub candidate: Option<Vec<(u64, VarId)>>,
}

/// One partial match in a [`MatcherState`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ThreadState {
    /// Automaton state (meaningful only for the same compiled pattern).
    pub state: u32,
    /// Rows mapped so far, in order (never empty).
    pub path: Vec<(u64, VarId)>,
}

// ------------------------------------------------------------------------------------------
// The reference matcher
// ------------------------------------------------------------------------------------------

/// Finds all matches in a finite row sequence by recursive backtracking over the pattern
/// tree: the SQL:2016 definition, written directly. For each start row in search order it
/// enumerates matches in preference order, takes the first, and applies the skip strategy.
///
/// `rows` are `(row number, event time)` in order. Returns the matches found and, if the
/// search stopped on an `AFTER MATCH SKIP` error, that error. Exponential in the worst case;
/// meant for tests. Panics if the pattern can match the empty sequence.
pub fn reference_matches<C: Conditions + ?Sized>(
    pattern: &RowPattern,
    rows: &[(u64, i64)],
    options: &MatchOptions,
    conds: &mut C,
) -> (Vec<Match>, Option<MatchError>) {
    assert!(!pattern.can_match_empty(), "pattern can match empty");
    let mut r = Reference {
        variables: pattern.variables(),
        rows,
        within: options.within_ms,
        conds,
        path: Vec::new(),
        start_ts: 0,
        found: None,
    };
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < rows.len() {
        r.path.clear();
        r.start_ts = rows[pos].1;
        r.found = None;
        let hit = r.m(pattern, pos, &mut |st: &mut Reference<'_, C>, _end| {
            st.found = Some(st.path.clone());
            true
        });
        if !hit {
            pos += 1;
            continue;
        }
        let found = r.found.take().expect("found");
        match skip_target(options.skip, &found) {
            Ok(target) => {
                out.push(Match { rows: found });
                pos = rows
                    .iter()
                    .position(|r| r.0 >= target)
                    .unwrap_or(rows.len());
            }
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

struct Reference<'a, C: ?Sized> {
    variables: Vec<String>,
    rows: &'a [(u64, i64)],
    within: Option<i64>,
    conds: &'a mut C,
    path: Vec<(u64, VarId)>,
    start_ts: i64,
    found: Option<Vec<(u64, VarId)>>,
}

impl<C: Conditions + ?Sized> Reference<'_, C> {
    /// Matches `p` at `pos`, calling `k` with each end position in preference order until
    /// `k` returns true.
    fn m(
        &mut self,
        p: &RowPattern,
        pos: usize,
        k: &mut dyn FnMut(&mut Self, usize) -> bool,
    ) -> bool {
        match p {
            RowPattern::Var(name) => {
                let Some(&(row, ts)) = self.rows.get(pos) else {
                    return false;
                };
                // WITHIN: the row must be strictly less than `within` after the first row.
                if self
                    .within
                    .is_some_and(|w| (ts as i128 - self.start_ts as i128) >= w as i128)
                {
                    return false;
                }
                let var = self.variables.iter().position(|v| v == name).unwrap() as VarId;
                if !self.conds.test(var, row, &Path::from_slice(&self.path)) {
                    return false;
                }
                self.path.push((row, var));
                let r = k(self, pos + 1);
                self.path.pop();
                r
            }
            RowPattern::Concat(ps) => self.seq(ps, pos, k),
            RowPattern::Alt(ps) => {
                for q in ps {
                    if self.m(q, pos, k) {
                        return true;
                    }
                }
                false
            }
            RowPattern::Permute(ps) => {
                for perm in permutations(ps.len()) {
                    let seq: Vec<RowPattern> = perm.into_iter().map(|i| ps[i].clone()).collect();
                    if self.seq(&seq, pos, k) {
                        return true;
                    }
                }
                false
            }
            RowPattern::Repeat {
                body,
                min,
                max,
                greedy,
            } => self.rep(body, *min, *max, *greedy, 0, pos, k),
        }
    }

    fn seq(
        &mut self,
        ps: &[RowPattern],
        pos: usize,
        k: &mut dyn FnMut(&mut Self, usize) -> bool,
    ) -> bool {
        match ps.split_first() {
            None => k(self, pos),
            Some((first, rest)) => self.m(first, pos, &mut |st: &mut Self, p2| st.seq(rest, p2, k)),
        }
    }

    /// `i` iterations done.
    #[allow(clippy::too_many_arguments)]
    fn rep(
        &mut self,
        body: &RowPattern,
        min: u32,
        max: Option<u32>,
        greedy: bool,
        i: u32,
        pos: usize,
        k: &mut dyn FnMut(&mut Self, usize) -> bool,
    ) -> bool {
        if max == Some(i) {
            return k(self, pos);
        }
        if i >= min && !greedy && k(self, pos) {
            return true;
        }
        let iterated = self.m(body, pos, &mut |st: &mut Self, p2| {
            if p2 == pos {
                // An iteration that matched no row ends the loop.
                k(st, pos)
            } else {
                st.rep(body, min, max, greedy, i + 1, p2, k)
            }
        });
        if iterated {
            return true;
        }
        i >= min && greedy && k(self, pos)
    }
}

// ------------------------------------------------------------------------------------------
// Tests
// ------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    // ---- pattern builders ----
    fn v(n: &str) -> RowPattern {
        RowPattern::var(n)
    }
    fn cat(ps: Vec<RowPattern>) -> RowPattern {
        RowPattern::Concat(ps)
    }
    fn alt(ps: Vec<RowPattern>) -> RowPattern {
        RowPattern::Alt(ps)
    }
    fn rep(p: RowPattern, min: u32, max: Option<u32>, greedy: bool) -> RowPattern {
        RowPattern::repeat(p, min, max, greedy)
    }
    fn plus(p: RowPattern) -> RowPattern {
        rep(p, 1, None, true)
    }
    fn star(p: RowPattern) -> RowPattern {
        rep(p, 0, None, true)
    }
    fn opt(p: RowPattern) -> RowPattern {
        rep(p, 0, Some(1), true)
    }

    fn spec(
        p: &RowPattern,
        skip: AfterMatchSkip,
        within_ms: Option<i64>,
        history_free: bool,
    ) -> Arc<MatchSpec> {
        let prog = CompiledPattern::compile(p).unwrap_or_else(|e| panic!("{p}: {e}"));
        Arc::new(
            MatchSpec::new(
                prog,
                MatchOptions {
                    skip,
                    within_ms,
                    history_free,
                },
            )
            .unwrap(),
        )
    }

    /// A match as `(row, variable name)` pairs.
    type Named = Vec<(u64, String)>;

    fn named(spec: &MatchSpec, m: &Match) -> Named {
        m.rows
            .iter()
            .map(|&(r, v)| (r, spec.pattern.variables()[v as usize].clone()))
            .collect()
    }

    fn exp(rows: &[(u64, &str)]) -> Named {
        rows.iter().map(|&(r, n)| (r, n.to_string())).collect()
    }

    /// History-free conditions from per-row sets of variable names: row `i` (numbered from
    /// 0) may be variable `X` iff `sets[i]` contains the letter(s) of `X`. Names are single
    /// letters here.
    struct SetConds {
        sets: Vec<String>,
        names: Vec<String>,
    }
    impl Conditions for SetConds {
        fn test(&mut self, var: VarId, row: u64, _path: &Path<'_>) -> bool {
            self.sets[row as usize].contains(self.names[var as usize].as_str())
        }
    }

    /// Runs the streaming matcher over rows with the given variable sets (ts = row number),
    /// with and without deduplication, checks both agree with each other and with the
    /// reference, and returns the matches.
    fn run(
        p: &RowPattern,
        sets: &[&str],
        skip: AfterMatchSkip,
        within: Option<i64>,
    ) -> Result<Vec<Named>, MatchError> {
        let mut results = Vec::new();
        for hf in [true, false] {
            let sp = spec(p, skip, within, hf);
            let mut conds = SetConds {
                sets: sets.iter().map(|s| s.to_string()).collect(),
                names: sp.pattern.variables().to_vec(),
            };
            let mut m = Matcher::new(sp.clone());
            let mut out = Vec::new();
            let mut err = None;
            for i in 0..sets.len() as u64 {
                if let Err(e) = m.push_row(i, i as i64, &mut conds) {
                    err = Some(e);
                    break;
                }
            }
            if err.is_none() {
                err = m.finish().err();
            }
            m.drain_matches(&mut out);
            let rows: Vec<(u64, i64)> = (0..sets.len() as u64).map(|i| (i, i as i64)).collect();
            let (ref_out, ref_err) = reference_matches(p, &rows, &sp.options, &mut conds);
            assert_eq!(out, ref_out, "streaming vs reference for {p}");
            assert_eq!(err, ref_err, "streaming vs reference error for {p}");
            let res = match err {
                Some(e) => Err(e),
                None => Ok(out.iter().map(|m| named(&sp, m)).collect::<Vec<_>>()),
            };
            results.push(res);
        }
        assert_eq!(results[0], results[1], "dedup vs no dedup");
        results.pop().unwrap()
    }

    /// Pushes one row and returns the matches drained right after it.
    fn push(m: &mut Matcher, conds: &mut SetConds, row: u64, ts: i64) -> Vec<Named> {
        m.push_row(row, ts, conds).unwrap();
        drain(m)
    }

    fn drain(m: &mut Matcher) -> Vec<Named> {
        let mut out = Vec::new();
        m.drain_matches(&mut out);
        let sp = m.spec().clone();
        out.iter().map(|x| named(&sp, x)).collect()
    }

    fn set_conds(sp: &MatchSpec, sets: &[&str]) -> SetConds {
        SetConds {
            sets: sets.iter().map(|s| s.to_string()).collect(),
            names: sp.pattern.variables().to_vec(),
        }
    }

    // ---- compilation ----

    #[test]
    fn compile_rejects_empty_matching_and_too_large_patterns() {
        assert_eq!(
            CompiledPattern::compile(&star(v("A"))).unwrap_err(),
            CompileError::MatchesEmpty
        );
        assert_eq!(
            CompiledPattern::compile(&cat(vec![opt(v("A")), star(v("B"))])).unwrap_err(),
            CompileError::MatchesEmpty
        );
        assert_eq!(
            CompiledPattern::compile(&cat(vec![])).unwrap_err(),
            CompileError::MatchesEmpty
        );
        assert!(matches!(
            CompiledPattern::compile(&rep(v("A"), 20_000, Some(20_000), true)).unwrap_err(),
            CompileError::TooLarge { .. }
        ));
        assert!(matches!(
            CompiledPattern::compile(&cat(vec![
                v("A"),
                rep(cat(vec![]), 4_000_000_000, None, true)
            ]))
            .unwrap_err(),
            CompileError::TooLarge { .. }
        ));
        let seven: Vec<_> = "ABCDEFG".chars().map(|c| v(&c.to_string())).collect();
        assert_eq!(
            CompiledPattern::compile(&RowPattern::Permute(seven)).unwrap_err(),
            CompileError::PermuteTooLarge { elements: 7 }
        );
        assert!(matches!(
            CompiledPattern::compile(&alt(vec![])).unwrap_err(),
            CompileError::Invalid(_)
        ));
        let prog = CompiledPattern::compile(&v("A")).unwrap();
        assert_eq!(
            MatchSpec::new(
                prog,
                MatchOptions {
                    skip: AfterMatchSkip::ToLast(1),
                    ..Default::default()
                }
            )
            .unwrap_err(),
            CompileError::UnknownSkipVariable { var: 1 }
        );
        // Six elements are fine; `A{5000}` is fine.
        let six: Vec<_> = "ABCDEF".chars().map(|c| v(&c.to_string())).collect();
        assert!(CompiledPattern::compile(&RowPattern::Permute(six)).is_ok());
        assert_eq!(
            CompiledPattern::compile(&rep(v("A"), 5000, Some(5000), true))
                .unwrap()
                .num_states(),
            5000
        );
    }

    #[test]
    fn compiled_sizes_are_small() {
        // A B+ C: states A, B, C (the loop reuses B).
        let p = CompiledPattern::compile(&cat(vec![v("A"), plus(v("B")), v("C")])).unwrap();
        assert_eq!(p.num_states(), 3);
        assert_eq!(p.variables(), ["A", "B", "C"]);
        assert_eq!(p.var_id("C"), Some(2));
        assert_eq!(p.var_id("c"), None);
    }

    #[test]
    fn permutations_are_lexicographic() {
        assert_eq!(
            permutations(3),
            vec![
                vec![0, 1, 2],
                vec![0, 2, 1],
                vec![1, 0, 2],
                vec![1, 2, 0],
                vec![2, 0, 1],
                vec![2, 1, 0]
            ]
        );
    }

    // ---- matching, hand-derived expectations ----

    #[test]
    fn greedy_gives_back_rows_the_next_variable_needs() {
        // A B+ C; rows 2 and 3 satisfy both B and C. B+ first takes 1..=3, C fails on row 4,
        // so B gives back row 3 to C.
        let p = cat(vec![v("A"), plus(v("B")), v("C")]);
        let sets = ["A", "B", "BC", "BC", ""];
        assert_eq!(
            run(&p, &sets, AfterMatchSkip::PastLastRow, None).unwrap(),
            vec![exp(&[(0, "A"), (1, "B"), (2, "B"), (3, "C")])]
        );
        // Not final until the more preferred "B takes row 3" thread dies at row 4.
        let sp = spec(&p, AfterMatchSkip::PastLastRow, None, true);
        let mut conds = set_conds(&sp, &sets);
        let mut m = Matcher::new(sp);
        for r in 0..4 {
            assert!(push(&mut m, &mut conds, r, r as i64).is_empty(), "row {r}");
        }
        assert_eq!(m.oldest_live_row(), Some(0));
        assert_eq!(
            push(&mut m, &mut conds, 4, 4),
            vec![exp(&[(0, "A"), (1, "B"), (2, "B"), (3, "C")])]
        );
        assert!(m.is_idle());
        assert_eq!(m.oldest_live_row(), None);
    }

    #[test]
    fn optional_variable() {
        let p = cat(vec![v("A"), opt(v("B")), v("C")]);
        let pl = AfterMatchSkip::PastLastRow;
        assert_eq!(
            run(&p, &["A", "C"], pl, None).unwrap(),
            vec![exp(&[(0, "A"), (1, "C")])]
        );
        assert_eq!(
            run(&p, &["A", "B", "C"], pl, None).unwrap(),
            vec![exp(&[(0, "A"), (1, "B"), (2, "C")])]
        );
        // B? prefers taking row 1, and C then takes row 2.
        assert_eq!(
            run(&p, &["A", "BC", "C"], pl, None).unwrap(),
            vec![exp(&[(0, "A"), (1, "B"), (2, "C")])]
        );
        // Row 2 fails C, so B? gives up row 1, which C takes.
        assert_eq!(
            run(&p, &["A", "BC", ""], pl, None).unwrap(),
            vec![exp(&[(0, "A"), (1, "C")])]
        );
        assert_eq!(
            run(&p, &["A", "B", "B", "C"], pl, None).unwrap(),
            Vec::<Named>::new()
        );
    }

    #[test]
    fn exact_repetition_with_skip_to_next_row() {
        // H{3}, H = value > 50, AFTER MATCH SKIP TO NEXT ROW.
        let values = [60, 70, 80, 90, 40, 55, 65, 75, 85, 95];
        let sets: Vec<&str> = values
            .iter()
            .map(|&x| if x > 50 { "H" } else { "" })
            .collect();
        let p = rep(v("H"), 3, Some(3), true);
        let res = run(&p, &sets, AfterMatchSkip::ToNextRow, None).unwrap();
        let starts: Vec<u64> = res.iter().map(|m| m[0].0).collect();
        assert_eq!(starts, vec![0, 1, 5, 6, 7]);
        assert_eq!(res[4], exp(&[(7, "H"), (8, "H"), (9, "H")]));
    }

    #[test]
    fn bounded_repetition_backtracks_to_a_later_start() {
        // F{2,3} S over F F F F S: no match at row 0 (F takes 3 or 2 rows, then row 3 or 2 is
        // not S); at row 1, F takes rows 1..=3 and S row 4.
        let p = cat(vec![rep(v("F"), 2, Some(3), true), v("S")]);
        assert_eq!(
            run(
                &p,
                &["F", "F", "F", "F", "S"],
                AfterMatchSkip::PastLastRow,
                None
            )
            .unwrap(),
            vec![exp(&[(1, "F"), (2, "F"), (3, "F"), (4, "S")])]
        );
    }

    #[test]
    fn reluctant_versus_greedy() {
        let sets = ["A", "B", "BC", "BC", ""];
        let greedy = cat(vec![v("A"), plus(v("B")), v("C")]);
        let reluctant = cat(vec![v("A"), rep(v("B"), 1, None, false), v("C")]);
        assert_eq!(
            run(&greedy, &sets, AfterMatchSkip::PastLastRow, None).unwrap(),
            vec![exp(&[(0, "A"), (1, "B"), (2, "B"), (3, "C")])]
        );
        assert_eq!(
            run(&reluctant, &sets, AfterMatchSkip::PastLastRow, None).unwrap(),
            vec![exp(&[(0, "A"), (1, "B"), (2, "C")])]
        );
        // The reluctant match is final as soon as C holds: nothing more preferred is alive.
        let sp = spec(&reluctant, AfterMatchSkip::PastLastRow, None, true);
        let mut conds = set_conds(&sp, &sets);
        let mut m = Matcher::new(sp);
        assert!(push(&mut m, &mut conds, 0, 0).is_empty());
        assert!(push(&mut m, &mut conds, 1, 1).is_empty());
        assert_eq!(
            push(&mut m, &mut conds, 2, 2),
            vec![exp(&[(0, "A"), (1, "B"), (2, "C")])]
        );
        // Reluctant {2,3}?: takes exactly 2 when possible.
        let p = cat(vec![rep(v("B"), 2, Some(3), false), v("C")]);
        assert_eq!(
            run(
                &p,
                &["B", "BC", "BC", "C"],
                AfterMatchSkip::PastLastRow,
                None
            )
            .unwrap(),
            vec![exp(&[(0, "B"), (1, "B"), (2, "C")])]
        );
        // Reluctant ?? prefers not to take the row.
        let p = cat(vec![v("A"), rep(v("B"), 0, Some(1), false), v("C")]);
        assert_eq!(
            run(&p, &["A", "BC", "C"], AfterMatchSkip::PastLastRow, None).unwrap(),
            vec![exp(&[(0, "A"), (1, "C")])]
        );
    }

    #[test]
    fn alternation_prefers_left_branch() {
        let pl = AfterMatchSkip::PastLastRow;
        let ab = cat(vec![alt(vec![v("A"), v("B")]), v("C")]);
        let ba = cat(vec![alt(vec![v("B"), v("A")]), v("C")]);
        assert_eq!(
            run(&ab, &["AB", "C"], pl, None).unwrap(),
            vec![exp(&[(0, "A"), (1, "C")])]
        );
        assert_eq!(
            run(&ba, &["AB", "C"], pl, None).unwrap(),
            vec![exp(&[(0, "B"), (1, "C")])]
        );
        // The left branch is preferred even when the right one gives a longer match.
        let p = alt(vec![v("A"), cat(vec![v("B"), v("C")])]);
        assert_eq!(
            run(&p, &["AB", "C"], pl, None).unwrap(),
            vec![exp(&[(0, "A")])]
        );
        // The left branch fails later: the right one wins.
        let p = alt(vec![cat(vec![v("A"), v("C")]), cat(vec![v("B"), v("B")])]);
        assert_eq!(
            run(&p, &["AB", "B"], pl, None).unwrap(),
            vec![exp(&[(0, "B"), (1, "B")])]
        );
    }

    #[test]
    fn grouped_repetition() {
        // (A B)+ over A B A B A C: two iterations; the third fails at row 5.
        let p = plus(cat(vec![v("A"), v("B")]));
        let sets = ["A", "B", "A", "B", "A", "C"];
        assert_eq!(
            run(&p, &sets, AfterMatchSkip::PastLastRow, None).unwrap(),
            vec![exp(&[(0, "A"), (1, "B"), (2, "A"), (3, "B")])]
        );
        let sp = spec(&p, AfterMatchSkip::PastLastRow, None, true);
        let mut conds = set_conds(&sp, &sets);
        let mut m = Matcher::new(sp);
        for r in 0..5 {
            assert!(push(&mut m, &mut conds, r, r as i64).is_empty(), "row {r}");
        }
        assert_eq!(
            push(&mut m, &mut conds, 5, 5),
            vec![exp(&[(0, "A"), (1, "B"), (2, "A"), (3, "B")])]
        );
        // Search resumed at row 4 (A), which died at row 5.
        assert!(m.is_idle());
    }

    #[test]
    fn permute_order() {
        let p = RowPattern::Permute(vec![v("A"), v("B")]);
        let pl = AfterMatchSkip::PastLastRow;
        assert_eq!(
            run(&p, &["B", "A"], pl, None).unwrap(),
            vec![exp(&[(0, "B"), (1, "A")])]
        );
        assert_eq!(
            run(&p, &["AB", "AB"], pl, None).unwrap(),
            vec![exp(&[(0, "A"), (1, "B")])]
        );
        assert_eq!(run(&p, &["A", "A"], pl, None).unwrap(), Vec::<Named>::new());
        // PERMUTE(A, B, C) over C A B: the fifth permutation.
        let p = RowPattern::Permute(vec![v("A"), v("B"), v("C")]);
        assert_eq!(
            run(&p, &["C", "A", "B"], pl, None).unwrap(),
            vec![exp(&[(0, "C"), (1, "A"), (2, "B")])]
        );
    }

    #[test]
    fn skip_to_first_and_last() {
        // A B+ over A B AB B -: the match at 0 takes rows 0..=3.
        let p = cat(vec![v("A"), plus(v("B"))]);
        let sets = ["A", "B", "AB", "B", ""];
        let first = exp(&[(0, "A"), (1, "B"), (2, "B"), (3, "B")]);
        assert_eq!(
            run(&p, &sets, AfterMatchSkip::PastLastRow, None).unwrap(),
            vec![first.clone()]
        );
        // TO FIRST B = row 1: no match at 1; at 2: A=2, B=3.
        assert_eq!(
            run(&p, &sets, AfterMatchSkip::ToFirst(1), None).unwrap(),
            vec![first.clone(), exp(&[(2, "A"), (3, "B")])]
        );
        // TO LAST B = row 3: no match at 3 or 4.
        assert_eq!(
            run(&p, &sets, AfterMatchSkip::ToLast(1), None).unwrap(),
            vec![first]
        );
        // A B over A AB B: TO LAST B = row 1 gives a second match at 1.
        let p = cat(vec![v("A"), v("B")]);
        assert_eq!(
            run(&p, &["A", "AB", "B"], AfterMatchSkip::ToLast(1), None).unwrap(),
            vec![exp(&[(0, "A"), (1, "B")]), exp(&[(1, "A"), (2, "B")])]
        );
        // TO FIRST A is the match's first row: an error.
        assert_eq!(
            run(&p, &["A", "AB", "B"], AfterMatchSkip::ToFirst(0), None).unwrap_err(),
            MatchError::SkipTarget {
                var: 0,
                match_start: 0,
                target: Some(0)
            }
        );
        // TO FIRST C where C is not in the match: an error.
        let p = cat(vec![v("A"), alt(vec![v("B"), v("C")])]);
        assert_eq!(
            run(&p, &["", "A", "B"], AfterMatchSkip::ToFirst(2), None).unwrap_err(),
            MatchError::SkipTarget {
                var: 2,
                match_start: 1,
                target: None
            }
        );
    }

    #[test]
    fn skip_error_comes_from_the_call_that_finds_the_match() {
        let p = cat(vec![v("A"), alt(vec![v("B"), v("C")])]);
        let sp = spec(&p, AfterMatchSkip::ToFirst(2), None, true);
        let mut conds = set_conds(&sp, &["A", "B"]);
        let mut m = Matcher::new(sp);
        m.push_row(0, 0, &mut conds).unwrap();
        assert_eq!(
            m.push_row(1, 1, &mut conds).unwrap_err(),
            MatchError::SkipTarget {
                var: 2,
                match_start: 0,
                target: None
            }
        );
    }

    #[test]
    fn within_expiry_makes_held_greedy_match_final() {
        let p = cat(vec![v("A"), plus(v("B"))]);
        let sp = spec(&p, AfterMatchSkip::PastLastRow, Some(10), true);
        let mut conds = set_conds(&sp, &["A", "B", "B", "B"]);
        let mut m = Matcher::new(sp.clone());
        assert!(push(&mut m, &mut conds, 0, 0).is_empty());
        assert!(push(&mut m, &mut conds, 1, 1).is_empty());
        assert!(push(&mut m, &mut conds, 2, 2).is_empty());
        m.advance_time(9).unwrap();
        assert!(
            drain(&mut m).is_empty(),
            "9 - 0 < 10: row at 9 could still be taken"
        );
        m.advance_time(10).unwrap();
        assert_eq!(drain(&mut m), vec![exp(&[(0, "A"), (1, "B"), (2, "B")])]);
        assert!(m.is_idle());

        // The same through a row: row 3 at ts 10 is out of reach (10 - 0 is not < 10).
        let mut m = Matcher::new(sp);
        for r in 0..3 {
            assert!(push(&mut m, &mut conds, r, r as i64).is_empty());
        }
        assert_eq!(
            push(&mut m, &mut conds, 3, 10),
            vec![exp(&[(0, "A"), (1, "B"), (2, "B")])]
        );
        // At ts 9 it would have been taken.
        let sp = spec(&p, AfterMatchSkip::PastLastRow, Some(10), true);
        let mut m = Matcher::new(sp);
        for r in 0..3 {
            push(&mut m, &mut conds, r, r as i64);
        }
        assert!(push(&mut m, &mut conds, 3, 9).is_empty());
        m.finish().unwrap();
        assert_eq!(
            drain(&mut m),
            vec![exp(&[(0, "A"), (1, "B"), (2, "B"), (3, "B")])]
        );
    }

    #[test]
    fn later_match_held_until_earlier_start_resolves() {
        // (A B* C) | B with TO NEXT ROW over A B B C: the match at 1 ([1 B]) is complete
        // and final at row 1 but must wait for the attempt at 0, which completes at row 3.
        let p = alt(vec![cat(vec![v("A"), star(v("B")), v("C")]), v("B")]);
        let sets = ["A", "B", "B", "C"];
        let sp = spec(&p, AfterMatchSkip::ToNextRow, None, true);
        let mut conds = set_conds(&sp, &sets);
        let mut m = Matcher::new(sp.clone());
        assert!(push(&mut m, &mut conds, 0, 0).is_empty());
        assert!(push(&mut m, &mut conds, 1, 1).is_empty());
        assert!(push(&mut m, &mut conds, 2, 2).is_empty());
        assert_eq!(m.oldest_live_row(), Some(0));
        assert_eq!(
            push(&mut m, &mut conds, 3, 3),
            vec![
                exp(&[(0, "A"), (1, "B"), (2, "B"), (3, "C")]),
                exp(&[(1, "B")]),
                exp(&[(2, "B")])
            ]
        );
        // With PAST LAST ROW the held matches are discarded by the skip.
        assert_eq!(
            run(&p, &sets, AfterMatchSkip::PastLastRow, None).unwrap(),
            vec![exp(&[(0, "A"), (1, "B"), (2, "B"), (3, "C")])]
        );
        // If the attempt at 0 fails, the held matches are released.
        let sets = ["A", "B", "B", ""];
        let mut conds = set_conds(&sp, &sets);
        let mut m = Matcher::new(sp);
        for r in 0..3 {
            assert!(push(&mut m, &mut conds, r, r as i64).is_empty());
        }
        assert_eq!(
            push(&mut m, &mut conds, 3, 3),
            vec![exp(&[(1, "B")]), exp(&[(2, "B")])]
        );
    }

    #[test]
    fn history_dependent_condition() {
        // A B+ where B: value > value of the last row mapped to A (via the path).
        let values = [10i64, 12, 11, 9, 15];
        let p = cat(vec![v("A"), plus(v("B"))]);
        let sp = spec(&p, AfterMatchSkip::PastLastRow, None, false);
        let mut conds = |var: VarId, row: u64, path: &Path<'_>| -> bool {
            match var {
                0 => true,
                _ => {
                    let a = path.last_row_of(0).expect("A precedes B");
                    values[row as usize] > values[a as usize]
                }
            }
        };
        let mut m = Matcher::new(sp.clone());
        let mut out = Vec::new();
        for r in 0..5u64 {
            m.push_row(r, r as i64, &mut conds).unwrap();
        }
        m.finish().unwrap();
        m.drain_matches(&mut out);
        let got: Vec<Named> = out.iter().map(|x| named(&sp, x)).collect();
        assert_eq!(
            got,
            vec![
                exp(&[(0, "A"), (1, "B"), (2, "B")]),
                exp(&[(3, "A"), (4, "B")])
            ]
        );
        let rows: Vec<(u64, i64)> = (0..5).map(|r| (r, r as i64)).collect();
        assert_eq!(reference_matches(&p, &rows, &sp.options, &mut conds).0, out);

        // A strictly rising run: B > the previous row of the match (A or B).
        let values = [5i64, 1, 2, 3, 2, 4];
        let mut rising = |var: VarId, row: u64, path: &Path<'_>| -> bool {
            var == 0
                || path
                    .last()
                    .is_some_and(|(r, _)| values[row as usize] > values[r as usize])
        };
        let mut m = Matcher::new(sp.clone());
        for r in 0..6u64 {
            m.push_row(r, r as i64, &mut rising).unwrap();
        }
        m.finish().unwrap();
        let mut out = Vec::new();
        m.drain_matches(&mut out);
        let got: Vec<Named> = out.iter().map(|x| named(&sp, x)).collect();
        assert_eq!(
            got,
            vec![
                exp(&[(1, "A"), (2, "B"), (3, "B")]),
                exp(&[(4, "A"), (5, "B")])
            ]
        );
    }

    #[test]
    fn path_accessors() {
        let rows = [(3u64, 0u32), (4, 1), (5, 0), (6, 2)];
        let p = Path::from_slice(&rows);
        assert_eq!(p.len(), 4);
        assert_eq!(p.first_row(), Some(3));
        assert_eq!(p.last(), Some((6, 2)));
        assert_eq!(p.last_row_of(0), Some(5));
        assert_eq!(p.first_row_of(0), Some(3));
        assert_eq!(p.last_row_of(3), None);
        assert_eq!(p.count_of(0), 2);
        assert_eq!(p.to_vec(), rows.to_vec());
        let mut in_order = Vec::new();
        p.for_each(|r, v| in_order.push((r, v)));
        assert_eq!(in_order, rows.to_vec());
        assert!(Path::from_slice(&[]).is_empty());
        // The arena form sees the same path.
        let seen = std::cell::RefCell::new(Vec::new());
        let sp = spec(
            &cat(vec![v("A"), v("B"), v("A"), v("C")]),
            AfterMatchSkip::PastLastRow,
            None,
            false,
        );
        let mut conds = |var: VarId, _row: u64, path: &Path<'_>| {
            if var == 2 {
                let mut in_order = Vec::new();
                path.for_each(|r, v| in_order.push((r, v)));
                assert_eq!(in_order, path.to_vec());
                seen.borrow_mut().push((
                    path.to_vec(),
                    path.len(),
                    path.first_row(),
                    path.last_row_of(0),
                    path.first_row_of(0),
                    path.count_of(0),
                ));
            }
            true
        };
        let mut m = Matcher::new(sp);
        for r in 3..7 {
            m.push_row(r, 0, &mut conds).unwrap();
        }
        assert_eq!(
            seen.into_inner(),
            vec![(
                vec![(3, 0), (4, 1), (5, 0)],
                3,
                Some(3),
                Some(5),
                Some(3),
                2
            )]
        );
    }

    #[test]
    fn empty_iterations_end_the_loop() {
        // (A??)* B: the body prefers the empty iteration, which ends the loop, so B is tried
        // on row 0 first; A takes rows only when B fails.
        let p = cat(vec![star(rep(v("A"), 0, Some(1), false)), v("B")]);
        let pl = AfterMatchSkip::PastLastRow;
        assert_eq!(
            run(&p, &["AB", "B"], pl, None).unwrap(),
            vec![exp(&[(0, "B")]), exp(&[(1, "B")])]
        );
        assert_eq!(
            run(&p, &["A", "AB"], pl, None).unwrap(),
            vec![exp(&[(0, "A"), (1, "B")])]
        );
        // (A?){3} B over A B: iteration 2 is empty and ends the loop; B takes row 1.
        let p = cat(vec![rep(opt(v("A")), 3, Some(3), true), v("B")]);
        assert_eq!(
            run(&p, &["A", "B"], pl, None).unwrap(),
            vec![exp(&[(0, "A"), (1, "B")])]
        );
        // (A*)+ C: no infinite loop.
        let p = cat(vec![plus(star(v("A"))), v("C")]);
        assert_eq!(
            run(&p, &["A", "A", "C"], pl, None).unwrap(),
            vec![exp(&[(0, "A"), (1, "A"), (2, "C")])]
        );
    }

    #[test]
    fn large_automaton_deduplicates_with_the_scratch_bitset() {
        // (A | B){1,40} C has 80 variable states: deduplication uses the thread-local bitset.
        let p = cat(vec![
            rep(alt(vec![v("A"), v("B")]), 1, Some(40), true),
            v("C"),
        ]);
        assert!(CompiledPattern::compile(&p).unwrap().num_states() > 64);
        let sets = ["AB", "A", "B", "AB", "C", "AB", "AC", "ABC", "B", "C", "A"];
        // Greedy: from row 0, rows 0..=3 are A/B, row 4 is C. Then from 5: 5, 6, 7 are A/B
        // (7 also C), 8 is B, 9 is C: the longest wins.
        assert_eq!(
            run(&p, &sets, AfterMatchSkip::PastLastRow, None).unwrap(),
            vec![
                exp(&[(0, "A"), (1, "A"), (2, "B"), (3, "A"), (4, "C")]),
                exp(&[(5, "A"), (6, "A"), (7, "A"), (8, "B"), (9, "C")]),
            ]
        );
        // Many overlapping attempts, each with threads in many states.
        let sets: Vec<&str> = (0..60)
            .map(|i| if i % 7 == 6 { "C" } else { "AB" })
            .collect();
        let res = run(&p, &sets, AfterMatchSkip::ToNextRow, Some(20)).unwrap();
        // Every start row that is not a C row (8 of them: 6, 13, ..., 55) and is followed by
        // one (not 56..=59) begins a match ending at the next C row.
        assert_eq!(res.len(), 60 - 8 - 4);
        for m in &res {
            let end = m.last().unwrap().0;
            assert_eq!(end % 7, 6);
            assert!(m.iter().rev().skip(1).all(|(r, n)| r % 7 != 6 && n == "A"));
        }
        // Deduplicated, an attempt that has taken k rows has threads only in the states
        // "copy k+1 of A", "copy k+1 of B" and "C" (without it: 2^k paths).
        let sp = spec(&p, AfterMatchSkip::ToNextRow, None, true);
        let mut conds = set_conds(&sp, &sets);
        let mut m = Matcher::new(sp);
        for r in 0..60 {
            m.push_row(r, r as i64, &mut conds).unwrap();
            assert!(m.attempts.iter().all(|a| a.nthreads <= 3), "row {r}");
        }
    }

    #[test]
    fn row_order_is_checked() {
        let sp = spec(&v("A"), AfterMatchSkip::PastLastRow, None, true);
        let mut conds = set_conds(&sp, &["A"; 10]);
        let mut m = Matcher::new(sp);
        m.push_row(5, 10, &mut conds).unwrap();
        assert_eq!(
            m.push_row(5, 10, &mut conds).unwrap_err(),
            MatchError::RowOrder {
                previous: 5,
                row: 5
            }
        );
        assert_eq!(
            m.push_row(6, 9, &mut conds).unwrap_err(),
            MatchError::TimeOrder {
                previous_ts: 10,
                ts: 9
            }
        );
    }

    #[test]
    fn snapshot_restore_continues_identically_and_shares_prefixes() {
        // (A | B)+ C keeps two states alive sharing one path.
        let p = cat(vec![plus(alt(vec![v("A"), v("B")])), v("C")]);
        let sets = ["AB", "AB", "AB", "C", "A"];
        let sp = spec(&p, AfterMatchSkip::ToNextRow, None, false);
        let mut conds = set_conds(&sp, &sets);
        let mut m = Matcher::new(sp.clone());
        for r in 0..3 {
            m.push_row(r, r as i64, &mut conds).unwrap();
        }
        let snap = m.snapshot();
        assert_eq!(snap.attempts.len(), 3);
        let restored = Matcher::restore(sp.clone(), snap.clone()).unwrap();
        assert_eq!(restored.snapshot(), snap);
        assert_eq!(restored.live_nodes(), m.live_nodes());
        let mut outs = Vec::new();
        for mut mm in [m, restored] {
            for r in 3..5 {
                mm.push_row(r, r as i64, &mut conds).unwrap();
            }
            mm.finish().unwrap();
            assert_eq!(mm.live_nodes(), 0);
            outs.push(drain(&mut mm));
        }
        assert_eq!(outs[0], outs[1]);
        assert_eq!(outs[0].len(), 3);
        // Another pattern's snapshot is refused.
        let other = spec(
            &cat(vec![v("A"), v("C")]),
            AfterMatchSkip::ToNextRow,
            None,
            false,
        );
        assert!(matches!(
            Matcher::restore(other, snap),
            Err(MatchError::Restore(_))
        ));
    }

    // ---- the property test ----

    /// xorshift64* PRNG.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn chance(&mut self, num: u64, den: u64) -> bool {
            self.below(den) < num
        }
    }

    fn gen_pattern(rng: &mut Rng, depth: u32) -> RowPattern {
        let var = |rng: &mut Rng| v(["A", "B", "C"][rng.below(3) as usize]);
        if depth == 0 || rng.chance(1, 3) {
            return var(rng);
        }
        let n = 2 + rng.below(2) as usize;
        match rng.below(10) {
            0..=2 => cat((0..n).map(|_| gen_pattern(rng, depth - 1)).collect()),
            3..=4 => alt((0..n).map(|_| gen_pattern(rng, depth - 1)).collect()),
            5 => RowPattern::Permute((0..n).map(|_| gen_pattern(rng, depth - 1)).collect()),
            _ => {
                let (min, max) = match rng.below(7) {
                    0 => (0, None),
                    1 => (1, None),
                    2 => (0, Some(1)),
                    3 => {
                        let n = 1 + rng.below(3) as u32;
                        (n, Some(n))
                    }
                    4 => (rng.below(3) as u32, None),
                    5 => {
                        let a = rng.below(3) as u32;
                        (a, Some(a.max(1) + rng.below(2) as u32))
                    }
                    _ => (0, Some(1 + rng.below(3) as u32)),
                };
                rep(gen_pattern(rng, depth - 1), min, max, rng.chance(1, 2))
            }
        }
    }

    /// Per-row variable sets as letter masks (bit 0 = A).
    struct MaskConds<'a> {
        masks: &'a [u8],
        base: u64,
        letter: Vec<u8>,
        history: bool,
    }
    impl Conditions for MaskConds<'_> {
        fn test(&mut self, var: VarId, row: u64, path: &Path<'_>) -> bool {
            let l = self.letter[var as usize];
            if self.masks[(row - self.base) as usize] & (1 << l) == 0 {
                return false;
            }
            if !self.history {
                return true;
            }
            let a = self.letter.iter().position(|&x| x == 0).map(|i| i as VarId);
            match l {
                // B only after an odd number of A rows.
                1 => a.is_some_and(|a| path.count_of(a) % 2 == 1),
                // C only while the match so far has an even number of rows.
                2 => path.len() & 1 == 0,
                _ => true,
            }
        }
    }

    /// Matches are emitted as soon as they are final: the earliest unresolved attempt always
    /// has a live thread, and no thread is kept past its `WITHIN` bound at time `now`.
    fn check_eager(m: &Matcher, now: i64) {
        if let Some(front) = m.attempts.first() {
            assert!(
                front.nthreads > 0,
                "front attempt at {} is resolved but kept",
                front.start_row
            );
        }
        for a in &m.attempts {
            assert!(
                a.nthreads == 0 || !expired(m.spec.options.within_ms, now, a.start_ts),
                "attempt at {} outlived WITHIN at {now}",
                a.start_row
            );
        }
        assert_eq!(
            m.attempts
                .iter()
                .map(|a| a.nthreads as usize)
                .sum::<usize>(),
            m.threads.len()
        );
    }

    /// Streams the rows through a matcher with random watermarks, drains and one
    /// snapshot/restore at `snap_at`; returns the matches and the error, if any.
    fn stream(
        sp: &Arc<MatchSpec>,
        rows: &[(u64, i64)],
        conds: &mut MaskConds<'_>,
        rng: &mut Rng,
        snap_at: usize,
    ) -> (Vec<Match>, Option<MatchError>) {
        let mut m = Matcher::new(sp.clone());
        let mut out = Vec::new();
        let mut err = None;
        for (i, &(row, ts)) in rows.iter().enumerate() {
            if i == snap_at {
                let snap = m.snapshot();
                let live = m.live_nodes();
                m = Matcher::restore(sp.clone(), snap.clone()).expect("restore");
                assert_eq!(m.snapshot(), snap, "snapshot of restored matcher");
                assert!(m.live_nodes() <= live, "restore shares prefixes");
            }
            if let Err(e) = m.push_row(row, ts, conds) {
                err = Some(e);
                break;
            }
            if let Some(oldest) = m.oldest_live_row() {
                assert!(oldest <= row);
            }
            check_eager(&m, ts);
            if rng.chance(1, 2) {
                let next_ts = rows.get(i + 1).map_or(ts + 5, |r| r.1);
                let wm = ts + rng.below((next_ts - ts + 1) as u64) as i64;
                if let Err(e) = m.advance_time(wm) {
                    err = Some(e);
                    break;
                }
                check_eager(&m, wm);
            }
            if rng.chance(1, 3) {
                m.drain_matches(&mut out);
            }
        }
        if err.is_none() {
            err = m.finish().err();
            assert!(m.threads.is_empty());
            if err.is_none() {
                assert_eq!(m.live_nodes(), 0, "no leaked nodes");
                assert!(m.attempts.is_empty());
            }
        }
        m.drain_matches(&mut out);
        if err.is_none() {
            assert!(m.is_idle());
        }
        (out, err)
    }

    /// Counts of what the property test exercised.
    #[derive(Debug, Default)]
    struct Stats {
        runs: u64,
        matches: u64,
        runs_with_matches: u64,
        skip_errors: u64,
    }

    fn property_cases(cases: u64, seed0: u64) -> Stats {
        let mut stats = Stats::default();
        for case in 0..cases {
            let seed = seed0.wrapping_add(case.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1;
            let mut rng = Rng(seed);
            let p = loop {
                let p = gen_pattern(&mut rng, 3);
                if !p.can_match_empty() {
                    break p;
                }
                if rng.chance(1, 2) {
                    break cat(vec![p, v(["A", "B", "C"][rng.below(3) as usize])]);
                }
            };
            let prog = match CompiledPattern::compile(&p) {
                Ok(prog) => prog,
                Err(e) => panic!("seed {seed}: {p}: {e}"),
            };
            let vars = prog.variables().to_vec();
            let letter: Vec<u8> = vars.iter().map(|n| n.as_bytes()[0] - b'A').collect();
            let n = rng.below(13) as usize;
            let density = 4 + rng.below(5); // of 8
            let masks: Vec<u8> = (0..n)
                .map(|_| (0..3).fold(0u8, |m, b| m | ((rng.below(8) < density) as u8) << b))
                .collect();
            let base = rng.below(1000);
            let mut ts = rng.below(100) as i64 - 50;
            let rows: Vec<(u64, i64)> = (0..n as u64)
                .map(|i| {
                    ts += rng.below(3) as i64;
                    (base + i, ts)
                })
                .collect();
            let within = if rng.chance(1, 3) {
                Some(1 + rng.below(8) as i64)
            } else {
                None
            };
            let mut skips = vec![AfterMatchSkip::PastLastRow, AfterMatchSkip::ToNextRow];
            for i in 0..vars.len() as VarId {
                skips.push(AfterMatchSkip::ToFirst(i));
                skips.push(AfterMatchSkip::ToLast(i));
            }
            for skip in skips {
                // (history-dependent conditions, dedup)
                for (history, dedup) in [(false, true), (false, false), (true, false)] {
                    let options = MatchOptions {
                        skip,
                        within_ms: within,
                        history_free: dedup,
                    };
                    let sp = Arc::new(MatchSpec::new(prog.clone(), options).unwrap());
                    let mut conds = MaskConds {
                        masks: &masks,
                        base,
                        letter: letter.clone(),
                        history,
                    };
                    let expected = reference_matches(&p, &rows, &options, &mut conds);
                    let snap_at = rng.below(n as u64 + 1) as usize;
                    let got = stream(&sp, &rows, &mut conds, &mut rng, snap_at);
                    if got != expected {
                        panic!(
                            "seed {seed} (rerun: MR_SEED={seed} MR_CASES=1): pattern {p}\nrows {rows:?}\nmasks {masks:?} (bit 0 = A)\nvars {vars:?}\n\
                             skip {skip:?} within {within:?} history {history} dedup {dedup} snapshot at {snap_at}\n\
                             expected {expected:?}\ngot      {got:?}"
                        );
                    }
                    stats.runs += 1;
                    stats.matches += got.0.len() as u64;
                    stats.runs_with_matches += !got.0.is_empty() as u64;
                    stats.skip_errors += got.1.is_some() as u64;
                }
            }
        }
        stats
    }

    #[test]
    fn streaming_matches_reference_property() {
        let seed0 = std::env::var("MR_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x5EED_1234_u64);
        let cases = std::env::var("MR_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10_000);
        let stats = property_cases(cases, seed0);
        println!("{cases} patterns: {stats:?}");
        // The generator must exercise the interesting paths, not just empty results.
        assert!(stats.runs >= cases * 6);
        assert!(stats.runs_with_matches * 4 >= stats.runs, "{stats:?}");
        assert!(
            (stats.runs_with_matches + stats.skip_errors) * 2 >= stats.runs,
            "{stats:?}"
        );
        assert!(stats.skip_errors * 50 >= stats.runs, "{stats:?}");
    }

    /// Throughput of `A B+ C WITHIN 1 s` over 10,000 partitions (run with
    /// `--ignored --nocapture`, optimized).
    #[test]
    #[ignore]
    fn throughput() {
        let p = cat(vec![v("A"), plus(v("B")), v("C")]);
        let sp = spec(&p, AfterMatchSkip::PastLastRow, Some(1000), true);
        let partitions = 10_000usize;
        let rows_total = 20_000_000usize;
        let mut rng = Rng(42);
        // Precomputed booleans: ~10% A, ~60% B, ~20% C.
        let nflags = 1 << 16;
        let flags: Vec<[bool; 3]> = (0..nflags)
            .map(|_| [rng.chance(1, 10), rng.chance(6, 10), rng.chance(2, 10)])
            .collect();
        let mut matchers: Vec<Matcher> =
            (0..partitions).map(|_| Matcher::new(sp.clone())).collect();
        let mut next_row = vec![0u64; partitions];
        let mut out = Vec::new();
        let cur = Cell::new(0usize);
        let mut conds =
            |var: VarId, _row: u64, _p: &Path<'_>| flags[cur.get() & (nflags - 1)][var as usize];
        let start = std::time::Instant::now();
        let mut matches = 0usize;
        for i in 0..rows_total {
            let part = (i * 7919) % partitions;
            cur.set(i);
            let m = &mut matchers[part];
            let row = next_row[part];
            next_row[part] += 1;
            let ts = (i / partitions) as i64 * 10;
            m.push_row(row, ts, &mut conds).unwrap();
            m.drain_matches(&mut out);
            matches += out.len();
            out.clear();
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{rows_total} rows over {partitions} partitions in {secs:.2} s: {:.2} M rows/s, {matches} matches, matcher size {} bytes",
            rows_total as f64 / secs / 1e6,
            std::mem::size_of::<Matcher>()
        );
    }
}
