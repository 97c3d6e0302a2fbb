//! `MATCH_RECOGNIZE`: row pattern recognition over keyed, event-time-ordered streams
//! (SQL:2016). `nfa` compiles `PATTERN` to an automaton and matches it incrementally per
//! partition.

pub mod nfa;
pub mod operator;
