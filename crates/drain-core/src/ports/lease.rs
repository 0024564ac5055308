use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::PortError;
use crate::token::LeaseToken;

/// What a lease guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LeaseKind {
    /// One queue's drain: the single-flight lease of the tick.
    Queue,
    /// One owner's work: the claim an owner turn takes, which admission peeks.
    Owner,
    /// Work of your own that must not run twice at once (a nightly job, a
    /// migration): the lease a lease guard takes.
    Job,
}

impl LeaseKind {
    /// A short stable name (`queue`, `owner`), for logs and for a store's own layout.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseKind::Queue => "queue",
            LeaseKind::Owner => "owner",
            LeaseKind::Job => "job",
        }
    }
}

/// The identity of one lease: a kind and a name (a queue's, an owner's).
///
/// A store decides how to keep it (a key, a row keyed by kind and name, …); two
/// leases are the same lease exactly when their kinds and names are equal. Names are
/// any text, including the empty one and characters a store must escape.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseName {
    kind: LeaseKind,
    name: String,
}

impl LeaseName {
    /// The single-flight lease of `queue`.
    #[must_use]
    pub fn queue(queue: impl Into<String>) -> Self {
        LeaseName { kind: LeaseKind::Queue, name: queue.into() }
    }

    /// The claim of `owner`.
    #[must_use]
    pub fn owner(owner: impl Into<String>) -> Self {
        LeaseName { kind: LeaseKind::Owner, name: owner.into() }
    }

    /// The lease of a job of your own named `job`.
    #[must_use]
    pub fn job(job: impl Into<String>) -> Self {
        LeaseName { kind: LeaseKind::Job, name: job.into() }
    }

    /// What it guards.
    #[must_use]
    pub fn kind(&self) -> LeaseKind {
        self.kind
    }

    /// The queue's or owner's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for LeaseName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind.as_str(), self.name)
    }
}

/// A fencing token: the number a store handed out with a lease, and that lease.
///
/// Every acquire of a lease hands out a larger fence than the one before, so a
/// resource that remembers the highest fence it accepted can refuse a holder that
/// lost the lease and does not know it yet (a pause past its time to live). Fences
/// count per lease and per store: moving a lease to another store starts them again.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    lease: LeaseName,
    number: u64,
}

impl Fence {
    /// Fence `number` of `lease`.
    #[must_use]
    pub fn new(lease: LeaseName, number: u64) -> Self {
        Fence { lease, number }
    }

    /// The lease it came with.
    #[must_use]
    pub fn lease(&self) -> &LeaseName {
        &self.lease
    }

    /// The number: larger for every later holder of the lease.
    #[must_use]
    pub fn number(&self) -> u64 {
        self.number
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fence {} of {}", self.number, self.lease)
    }
}

/// Result of [`LeaseStore::acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// The lease is ours.
    Acquired {
        /// The lease's fencing number: larger than every fence handed out before for
        /// this lease, so a downstream store can refuse a writer that lost the lease.
        fence: u64,
    },
    /// Someone holds it (possibly this very token).
    Busy {
        /// The holder's instance id (the token before its last `:`).
        holder: String,
        /// Time left on the holder's lease.
        remaining: Duration,
    },
}

/// Result of [`LeaseStore::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Our lease was released; the lease is free.
    Released,
    /// The lease is free, expired, or another token's; nothing was changed.
    NotOwner,
}

/// Result of [`LeaseStore::renew`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renew {
    /// Our lease now expires `ttl` from now.
    Renewed,
    /// The lease is free, expired, or another token's; nothing was changed.
    Lost,
}

/// A held lease as [`LeaseStore::peek`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// The holder's instance id (the token before its last `:`).
    pub holder: String,
    /// Time left on the lease.
    pub remaining: Duration,
    /// The fence the holder was given when it acquired the lease.
    pub fence: u64,
}

/// Single-flight leases with fencing.
///
/// A lease is free, or held by one token until its time to live runs out. Taking it
/// hands out a fence, a number larger than every fence handed out before for that
/// lease: the fence belongs to the lease, whatever the store keeps it in (a counter
/// beside the lease, a column of the lease's row).
///
/// Implementations: drain-core's `MemoryStore` (feature `memory`) and the adapters.
/// `testkit::contract::lease_store` checks every rule below; each rule's name follows
/// its sentence.
///
/// # Errors
///
/// Every method answers `Err` when the store cannot answer. An error never stands
/// for an answer: the tick fails open on an acquire error and keeps renewing after a
/// renew error, so a store that turned an outage into `Busy` or `Lost` would stall
/// drains or cancel them. Kinds are those of [`ErrorKind`](crate::ErrorKind):
/// `Timeout` when no answer came in time, `Connection` when the store could not be
/// reached, `WrongType` for a record the store cannot read as a lease (another
/// program writes where drain keeps its leases).
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Take `lease` for `token` for `ttl`, if it is free (never taken, released, or
    /// expired).
    ///
    /// Acquires of one lease MUST be atomic: of any number of concurrent acquires
    /// of a free lease, exactly one answers `Acquired` (rule `lease.acquire.exclusive`).
    /// The fence MUST be larger than every fence handed out before for this lease,
    /// whether the lease was released or expired in between, however short its
    /// time to live (rule `lease.fence.increases`). A lease held by anyone (this token
    /// included) MUST answer `Busy` with the holder's instance and change nothing
    /// (rule `lease.held.unchanged`); `remaining` MUST be the time left on the
    /// holder's lease: above zero, and at most the time to live the holder took or
    /// last renewed it with (rule `lease.held.remaining`). A lease MUST expire `ttl`
    /// after it was taken or last renewed, not before and not long after, whatever
    /// the `ttl`, fractions of a second included: a store that keeps whole seconds
    /// frees a 1.5 s lease after one second and a 300 ms one at once
    /// (rule `lease.expires`). Leases of different
    /// kinds or names MUST be independent, whatever characters the names hold
    /// (rule `lease.names.distinct`).
    ///
    /// # Errors
    ///
    /// MUST answer `Err`, never `Busy`, when the store cannot answer
    /// (rule `lease.acquire.error`). A timed-out acquire may still have taken the lease
    /// (a request is not withdrawn by the caller's timeout): report it as
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout), and the caller, which
    /// cannot know, releases with the same token once it is done (the tick does).
    /// That release is safe because release compares the token.
    async fn acquire(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError>;

    /// Release `lease` if `token` holds it (compare-and-delete).
    ///
    /// MUST answer `NotOwner` and change nothing when another token holds the lease
    /// (rule `lease.release.foreign`), and when the lease is free or expired, our own
    /// expired lease included (rule `lease.release.expired`). After `Released` the lease
    /// MUST be free: the next acquire takes it (rule `lease.release.frees`).
    ///
    /// # Errors
    ///
    /// MUST answer `Err`, never `NotOwner`, when the store cannot answer
    /// (rule `lease.release.error`); the lease's time to live then frees it.
    async fn release(&self, lease: &LeaseName, token: &LeaseToken) -> Result<Release, PortError>;

    /// Extend `lease` to `ttl` from now if `token` holds it.
    ///
    /// `Renewed` MUST extend the lease: it holds until `ttl` after the renewal
    /// (rule `lease.renew.extends`), and no longer: the new expiry MUST be `ttl`
    /// from the renewal, never `ttl` past the old expiry, so that a holder that
    /// stops renewing loses the lease `ttl` after its last renewal
    /// (rule `lease.renew.from_now`). MUST answer `Lost` and change nothing when another
    /// token holds the lease (rule `lease.renew.foreign`), and when the lease is free or
    /// expired: our own expired lease is never brought back (rule `lease.renew.expired`).
    ///
    /// # Errors
    ///
    /// MUST answer `Err`, never `Lost`, when the store cannot answer
    /// (rule `lease.renew.error`): a blip is not a loss.
    async fn renew(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError>;

    /// Look at `lease` without changing it: `None` when it is free.
    ///
    /// MUST agree with acquire: the holder `Busy` names, a remaining time no later
    /// than `Busy`'s, and the fence the holder's `Acquired` carried
    /// (rule `lease.peek.agrees`); a free, released or expired lease MUST be `None`
    /// (rule `lease.peek.free`).
    ///
    /// # Errors
    ///
    /// MUST answer `Err`, never `None`, when the store cannot answer
    /// (rule `lease.peek.error`).
    async fn peek(&self, lease: &LeaseName) -> Result<Option<Holding>, PortError>;
}
