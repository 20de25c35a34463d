//! `tally admin …`: the operator commands (`operations`), and `cli`, which runs
//! one from the command line and prints its answer.

pub mod cli;
mod keys;
mod operations;
mod webhooks;

pub use keys::*;
pub use operations::*;
pub use webhooks::*;
