//! The negative control: a lease store as it is often written by hand (`SET NX PX`
//! and `INCR` in one script, compare-and-delete, compare-and-`PEXPIRE`), for the one
//! lease of the fault run. Its fences are a bare counter, so a failover that loses
//! the last acquire hands that fence out again, and an empty restart starts again at
//! 1: the checker must say so. Each call is one command on a connection of its own
//! (test-servers' client), bounded by `timeout`.

use std::time::Duration;

use async_trait::async_trait;
use drain_core::ports::{Acquire, Holding, LeaseName, LeaseStore, Release, Renew};
use drain_core::{ErrorKind, LeaseToken, PortError};
use test_servers::{Reply, redis_command};

const LEASE: &str = "counter:lease";
const FENCE: &str = "counter:fence";
const ACQUIRE: &str = "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then \
                       return redis.call('INCR', KEYS[2]) end \
                       return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}";
const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
const RENEW: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";

pub(crate) struct CounterFences {
    port: u16,
    timeout: Duration,
}

impl CounterFences {
    pub(crate) fn new(port: u16, timeout: Duration) -> CounterFences {
        CounterFences { port, timeout }
    }

    fn eval(&self, script: &str, keys: &[&str], args: &[&str]) -> Result<Reply, PortError> {
        let n = keys.len().to_string();
        let mut all = vec!["EVAL", script, n.as_str()];
        all.extend_from_slice(keys);
        all.extend_from_slice(args);
        match redis_command(self.port, &all, self.timeout) {
            Ok(Reply::Error(e)) => Err(PortError::new(ErrorKind::Other, e)),
            Ok(reply) => Ok(reply),
            Err(e) => Err(PortError::new(ErrorKind::Connection, e.to_string())),
        }
    }
}

fn millis(d: Duration) -> String {
    d.as_millis().to_string()
}

#[async_trait]
impl LeaseStore for CounterFences {
    async fn acquire(&self, _: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError> {
        match self.eval(ACQUIRE, &[LEASE, FENCE], &[token.as_str(), &millis(ttl)])? {
            Reply::Int(fence) => Ok(Acquire::Acquired { fence: fence.unsigned_abs() }),
            Reply::Array(Some(held)) => match held.as_slice() {
                [Reply::Bulk(Some(value)), Reply::Int(pttl)] => Ok(Acquire::Busy {
                    holder: LeaseToken::holder_of(&String::from_utf8_lossy(value)).to_owned(),
                    remaining: Duration::from_millis(pttl.unsigned_abs()),
                }),
                // Expired between the SET and the GET: free, try again.
                _ => Err(PortError::new(ErrorKind::Other, "the lease expired during the acquire")),
            },
            other => Err(PortError::new(ErrorKind::Protocol, format!("{other:?}"))),
        }
    }

    async fn release(&self, _: &LeaseName, token: &LeaseToken) -> Result<Release, PortError> {
        match self.eval(RELEASE, &[LEASE], &[token.as_str()])? {
            Reply::Int(1) => Ok(Release::Released),
            _ => Ok(Release::NotOwner),
        }
    }

    async fn renew(&self, _: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError> {
        match self.eval(RENEW, &[LEASE], &[token.as_str(), &millis(ttl)])? {
            Reply::Int(1) => Ok(Renew::Renewed),
            _ => Ok(Renew::Lost),
        }
    }

    async fn peek(&self, _: &LeaseName) -> Result<Option<Holding>, PortError> {
        Err(PortError::new(ErrorKind::Unsupported, "the fault run never peeks"))
    }
}
