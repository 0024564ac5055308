use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{ErrorKind, PortError};
use crate::keys::LeaseKey;
use crate::ports::{
    Acquire, ClaimState, ClaimStore, Clock, Holding, LeaseStore, Release, Renew, SettleAction, SettleResult, Settlement,
};
use crate::time::Time;
use crate::token::{LeaseToken, holder_of};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Str(String),
    /// Stands for a Redis hash or list someone else wrote at our key.
    Foreign,
}

#[derive(Debug, Clone)]
struct Entry {
    value: Value,
    expires: Option<Time>,
}

#[derive(Debug, Default)]
struct State {
    map: HashMap<String, Entry>,
    calls: BTreeMap<&'static str, u64>,
    failing: Option<ErrorKind>,
    fail_next: u32,
}

/// An in-memory [`LeaseStore`] and [`ClaimStore`] with real TTL semantics on any
/// [`Clock`] (virtual in tests, real in the embedded single-process default).
///
/// Every call counts as one round trip (see [`MemoryStore::calls`]), and faults can
/// be injected ([`MemoryStore::set_failing`], [`MemoryStore::fail_next`]) to test the
/// fail-open and fail-closed paths.
pub struct MemoryStore {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").field("keys", &self.lock().map.len()).finish()
    }
}

impl MemoryStore {
    /// An empty store reading time from `clock`.
    #[must_use]
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryStore { clock, state: Mutex::new(State::default()) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Make every call fail with `kind` (`None` heals the store).
    pub fn set_failing(&self, kind: Option<ErrorKind>) {
        self.lock().failing = kind;
    }

    /// Make the next `n` calls fail with a temporary connection error.
    pub fn fail_next(&self, n: u32) {
        self.lock().fail_next = n;
    }

    /// Round trips per operation so far (`acquire`, `release`, `renew`, `peek`,
    /// `peek_many`, `claim_batch`, `settle_batch`).
    #[must_use]
    pub fn calls(&self) -> BTreeMap<&'static str, u64> {
        self.lock().calls.clone()
    }

    /// Total round trips so far.
    #[must_use]
    pub fn total_calls(&self) -> u64 {
        self.lock().calls.values().sum()
    }

    /// Write a raw string value (test setup, e.g. a foreign holder's lease).
    pub fn set_raw(&self, key: &str, value: &str, ttl: Option<Duration>) {
        let expires = ttl.map(|d| self.clock.now() + d);
        self.lock().map.insert(key.to_owned(), Entry { value: Value::Str(value.to_owned()), expires });
    }

    /// Put a value of another type at `key`, as if someone wrote a hash there.
    pub fn set_foreign_type(&self, key: &str) {
        self.lock().map.insert(key.to_owned(), Entry { value: Value::Foreign, expires: None });
    }

    /// Every live key and its value (tests and `drain leases` on the embedded store).
    #[must_use]
    pub fn snapshot(&self) -> Vec<(String, Holding)> {
        let now = self.clock.now();
        let s = self.lock();
        let mut out: Vec<(String, Holding)> = s
            .map
            .iter()
            .filter(|(_, e)| e.expires.is_none_or(|t| t > now))
            .filter_map(|(k, e)| match &e.value {
                Value::Str(v) => Some((
                    k.clone(),
                    Holding { value: v.clone(), remaining: e.expires.map(|t| t.saturating_since(now)) },
                )),
                Value::Foreign => None,
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Count the call, apply injected faults, drop expired keys, then run `f`.
    fn call<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut State, Time) -> Result<T, PortError>,
    ) -> Result<T, PortError> {
        let now = self.clock.now();
        let mut s = self.lock();
        *s.calls.entry(op).or_default() += 1;
        if let Some(kind) = s.failing {
            return Err(PortError::new(kind, format!("memory store: injected {kind} failure on {op}")));
        }
        if s.fail_next > 0 {
            s.fail_next -= 1;
            return Err(PortError::new(ErrorKind::Connection, format!("memory store: injected failure on {op}")));
        }
        s.map.retain(|_, e| e.expires.is_none_or(|t| t > now));
        f(&mut s, now)
    }
}

fn get_str<'a>(s: &'a State, key: &str) -> Result<Option<&'a str>, PortError> {
    match s.map.get(key).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Str(v)) => Ok(Some(v)),
        Some(Value::Foreign) => Err(wrong_type(key)),
    }
}

fn wrong_type(key: &str) -> PortError {
    PortError::new(
        ErrorKind::WrongType,
        format!("key {key} holds a value of another type; another program writes there"),
    )
}

fn put(s: &mut State, key: &str, value: String, expires: Option<Time>) {
    s.map.insert(key.to_owned(), Entry { value: Value::Str(value), expires });
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn acquire(&self, key: &LeaseKey, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError> {
        self.call("acquire", |s, now| {
            if let Some(v) = get_str(s, &key.lease)? {
                let remaining = s.map[&key.lease].expires.map(|t| t.saturating_since(now));
                return Ok(Acquire::Held { holder: holder_of(v).to_owned(), remaining });
            }
            let fence = match get_str(s, &key.fence)? {
                None => 1,
                Some(v) => v
                    .parse::<u64>()
                    .map_err(|_| wrong_type(&key.fence))?
                    .checked_add(1)
                    .ok_or_else(|| wrong_type(&key.fence))?,
            };
            put(s, &key.fence, fence.to_string(), None);
            put(s, &key.lease, token.as_str().to_owned(), Some(now + ttl));
            Ok(Acquire::Acquired { fence })
        })
    }

    async fn release(&self, key: &LeaseKey, token: &LeaseToken) -> Result<Release, PortError> {
        self.call("release", |s, _| {
            if get_str(s, &key.lease)? == Some(token.as_str()) {
                s.map.remove(&key.lease);
                Ok(Release::Released)
            } else {
                Ok(Release::NotOwner)
            }
        })
    }

    async fn renew(&self, key: &LeaseKey, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError> {
        self.call("renew", |s, now| {
            if get_str(s, &key.lease)? == Some(token.as_str()) {
                if let Some(e) = s.map.get_mut(&key.lease) {
                    e.expires = Some(now + ttl);
                }
                Ok(Renew::Renewed)
            } else {
                Ok(Renew::Lost)
            }
        })
    }

    async fn peek(&self, key: &str) -> Result<Option<Holding>, PortError> {
        self.call("peek", |s, now| peek_one(s, key, now))
    }

    async fn peek_many(&self, keys: &[String]) -> Result<Vec<Option<Holding>>, PortError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.call("peek_many", |s, now| keys.iter().map(|k| peek_one(s, k, now)).collect())
    }
}

fn peek_one(s: &State, key: &str, now: Time) -> Result<Option<Holding>, PortError> {
    Ok(get_str(s, key)?
        .map(|v| Holding { value: v.to_owned(), remaining: s.map[key].expires.map(|t| t.saturating_since(now)) }))
}

#[async_trait]
impl ClaimStore for MemoryStore {
    async fn claim_batch(
        &self,
        keys: &[String],
        token: &LeaseToken,
        pending_ttl: Duration,
    ) -> Result<Vec<ClaimState>, PortError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.call("claim_batch", |s, now| {
            // Check types first so an error leaves nothing half-claimed.
            for k in keys {
                get_str(s, k)?;
            }
            let mut out = Vec::with_capacity(keys.len());
            for k in keys {
                let state = match get_str(s, k)? {
                    None => {
                        put(s, k, format!("pending:{}", token.as_str()), Some(now + pending_ttl));
                        ClaimState::Claimed
                    }
                    Some(v) if v.starts_with("done:") || v == "done" => ClaimState::Done,
                    Some(v) => {
                        let holder = v.strip_prefix("pending:").map_or(v, holder_of);
                        ClaimState::PendingElsewhere { holder: holder.to_owned() }
                    }
                };
                out.push(state);
            }
            Ok(out)
        })
    }

    async fn settle_batch(
        &self,
        settlements: &[Settlement],
        token: &LeaseToken,
        done_ttl: Duration,
    ) -> Result<Vec<SettleResult>, PortError> {
        if settlements.is_empty() {
            return Ok(Vec::new());
        }
        self.call("settle_batch", |s, now| {
            for st in settlements {
                get_str(s, &st.key)?;
            }
            let mine = format!("pending:{}", token.as_str());
            let mut out = Vec::with_capacity(settlements.len());
            for st in settlements {
                if get_str(s, &st.key)? != Some(mine.as_str()) {
                    out.push(SettleResult::NotOwner);
                    continue;
                }
                match st.action {
                    SettleAction::MarkDone => put(s, &st.key, format!("done:{}", token.as_str()), Some(now + done_ttl)),
                    SettleAction::Release => {
                        s.map.remove(&st.key);
                    }
                }
                out.push(SettleResult::Settled);
            }
            Ok(out)
        })
    }
}
