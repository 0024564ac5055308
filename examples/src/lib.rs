//! Three programs an embedding team writes on drain's public API (docs/embedding.md
//! walks through them): `nightly-job`, `tenant-drains` and `spool-beat`, in `src/bin/`.
//! This library holds `spool-beat`'s ports: a queue and a target of the team's own.
#![forbid(unsafe_code)]

pub mod spool;
