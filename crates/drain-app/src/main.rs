//! The `drain` binary.

fn main() {}
