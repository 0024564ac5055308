//! Which ACL rights a Redis user lacks, each command tried once (`drain doctor`).
//!
//! A script's refusal names only the script call, so every command drain's
//! operations send (also those its scripts run) is tried directly, and a refusal
//! names its command. The sets below are what each group of operations sends; a
//! caller (the binary, per subcommand) asks for the union it needs.

use drain_core::{ErrorKind, PortError};
use redis::Cmd;

use crate::store::RedisStore;

/// Leases and per-message claims (acquire, release, renew, claim, settle, the
/// batched peeks): the scripts, the commands they run, and `PING`.
pub const LEASES_AND_CLAIMS: &[&str] = &[
    "+evalsha",
    "+eval",
    "+script|load",
    "+get",
    "+set",
    "+del",
    "+incr",
    "+pexpiretime",
    "+pexpire",
    "+pttl",
    "+ping",
];

/// Owner backlogs ([`RedisStore::take_batch`], [`RedisStore::record_batch`],
/// [`RedisStore::list_lengths`], [`RedisStore::push_items`]).
pub const OWNER_BACKLOGS: &[&str] = &["+llen", "+lrange", "+rpush", "+ltrim", "+hincrby", "+del"];

/// Reading leases and claims ([`RedisStore::scan`]): `SCAN` on a standalone server
/// (`CLUSTER NODES` and `SCAN` on each primary of a Cluster), then `GET` + `PTTL`.
pub const SCAN: &[&str] = &["+scan", "+get", "+pttl", "+ping"];

impl RedisStore {
    /// Which of `rights` (ACL rules such as `+pexpire`, from the sets above) this
    /// user lacks, in the order given; empty when it has them all. Each is tried
    /// once with a command of its own on `probe` and keys derived from it (suffixed
    /// `:n`, `:l` and `:h`, so they share its hash slot), which must lie under the
    /// key prefix; every probe key is deleted again (or, without `+del`, given a
    /// short TTL), so nothing is left behind. On a Cluster, `+scan` is tried as
    /// `+cluster|nodes` (what `scan` sends there first).
    ///
    /// # Errors
    /// `Config` for a right not in the sets above; otherwise the mapped error of a
    /// probe that failed for another reason than a missing right.
    pub async fn missing_rights(&self, probe: &str, rights: &[&'static str]) -> Result<Vec<&'static str>, PortError> {
        const TRIVIAL: &str = "return 1";
        let (counter, list, hash) = (format!("{probe}:n"), format!("{probe}:l"), format!("{probe}:h"));
        let sha = redis::Script::new(TRIVIAL).get_hash().to_owned();
        let cluster = self.is_cluster();
        let mut probes: Vec<(&'static str, Cmd)> = Vec::new();
        for &right in rights {
            let args: Vec<&str> = match right {
                "+ping" => vec!["PING"],
                "+set" => vec!["SET", probe, "1", "PX", "10000"],
                "+get" => vec!["GET", probe],
                "+pttl" => vec!["PTTL", probe],
                "+pexpire" => vec!["PEXPIRE", probe, "10000"],
                "+incr" => vec!["INCR", &counter],
                "+pexpiretime" => vec!["PEXPIRETIME", probe],
                "+del" => vec!["DEL", probe],
                "+script|load" => vec!["SCRIPT", "LOAD", TRIVIAL],
                "+evalsha" => vec!["EVALSHA", &sha, "0"],
                "+eval" => vec!["EVAL", TRIVIAL, "0"],
                "+scan" if cluster => vec!["CLUSTER", "NODES"],
                "+scan" => vec!["SCAN", "0", "MATCH", probe, "COUNT", "10"],
                "+rpush" => vec!["RPUSH", &list, "probe"],
                "+llen" => vec!["LLEN", &list],
                "+lrange" => vec!["LRANGE", &list, "0", "0"],
                "+ltrim" => vec!["LTRIM", &list, "0", "-1"],
                "+hincrby" => vec!["HINCRBY", &hash, "probe", "1"],
                other => {
                    return Err(PortError::new(ErrorKind::Config, format!("no probe for the right {other}")));
                }
            };
            let mut cmd = redis::cmd(args[0]);
            cmd.arg(&args[1..]);
            probes.push((if right == "+scan" && cluster { "+cluster|nodes" } else { right }, cmd));
        }
        let mut missing = Vec::new();
        let mut failure = None;
        for (right, cmd) in &probes {
            match self.query("rights", cmd).await {
                Ok(_) => {}
                Err(e) if e.kind == ErrorKind::Permission => missing.push(*right),
                // Unknown SHA (SCRIPT LOAD refused): the ACL check passed before it.
                Err(e) if *right == "+evalsha" && e.message.contains("NOSCRIPT") => {}
                Err(mut e) => {
                    e.message = format!("probing {right}: {}", e.message);
                    failure = Some(e);
                    break;
                }
            }
        }
        self.forget_probes(&[probe, &counter, &list, &hash]).await;
        match failure {
            Some(e) => Err(e),
            None => Ok(missing),
        }
    }

    /// Leave none of `keys` behind: `DEL` them, or, without that right, give
    /// each a short TTL. Errors are ignored (a probe that could not write left
    /// nothing).
    pub(crate) async fn forget_probes(&self, keys: &[&str]) {
        let mut del = redis::cmd("DEL");
        del.arg(keys);
        if self.query("rights", &del).await.is_err() {
            for key in keys {
                let mut expire = redis::cmd("PEXPIRE");
                expire.arg(*key).arg(10_000);
                let _ = self.query("rights", &expire).await;
            }
        }
    }
}
