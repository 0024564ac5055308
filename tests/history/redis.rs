//! The history on a private redis-server: `RedisStore::fenced_write` (an `HSET` of a
//! field per write, checked against the key's mark in one script) beside a plain
//! `RPUSH` of the same writes to a list, which keeps the order Redis applied them in.
//!
//! The server keeps an append-only file (`appendfsync always`), so its restart keeps
//! the fence counter, the lease and the marks. Without persistence a restart empties
//! Redis: the counter starts again at 1, so the next holder's fence is *smaller* than
//! the one a paused holder still carries, and marks kept elsewhere (another Redis,
//! PostgreSQL, a consumer's) refuse every new holder (docs/reliability.md, "Fences
//! belong to one store").

use std::time::Duration;

use adapter_redis::{FencedWrite, RedisConfig, RedisStore};
use drain_core::PortError;
use drain_core::ports::{Fence, FenceVerdict};
use test_servers::{RedisServer, Reply};

use super::{Backend, Outcome, Resource};

/// The fenced key (a hash: one field per write) and the plain list.
const FENCED: &str = "history";
const PLAIN: &str = "history:plain";

pub(crate) struct Redis;

impl Backend for Redis {
    const NAME: &'static str = "Redis";
    const RESOURCES: &'static [Resource] =
        &[Resource { name: "fenced_write HSET", checked: true }, Resource { name: "plain RPUSH", checked: false }];
    type Server = RedisServer;
    type Store = RedisStore;
    type Conn = ();

    fn start() -> RedisServer {
        RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
    }

    fn url(server: &RedisServer) -> String {
        server.url()
    }

    fn pause(server: &mut RedisServer) {
        server.pause();
    }

    fn resume(server: &mut RedisServer) {
        server.resume();
    }

    fn restart(server: &mut RedisServer) {
        server.restart();
    }

    async fn connect(url: &str) -> Result<(RedisStore, ()), PortError> {
        // A response timeout longer than the delayed replies: they come late, not never.
        let config = RedisConfig::new(url).timeouts(Duration::from_millis(500), Duration::from_secs(1));
        Ok((RedisStore::connect(config).await?, ()))
    }

    async fn write(store: &RedisStore, (): &(), resource: usize, fence: &Fence, id: u64) -> Outcome {
        let (id, number) = (id.to_string(), fence.number().to_string());
        if resource == 0 {
            let fields: &[(&[u8], &[u8])] = &[(id.as_bytes(), number.as_bytes())];
            match store.fenced_write(FENCED, fence, FencedWrite::HSet { fields }).await {
                Ok(FenceVerdict::Accepted) => Outcome::Accepted,
                Ok(FenceVerdict::Stale { .. }) => Outcome::Stale,
                Err(_) => Outcome::Failed,
            }
        } else {
            match store.push_items(&[(PLAIN.to_owned(), vec![id])]).await {
                Ok(()) => Outcome::Accepted,
                Err(_) => Outcome::Failed,
            }
        }
    }

    fn landed(server: &RedisServer, resource: usize) -> Option<Vec<(u64, Option<u64>)>> {
        let reply = if resource == 0 {
            server.command(&["HKEYS", FENCED])
        } else {
            server.command(&["LRANGE", PLAIN, "0", "-1"])
        };
        let Ok(Reply::Array(Some(items))) = reply else { panic!("reading {resource}: {reply:?}") };
        let ids = items.into_iter().map(|item| match item {
            Reply::Bulk(Some(b)) => String::from_utf8_lossy(&b).parse::<u64>().expect("a write id"),
            other => panic!("not a write id: {other:?}"),
        });
        Some(ids.enumerate().map(|(i, id)| (id, (resource == 1).then_some(i as u64))).collect())
    }
}
