//! Contract suites: one behaviour suite per port, run against drain-core's in-memory
//! ports in its own tests and against every real adapter in the adapter's tests.
//!
//! Each suite is an async function that drives the implementation through the
//! port's rules (the MUST sentences of its docs, each named) and answers
//! `Ok(`[`Checked`]`)` with the rules it checked, or `Err(`[`Violation`]`)` naming the
//! first rule it found broken. Mutual exclusion is checked the way it breaks: many
//! callers at once, over many rounds. The calls of one round run concurrently on the
//! caller's task, spread round robin over `ContractEnv::instances`: give the suite
//! several instances of the store (as each process of a fleet has its own, with
//! connections of its own), or a store that queues every call on one connection
//! never has its acquires or claims interleaved, and a non-atomic one passes.
//!
//! A suite needs a [`ContractEnv`]: a [`Clock`] to let time to live run out
//! (`memory::ManualClock` under `memory::block_on` for in-memory ports; a real clock
//! such as drain-runtime's `TokioClock` for real servers, with `short_ttl` around
//! 300 ms), and optionally an [`Outage`] that makes the store unable to answer, so
//! that the error rules are checked too (without one they are listed as skipped).
//! Every call the suite makes is bounded by `ContractEnv::deadline` on that clock: a
//! call that has not come back by then (a store without a timeout of its own, during
//! an outage) is reported as rule `store.timeout`, never a suite that hangs. A suite
//! waits out the deadline once at most: after a call that did not come back it makes
//! no other call during the outage, so a store whose calls never return fails each
//! suite within one deadline.
//!
//! ```
//! use std::sync::Arc;
//!
//! use drain_core::memory::{ManualClock, MemoryStore, block_on};
//! use drain_core::ports::Clock;
//! use drain_core::testkit::contract::{self, ContractEnv};
//!
//! let clock = Arc::new(ManualClock::new());
//! let store = MemoryStore::new(clock.clone() as Arc<dyn Clock>);
//! // The memory store serves one process: each of its instances is the one store. A
//! // store on a server gets several, each with connections of its own.
//! let fleet = [&store, &store];
//! let env = ContractEnv::new(&*clock).outage(&store).instances(&fleet);
//! let checked = block_on(&clock, contract::lease_store(&store, &env)).unwrap();
//! assert!(checked.skipped.is_empty());
//! ```

mod claim;
mod clocks;
mod drained;
mod fence;
mod lease;
mod owners;
mod rules;
mod source;
mod wake;
mod writes;

pub use claim::claim_store;
pub use drained::drain_stamps;
pub use fence::fence_marks;
pub use lease::lease_store;
pub use owners::owner_claims;
pub use rules::{Port, Rule};
pub use source::message_source;
pub use wake::release_wake;
pub use writes::fenced_writes;

use std::fmt;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use futures::future::{Either, select};

use crate::error::PortError;
use crate::ports::Clock;
use crate::token::LeaseToken;

/// A rule the implementation broke, and what the suite saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// What happened instead.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule `{}` broken ({}): {}", self.rule.id(), self.rule.port().doc(), self.detail)
    }
}

impl std::error::Error for Violation {}

/// What a suite checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checked {
    /// The rules it checked, each once, in the order first checked.
    pub checked: Vec<Rule>,
    /// The rules it could not check, with the reason (e.g. no [`Outage`] was given).
    pub skipped: Vec<(Rule, &'static str)>,
}

/// Makes the store unable to answer and able again, for the error rules: stop or
/// pause the server, cut the connection, make an in-memory store fail.
#[async_trait]
pub trait Outage: Send + Sync {
    /// From now on the store cannot answer (its calls must fail, within their
    /// timeouts).
    async fn begin(&self);
    /// The store answers again.
    async fn end(&self);
}

/// What a suite needs besides the implementation under test (a store of type `S`).
pub struct ContractEnv<'a, S: ?Sized> {
    /// Waits for time to live to pass.
    pub clock: &'a dyn Clock,
    /// A time to live short enough to wait out, long enough that the store does not
    /// expire it before the next call returns. Every store must keep it to the
    /// millisecond, as it must 1.5 s (both checked): keep it under a second.
    pub short_ttl: Duration,
    /// Put before every queue, owner and instance name the suite uses, so that
    /// suites running at once on one store do not meet.
    pub names: &'a str,
    /// Concurrent callers per round of the mutual-exclusion checks (at least 2).
    pub callers: usize,
    /// Rounds of the mutual-exclusion checks.
    pub rounds: usize,
    /// Makes the store unable to answer; `None` skips the error rules.
    pub outage: Option<&'a dyn Outage>,
    /// How long the suite waits for any one call, on `clock`, before it reports rule
    /// `store.timeout` instead of waiting for ever: longer than the store's own
    /// timeout, which must end a call to a store that cannot answer. A suite waits it
    /// out once at most.
    pub deadline: Duration,
    /// Instances of the store under test, as the processes of a fleet would each
    /// have one (each with connections of its own): the concurrent callers of the
    /// mutual-exclusion checks go round robin over them, and the instances must
    /// agree on expiry (rule `store.one_clock`, skipped with fewer than two). Empty:
    /// the store given to the suite serves them all, so a store that queues calls on
    /// one connection is never interleaved.
    pub instances: &'a [&'a S],
}

impl<S: ?Sized> Clone for ContractEnv<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: ?Sized> Copy for ContractEnv<'_, S> {}

impl<'a, S: ?Sized> ContractEnv<'a, S> {
    /// Defaults: `short_ttl` 300 ms, no name prefix, 8 callers over 20 rounds, no
    /// outage, a deadline of 5 s per call, no further instances.
    #[must_use]
    pub fn new(clock: &'a dyn Clock) -> Self {
        ContractEnv {
            clock,
            short_ttl: Duration::from_millis(300),
            names: "",
            callers: 8,
            rounds: 20,
            outage: None,
            deadline: Duration::from_secs(5),
            instances: &[],
        }
    }

    /// With this short time to live.
    #[must_use]
    pub fn short_ttl(mut self, ttl: Duration) -> Self {
        self.short_ttl = ttl;
        self
    }

    /// With this name prefix.
    #[must_use]
    pub fn names(mut self, prefix: &'a str) -> Self {
        self.names = prefix;
        self
    }

    /// With this many concurrent callers over this many rounds.
    #[must_use]
    pub fn concurrency(mut self, callers: usize, rounds: usize) -> Self {
        self.callers = callers.max(2);
        self.rounds = rounds.max(1);
        self
    }

    /// With an outage hook, so that the error rules are checked.
    #[must_use]
    pub fn outage(mut self, outage: &'a dyn Outage) -> Self {
        self.outage = Some(outage);
        self
    }

    /// With this deadline per call (longer than the store's own timeout).
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// With these instances of the store under test (the store given to the suite
    /// among them, or not): several, each with connections of its own, so that
    /// concurrent calls reach the store at once as a fleet's do.
    #[must_use]
    pub fn instances(mut self, instances: &'a [&'a S]) -> Self {
        self.instances = instances;
        self
    }

    /// The instances the concurrent callers go round robin over: the given ones,
    /// or `store` alone.
    fn pool<'s>(&self, store: &'s S) -> Vec<&'s S>
    where
        'a: 's,
    {
        if self.instances.is_empty() { vec![store] } else { self.instances.to_vec() }
    }

    fn name(&self, name: &str) -> String {
        format!("{}{name}", self.names)
    }

    async fn wait(&self, d: Duration) {
        let until = self.clock.now() + d;
        self.clock.sleep_until(until).await;
    }

    /// `fut`'s output, or `None` once `d` has passed on the clock.
    async fn within<F: Future>(&self, d: Duration, fut: F) -> Option<F::Output> {
        let until = self.clock.now() + d;
        let sleep = self.clock.sleep_until(until);
        futures::pin_mut!(fut);
        match select(fut, sleep).await {
            Either::Left((out, _)) => Some(out),
            Either::Right(((), _)) => None,
        }
    }
}

/// The rules a suite checked so far, and the checks.
#[derive(Default)]
struct Tally {
    done: Checked,
}

impl Tally {
    /// Fail `rule` unless `ok`.
    fn ensure(&mut self, ok: bool, rule: Rule, detail: impl FnOnce() -> String) -> Result<(), Violation> {
        if !self.done.checked.contains(&rule) {
            self.done.checked.push(rule);
        }
        if ok { Ok(()) } else { Err(Violation { rule, detail: detail() }) }
    }

    /// The answer of a call to a healthy store, or a `store.answers` violation.
    fn answer<T>(&mut self, what: &str, r: Result<T, PortError>) -> Result<T, Violation> {
        match r {
            Ok(v) => {
                self.ensure(true, Rule::StoreAnswers, String::new)?;
                Ok(v)
            }
            Err(e) => {
                Err(Violation { rule: Rule::StoreAnswers, detail: format!("{what} failed on a healthy store: {e}") })
            }
        }
    }

    fn skip(&mut self, rules: &[Rule], why: &'static str) {
        for &r in rules {
            if !self.done.skipped.iter().any(|(s, _)| *s == r) {
                self.done.skipped.push((r, why));
            }
        }
    }

    fn finish(self) -> Checked {
        self.done
    }
}

/// A store suite: its environment and its tally.
struct Suite<'a, S: ?Sized> {
    env: ContractEnv<'a, S>,
    tally: Tally,
    /// A call did not come back by the deadline: the suite makes no other bounded
    /// call, so that it waits the deadline out once.
    hung: bool,
}

impl<'a, S: ?Sized> Suite<'a, S> {
    fn new(env: &ContractEnv<'a, S>) -> Self {
        Suite { env: *env, tally: Tally::default(), hung: false }
    }

    /// Begin an outage when there is an outage hook (the caller makes its calls,
    /// ends it, then checks the answers); otherwise mark `rules` skipped.
    async fn begin_outage(&mut self, rules: &[Rule]) -> Option<&'a dyn Outage> {
        match self.env.outage {
            Some(outage) => {
                outage.begin().await;
                Some(outage)
            }
            None => {
                self.tally.skip(rules, "no Outage hook in the ContractEnv");
                None
            }
        }
    }

    /// `fut`'s output, or a `store.timeout` violation when it did not return within
    /// the deadline.
    async fn bounded<F: Future>(&mut self, what: &str, fut: F) -> Result<F::Output, Violation> {
        let out = self.timed(fut).await;
        self.timely(what, out)
    }

    /// The answer of a call to a healthy store, within the deadline.
    async fn call<T>(&mut self, what: &str, fut: impl Future<Output = Result<T, PortError>>) -> Result<T, Violation> {
        let r = self.bounded(what, fut).await?;
        self.tally.answer(what, r)
    }

    /// What a call came back with, or `None` when it had not come back by the
    /// deadline: for calls made during an outage ([`Suite::must_fail`] checks them
    /// once it ended) and the clean-up after it. After one call did not come back,
    /// the next ones are not made (`None` at once): the suite fails on the first.
    async fn timed<F: Future>(&mut self, fut: F) -> Option<F::Output> {
        if self.hung {
            return None;
        }
        let out = self.env.within(self.env.deadline, fut).await;
        self.hung = out.is_none();
        out
    }

    /// An output that came back within the deadline (`Some`), or a `store.timeout`
    /// violation.
    fn timely<T>(&mut self, what: &str, out: Option<T>) -> Result<T, Violation> {
        let deadline = self.env.deadline;
        match out {
            Some(out) => {
                self.tally.ensure(true, Rule::StoreTimeout, String::new)?;
                Ok(out)
            }
            None => Err(Violation {
                rule: Rule::StoreTimeout,
                detail: format!("{what} had not returned after {deadline:?} on a healthy store"),
            }),
        }
    }

    /// Fail `rule` unless the call made during an outage failed, and
    /// `store.timeout` when it did not come back at all.
    fn must_fail<T: fmt::Debug>(
        &mut self,
        rule: Rule,
        what: &str,
        r: &Option<Result<T, PortError>>,
    ) -> Result<(), Violation> {
        let deadline = self.env.deadline;
        let Some(r) = r else {
            return Err(Violation {
                rule: Rule::StoreTimeout,
                detail: format!(
                    "{what} had not returned after {deadline:?} while the store could not answer (a call needs a timeout of its own)"
                ),
            });
        };
        self.tally.ensure(r.is_err(), rule, || format!("{what} answered {} while the store could not answer", shown(r)))
    }

    /// Fail `store.never_sent` when a call made during an outage was reported never
    /// sent, yet it ran once the store answered again (`landed`).
    fn unsent_landed<T>(
        &mut self,
        what: &str,
        r: &Option<Result<T, PortError>>,
        landed: bool,
    ) -> Result<(), Violation> {
        let unsent = matches!(r, Some(Err(e)) if e.unsent);
        self.tally.ensure(!(unsent && landed), Rule::StoreNeverSent, || {
            format!("{what} failed during the outage as never sent, and ran once the store answered again")
        })
    }

    fn finish(self) -> Checked {
        self.tally.finish()
    }
}

impl<S: ?Sized> std::ops::Deref for Suite<'_, S> {
    type Target = Tally;
    fn deref(&self) -> &Tally {
        &self.tally
    }
}

impl<S: ?Sized> std::ops::DerefMut for Suite<'_, S> {
    fn deref_mut(&mut self) -> &mut Tally {
        &mut self.tally
    }
}

/// A token for `instance` from a fixed seed.
fn token(instance: &str, seed: u64) -> LeaseToken {
    LeaseToken::generate(instance, &mut super::TestRng::new(seed))
}

/// How a result looks in a violation: the answer, or the error's kind.
fn shown<T: fmt::Debug>(r: &Result<T, PortError>) -> String {
    match r {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("Err({})", e.kind),
    }
}

/// Poll `fut` once: its output if it is ready now.
fn ready_now<F: Future>(fut: F) -> Option<F::Output> {
    fut.now_or_never()
}
