//! The defects of the broken stores: one per plausible mistake, each with the rule
//! a suite must report for it.

use crate::testkit::contract::Rule;

macro_rules! defects {
    ($($variant:ident => $rule:ident: $what:literal;)*) => {
        /// One defect, the rule it breaks, and what it does.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Defect {
            $(
                #[doc = $what]
                $variant,
            )*
        }

        impl Defect {
            /// Every defect.
            pub const ALL: &'static [Defect] = &[$(Defect::$variant),*];

            /// The rule a suite must report for it.
            #[must_use]
            pub fn rule(self) -> Rule {
                match self {
                    $(Defect::$variant => Rule::$rule,)*
                }
            }

            /// What is wrong with the store.
            #[must_use]
            pub fn describe(self) -> &'static str {
                match self {
                    $(Defect::$variant => $what,)*
                }
            }
        }
    };
}

defects! {
    Flaky => StoreAnswers: "fails one call in seven on a healthy store";
    HangsInOutage => StoreTimeout: "calls never return while the store cannot answer (no timeout of its own)";
    ExpiryOnCallerClock => StoreOneClock: "each instance computes and judges expiry on its own clock, not the store's";
    NeverAnswers => StoreTimeout: "no call ever returns, healthy store or not";
    TimeoutReportedUnsent => StoreNeverSent: "an acquire or a claim that timed out in an outage is reported never sent, and the frozen store runs it when it thaws";

    NonAtomicAcquire => LeaseAcquireExclusive: "acquire reads, then writes in a second step: concurrent acquires all win";
    OneConnectionAcquire => LeaseAcquireExclusive: "acquire reads, then writes in a second step, on one connection per instance: only calls through different instances interleave";
    FenceDoesNotMove => LeaseFenceIncreases: "every acquire hands out fence 1";
    FenceExpiresWithLease => LeaseFenceIncreases: "the fence lives as long as the lease: after an expiry it starts again";
    HeldBumpsFence => LeaseHeldUnchanged: "an acquire of a held lease still counts the fence up";
    HeldWithoutRemaining => LeaseHeldRemaining: "Busy reports no time left (zero)";
    LeaseNeverExpires => LeaseExpires: "leases ignore their time to live";
    LeaseWholeSeconds => LeaseExpires: "lease times to live are cut to whole seconds: a 1.5 s lease is free after one second, a 300 ms one at once";
    KindsShareLeases => LeaseNamesDistinct: "a queue's lease and an owner's claim of one name are one lease";
    AcquireErrorAsHeld => LeaseAcquireError: "an acquire the store cannot answer answers Busy";
    ReleaseIgnoresToken => LeaseReleaseForeign: "release deletes the lease whoever holds it";
    ReleaseExpiredReleased => LeaseReleaseExpired: "release of our own expired lease answers Released";
    ReleaseKeepsLease => LeaseReleaseFrees: "release answers Released and keeps the lease";
    ReleaseErrorAsNotOwner => LeaseReleaseError: "a release the store cannot answer answers NotOwner";
    RenewDoesNotExtend => LeaseRenewExtends: "renew answers Renewed and changes nothing";
    RenewFromOldExpiry => LeaseRenewFromNow: "renew sets the expiry ttl past the old one, not ttl from now: a lease outlives its holder's last renewal by up to its whole time to live again";
    RenewIgnoresToken => LeaseRenewForeign: "renew extends the lease whoever holds it";
    RenewRevivesExpired => LeaseRenewExpired: "renew of our own expired lease takes it back";
    RenewErrorAsLost => LeaseRenewError: "a renew the store cannot answer answers Lost";
    PeekStaleFence => LeasePeekAgrees: "peek reports the fence before the holder's";
    PeekShowsExpired => LeasePeekFree: "peek reports an expired lease as held";
    PeekErrorAsFree => LeasePeekError: "a peek the store cannot answer answers None";

    NonAtomicClaim => ClaimExclusive: "claims read, then write in a second step: concurrent claims all win";
    OneConnectionClaim => ClaimExclusive: "claims read, then write in a second step, on one connection per instance: only calls through different instances interleave";
    ClaimOutOfOrder => ClaimOrder: "claim states come back in reverse order";
    ClaimRepeatTwice => ClaimRepeat: "an id twice in one call is claimed twice";
    DoneAnsweredClaimed => ClaimDone: "a done claim is taken again";
    PendingWithoutHolder => ClaimPending: "another's pending claim names no holder";
    PendingNeverExpires => ClaimPendingExpires: "pending claims never expire";
    ClaimWholeSeconds => ClaimPendingExpires: "claim times to live, pending and done, are cut to whole seconds";
    IdTypesCollide => ClaimDistinct: "ids are keyed by their text, so the string 42 and the number 42 collide";
    ClaimErrorAsPending => ClaimError: "a claim the store cannot answer answers PendingElsewhere";
    SettleIgnoresToken => ClaimSettleOwner: "settlements act on any claim, whoever holds it";
    SettleExpiredOwn => ClaimSettleExpired: "a settlement checks the token, not the expiry: our own expired pending claim is settled while nobody took it";
    DoneNeverExpires => ClaimDoneExpires: "done claims never expire";
    ReleaseKeepsClaim => ClaimSettleRelease: "Release answers Settled and keeps the claim";
    SettleOutOfOrder => ClaimSettleOrder: "settle results come back in reverse order";
    SettleErrorAsSettled => ClaimSettleError: "a settlement the store cannot answer answers Settled";
    ClaimsBeforeSettling => ClaimSettleThenClaim: "settle_then_claim takes the claims before it settles";

    OwnersOutOfOrder => OwnersOrder: "owner peeks come back in reverse order";
    OwnersMissHeld => OwnersHeld: "owner peeks answer Free for every claim";
    OwnersWholeSeconds => OwnersHeld: "owner peeks count the time left in whole seconds, rounded down: a claim with under a second left reads as Free";
    OwnersSeeQueueLeases => OwnersFree: "owner peeks also see a queue lease of the owner's name";
    OwnersShowExpired => OwnersFree: "owner peeks report expired claims as held";
    OwnersErrorAsFree => OwnersError: "an owner peek the store cannot answer answers Free";

    PeekDoesNotRegister => WakePeekRegisters: "a held peek never registers the waiter";
    PeekRegistersFree => WakePeekRegisters: "a peek registers the waiter on free owners too";
    PeekAndWaitAnswersFree => WakePeekAnswers: "a peek that registers answers Free for every owner";
    AcquireDoesNotRegister => WakeAcquireRegisters: "a lost acquire never registers the waiter";
    NonAtomicAcquireOrWait => WakeAcquireExclusive: "acquire_or_wait peeks, then takes the claim unconditionally in a second step: concurrent acquires all win";
    AcquireKeepsRegistration => WakeAcquireUnregisters: "a won acquire keeps the winner registered";
    RegisterTwice => WakeRegisterOnce: "registering again adds a second registration";
    RegistrationsNeverExpire => WakeRegisterExpires: "registrations never lapse";
    WakeReleaseKeepsClaim => WakeReleaseFrees: "a release that wakes keeps the claim";
    WakeEveryone => WakeReleaseOne: "a release wakes every waiter";
    WakeNewest => WakeReleaseOne: "a release wakes the newest waiter";
    WokeNeverReported => WakeReleaseReports: "a release never says it woke someone";
    WokeWithoutNotifying => WakeReleaseReports: "a release with waiters answers woke and notifies nobody";
    WakeReleaseResetsFence => WakeReleaseFence: "a release that wakes deletes the claim's row, fence and all: the next acquire hands out fence 1 again";
    WakeBeforeRelease => WakeReleaseCommitted: "the wake-up goes out in a step of its own before the release: a woken waiter finds the claim still held";
    WakeOnForeignRelease => WakeReleaseQuiet: "a release that is not ours still wakes a waiter";
    WakeWithoutFlag => WakeReleaseQuiet: "a release asked not to wake still wakes a waiter";
    WakeBroadcast => WakeDeliverOwn: "a notification goes to every subscription";
    WakeErrorAsAnswer => WakeError: "a wake-up call the store cannot answer answers as if free";
    WakeNotOffered => WakeOffered: "implements the release wake-up, but its owner claims' accessor answers None: admission and wrappers never use it";

    NonAtomicAdmit => FenceExclusive: "admit reads the mark, then writes in a second step: a lower fence can land last";
    EqualFenceRefused => FenceAccepts: "a fence equal to the mark is refused: the holder cannot write twice";
    MarkNeverRaised => FenceStale: "a larger fence is accepted without raising the mark";
    MarksExpire => FenceKeeps: "marks lapse 100 ms after they were raised, like a key with a time to live";
    MarksLapseWhenQuiet => FenceKeeps: "marks lapse after a second without writes, like a key whose time to live each write renews";
    FencesAsFloats => FenceUnits: "fences compare as floating-point numbers: above 2^53 neighbours are equal";
    FencesSigned => FenceUnits: "fences are kept as signed 64-bit numbers: one above 2^63 reads as negative and is refused";
    ResourcesShareMarks => FenceResources: "marks are keyed by the resource's letters and digits only: `r{a}` and `ra` share one";
    AdmitErrorAsAccepted => FenceError: "an admit the store cannot answer answers Accepted";

    StampedPeekMissesHeld => StampsPeekClaims: "a stamped peek answers every claim Free";
    UnstampedAnswersZero => StampsPeekNone: "an owner never drained answers a stamp of age zero";
    StampedPeekTwoTrips => StampsPeekAtomic: "a stamped peek reads the claims, then the stamps in a second round trip: a release in between pairs the holder's claim with its own stamp";
    StampsLapse => StampsKeeps: "stamps lapse a second after their drain began, like a key with a short time to live";
    StampedAcquireIgnoresHolder => StampsAcquire: "a stamped acquire takes a held claim over";
    StampedAcquireRestartsFence => StampsAcquire: "a stamped acquire of a free claim writes a new row with fence 1, not the claim's next fence";
    StampedAcquirePeekThenUpsert => StampsAcquireExclusive: "a stamped acquire peeks, then upserts the claim unconditionally in a second round trip: concurrent acquires all win";
    StampAtAcquire => StampsAcquireUnstamped: "the stamp is published when the turn takes the claim: a turn that fails or dies drops the requests it never served";
    DrainedReleaseIgnoresToken => StampsRelease: "a drained release deletes the claim whoever holds it";
    StampedReleaseResetsFence => StampsReleaseFence: "a drained release deletes the claim's row, fence and all: the next acquire hands out fence 1 again";
    StampAtRelease => StampsReleaseDrained: "the stamp is the release's time, not the acquire's: items written during the turn count as drained";
    StampWithoutDrained => StampsReleaseQuiet: "every release by the holder publishes the stamp, drained or not";
    StampOnExpiredOwn => StampsReleaseNotOwner: "a drained release of our own expired claim answers NotOwner and still publishes its start";
    StampAfterPlainAcquire => StampsReleaseUnstarted: "a drained release publishes the last start recorded, whoever took the claim: after a plain acquire, an earlier holder's";
    StampsErrorAsAnswer => StampsError: "a stamped peek or acquire the store cannot answer answers as if free and unstamped";
    StampsNotOffered => StampsOffered: "implements the drain stamps, but its owner claims' accessor answers None: admission and wrappers never use them";

    WriteAnyFence => WriteStale: "a fenced write lands whatever its fence";
    WriteNotBelowFence => WriteStale: "a fenced write lands when its fence is not below the current one, like a mark: a fence never handed out writes";
    WriteOnlyWhileHeld => WriteCurrent: "a fenced write is refused once its lease expired or was released, although nobody took it since";
    WriteCheckThenSet => WriteAtomic: "a fenced write reads the current fence, then writes in a second step: a stale holder's write lands after the new holder's acquire";
    WriteKeysShared => WriteRead: "fenced values are keyed by the key alone: leases of one key name share a value";
    WriteErrorAsStale => WriteError: "a fenced write the store cannot answer answers Stale, a read answers None";
}
