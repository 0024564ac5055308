//! The Lua scripts, compiled in from `scripts/*.lua`, with their SHA1 computed once.

use std::sync::LazyLock;

/// One script: its source (for `EVAL` and `SCRIPT LOAD`) and SHA1 (for `EVALSHA`).
#[derive(Debug)]
pub(crate) struct LuaScript {
    /// File name without `.lua`, for messages.
    pub(crate) name: &'static str,
    /// The source.
    pub(crate) source: &'static str,
    /// Lowercase hex SHA1 of the source, as Redis computes it.
    pub(crate) sha: String,
}

impl LuaScript {
    fn new(name: &'static str, source: &'static str) -> Self {
        LuaScript { name, source, sha: redis::Script::new(source).get_hash().to_owned() }
    }
}

/// Every script drain uses.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: LuaScript,
    pub(crate) release: LuaScript,
    pub(crate) renew: LuaScript,
    pub(crate) claims: LuaScript,
    pub(crate) peek_wait: LuaScript,
    pub(crate) acquire_wait: LuaScript,
    pub(crate) release_wake: LuaScript,
    pub(crate) take_batch: LuaScript,
    pub(crate) record_batch: LuaScript,
    pub(crate) fence: LuaScript,
    pub(crate) acquire_marked: LuaScript,
    pub(crate) release_drained: LuaScript,
    pub(crate) peek_marked: LuaScript,
    pub(crate) fenced_value: LuaScript,
}

impl Scripts {
    /// All of them, for `SCRIPT LOAD` at connect.
    pub(crate) fn all(&self) -> [&LuaScript; 14] {
        [
            &self.acquire,
            &self.release,
            &self.renew,
            &self.claims,
            &self.peek_wait,
            &self.acquire_wait,
            &self.release_wake,
            &self.take_batch,
            &self.record_batch,
            &self.fence,
            &self.acquire_marked,
            &self.release_drained,
            &self.peek_marked,
            &self.fenced_value,
        ]
    }
}

/// The scripts, hashed on first use.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: LuaScript::new(
        "acquire",
        concat!(include_str!("scripts/take_fence.lua"), include_str!("scripts/acquire.lua")),
    ),
    release: LuaScript::new("release", include_str!("scripts/release.lua")),
    renew: LuaScript::new("renew", include_str!("scripts/renew.lua")),
    claims: LuaScript::new("claims", include_str!("scripts/claims.lua")),
    peek_wait: LuaScript::new("peek_wait", include_str!("scripts/peek_wait.lua")),
    acquire_wait: LuaScript::new(
        "acquire_wait",
        concat!(include_str!("scripts/take_fence.lua"), include_str!("scripts/acquire_wait.lua")),
    ),
    release_wake: LuaScript::new(
        "release_wake",
        concat!(include_str!("scripts/release_wake.lua"), include_str!("scripts/wake_one.lua")),
    ),
    take_batch: LuaScript::new("take_batch", include_str!("scripts/take_batch.lua")),
    record_batch: LuaScript::new("record_batch", include_str!("scripts/record_batch.lua")),
    fence: LuaScript::new("fence", include_str!("scripts/fence.lua")),
    acquire_marked: LuaScript::new(
        "acquire_marked",
        concat!(include_str!("scripts/take_fence.lua"), include_str!("scripts/acquire_marked.lua")),
    ),
    release_drained: LuaScript::new(
        "release_drained",
        concat!(include_str!("scripts/release_drained.lua"), include_str!("scripts/wake_one.lua")),
    ),
    peek_marked: LuaScript::new("peek_marked", include_str!("scripts/peek_marked.lua")),
    fenced_value: LuaScript::new("fenced_value", include_str!("scripts/fenced_value.lua")),
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_sha1_hex() {
        for s in SCRIPTS.all() {
            assert_eq!(s.sha.len(), 40, "{}", s.name);
            assert!(s.sha.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()), "{}", s.name);
        }
        // Distinct scripts, distinct hashes.
        let mut shas: Vec<&str> = SCRIPTS.all().iter().map(|s| s.sha.as_str()).collect();
        shas.sort_unstable();
        shas.dedup();
        assert_eq!(shas.len(), SCRIPTS.all().len());
    }
}
