//! A claim-store outage across ticks, as a sans-IO state machine.
//!
//! The claim fails closed: a message that cannot be claimed is abandoned, never
//! submitted. But every receive counts as a delivery, and a source with a maximum
//! delivery count dead-letters a message abandoned that often. So once a tick found the claim store
//! failing, the process must not receive again until the store answers: every later
//! tick (the beat's and the resident consumer's) asks the [`Outage`] first.
//!
//! ```text
//!            tick_failed                    gate: probe due
//!   Up ───────────────────► Down{until} ───────────────────► Probing
//!    ▲                          ▲                               │
//!    │ tick_succeeded            └──── probe_failed (longer) ────┤
//!    │                                                           │ probe_succeeded
//!    └──── (strikes kept until a tick's claims are answered) ◄───┘
//! ```
//!
//! While down, [`Outage::verdict`] answers [`OutageVerdict::Wait`] (receive nothing) until the
//! back-off has passed, then hands out one [`OutageVerdict::Probe`]: a cheap check of the
//! claim store that receives nothing ([`crate::tick::probe_claims`]). The back-off is
//! exponential (`base`, doubling per failed probe, capped at `cap`) and jittered
//! (uniform in the upper half of each step, so a fleet does not probe in step). A
//! probe that succeeds lets ticks run again, but the strikes are kept until a tick's
//! claims are answered ([`Outage::tick_succeeded`]): a store that answers the probe
//! but fails real claims backs off further instead of costing a delivery a second.
//!
//! **Late claims.** A claim call that timed out is not withdrawn: a frozen store runs
//! it when it thaws, taking `pending` claims with the failed tick's token for messages
//! that tick gave back. Each redelivery would then find them held elsewhere until the
//! pending TTL, and a broker with a maximum delivery count dead-letters them. So the
//! outage also keeps those ids ([`Outage::keep_stale`], from
//! [`crate::tick::TickReport::stale_claims`]), and the caller releases them with their
//! tick's token ([`crate::tick::release_stale_claims`]) after a probe answered and
//! before it reports [`Outage::probe_succeeded`]: the probe's answer comes after the
//! store ran what it held from before, so the release follows the late claims. A
//! release compares the token, so an id whose call never ran is left alone. At most
//! 4,096 ids are kept (the oldest go first; their claims end with the
//! pending TTL).

use std::collections::VecDeque;
use std::time::Duration;

use rand::Rng;

use crate::backoff::Backoff;
use crate::ports::MessageId;
use crate::time::Time;
use crate::token::LeaseToken;

/// The most message ids an [`Outage`] keeps for release (a failed tick adds at most
/// the batches it had in hand).
pub(super) const MAX_STALE_IDS: usize = 4_096;

/// Claims a failed call of one tick may still take, with that tick's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleClaims {
    /// The tick's token: the claims' holder, if the call ran.
    pub token: LeaseToken,
    /// The ids the call claimed.
    pub ids: Vec<MessageId>,
}

/// The back-off of an [`Outage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutagePolicy {
    /// The first wait after a failure.
    pub base: Duration,
    /// The longest wait between two probes.
    pub cap: Duration,
}

impl Default for OutagePolicy {
    /// 1 s, doubling up to 30 s.
    fn default() -> Self {
        OutagePolicy { base: Duration::from_secs(1), cap: Duration::from_secs(30) }
    }
}

impl OutagePolicy {
    /// The default back-off with its longest wait at most half of `lease_ttl` (never
    /// below the first wait): once the claim store answers again the ticks resume
    /// within half a lease TTL, so a fleet moves again within one TTL of the store's
    /// recovery, as it does after a lost holder's lease lapses.
    #[must_use]
    pub fn within_lease_ttl(lease_ttl: Duration) -> Self {
        let default = OutagePolicy::default();
        OutagePolicy { cap: default.cap.min(lease_ttl / 2).max(default.base), ..default }
    }
}

/// What a caller about to run a tick must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutageVerdict {
    /// The claim store is not known to be down: run the tick.
    Run,
    /// The back-off has passed: probe the claim store (and report with
    /// [`Outage::probe_succeeded`] or [`Outage::probe_failed`]); run no tick before.
    Probe,
    /// Receive nothing before `until` (another caller may be probing).
    Wait {
        /// When to ask again.
        until: Time,
    },
}

/// One step of the back-off, for the caller's log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Failures in a row (ticks and probes), this one included.
    pub strikes: u32,
    /// How long no receive is made.
    pub wait: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Ticks run. `strikes`: failures not yet cleared by a tick whose claims were answered.
    Up {
        strikes: u32,
    },
    Down {
        strikes: u32,
        since: Time,
        until: Time,
    },
    Probing {
        strikes: u32,
        since: Time,
    },
}

/// The claim-store outage state shared by every tick of a process.
#[derive(Debug, Clone)]
pub struct Outage {
    policy: OutagePolicy,
    state: State,
    /// Claims to release before receiving again, oldest first.
    stale: VecDeque<StaleClaims>,
}

impl Outage {
    /// No outage known.
    #[must_use]
    pub fn new(policy: OutagePolicy) -> Self {
        Outage { policy, state: State::Up { strikes: 0 }, stale: VecDeque::new() }
    }

    /// Keep the claims a failed tick's call may still take (its report's
    /// `stale_claims`, with its token), for release before receiving again. Beyond
    /// 4,096 the oldest are dropped.
    pub fn keep_stale(&mut self, token: &LeaseToken, ids: Vec<MessageId>) {
        if ids.is_empty() {
            return;
        }
        self.stale.push_back(StaleClaims { token: token.clone(), ids });
        let mut total: usize = self.stale.iter().map(|s| s.ids.len()).sum();
        while total > MAX_STALE_IDS {
            let Some(oldest) = self.stale.front_mut() else { break };
            let over = total - MAX_STALE_IDS;
            if oldest.ids.len() <= over {
                total -= oldest.ids.len();
                self.stale.pop_front();
            } else {
                oldest.ids.drain(..over);
                total -= over;
            }
        }
    }

    /// The claims to release (oldest first) before [`Outage::probe_succeeded`].
    #[must_use]
    pub fn stale(&self) -> Vec<StaleClaims> {
        self.stale.iter().cloned().collect()
    }

    /// The claims of `token` were released: forget them.
    pub fn stale_released(&mut self, token: &LeaseToken) {
        self.stale.retain(|s| &s.token != token);
    }

    /// Whether the claim store is known to be down (ticks must not receive).
    #[must_use]
    pub fn is_down(&self) -> bool {
        !matches!(self.state, State::Up { .. })
    }

    /// What to do before a tick at `now`.
    pub fn verdict(&mut self, now: Time) -> OutageVerdict {
        match self.state {
            State::Up { .. } => OutageVerdict::Run,
            State::Down { strikes, since, until } if now >= until => {
                self.state = State::Probing { strikes, since };
                OutageVerdict::Probe
            }
            State::Down { until, .. } => OutageVerdict::Wait { until },
            State::Probing { .. } => OutageVerdict::Wait { until: now + self.policy.base },
        }
    }

    /// A tick found the claim store failing. Returns the back-off step that starts
    /// now, or `None` when the outage was already known (ticks that ran concurrently
    /// report it too, and do not lengthen the back-off).
    pub fn tick_failed(&mut self, now: Time, rng: &mut impl Rng) -> Option<Step> {
        match self.state {
            State::Up { strikes } => Some(self.down(strikes + 1, now, now, rng)),
            State::Down { .. } | State::Probing { .. } => None,
        }
    }

    /// A tick's claims were answered: the outage, if any, is over for good.
    pub fn tick_succeeded(&mut self) {
        if let State::Up { .. } = self.state {
            self.state = State::Up { strikes: 0 };
        }
    }

    /// The probe found the claim store answering: ticks run again. Returns how long
    /// the store was down (for the caller's log line), `None` if no probe was out.
    pub fn probe_succeeded(&mut self, now: Time) -> Option<Duration> {
        match self.state {
            State::Probing { strikes, since } => {
                self.state = State::Up { strikes };
                Some(now.saturating_since(since))
            }
            _ => None,
        }
    }

    /// The probe failed: wait longer. Returns the new step (`None` if no probe was out).
    pub fn probe_failed(&mut self, now: Time, rng: &mut impl Rng) -> Option<Step> {
        match self.state {
            State::Probing { strikes, since } => Some(self.down(strikes + 1, since, now, rng)),
            _ => None,
        }
    }

    fn down(&mut self, strikes: u32, since: Time, now: Time, rng: &mut impl Rng) -> Step {
        let wait = self.wait(strikes, rng);
        self.state = State::Down { strikes, since, until: now + wait };
        Step { strikes, wait }
    }

    /// The jittered wait after `strikes` failures: the step `base * 2^(strikes-1)`,
    /// capped, drawn uniformly from its upper half ([`Backoff::delay`]).
    fn wait(&self, strikes: u32, rng: &mut impl Rng) -> Duration {
        Backoff { initial: self.policy.base, max: self.policy.cap }.delay(strikes.saturating_sub(1), rng)
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    use super::*;

    const POLICY: OutagePolicy = OutagePolicy { base: Duration::from_secs(1), cap: Duration::from_secs(30) };

    fn at(ms: u64) -> Time {
        Time::from_millis(ms)
    }

    #[test]
    fn a_failed_tick_closes_the_gate_until_a_probe_answers() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut o = Outage::new(POLICY);
        assert_eq!(o.verdict(at(0)), OutageVerdict::Run);
        let step = o.tick_failed(at(0), &mut rng).expect("a new outage");
        assert_eq!(step.strikes, 1);
        assert!(step.wait >= Duration::from_millis(500) && step.wait <= Duration::from_secs(1), "{step:?}");
        assert_eq!(o.tick_failed(at(10), &mut rng), None, "a concurrent tick's failure adds no step");
        let until = at(u64::try_from(step.wait.as_millis()).unwrap());
        assert_eq!(o.verdict(at(100)), OutageVerdict::Wait { until });
        assert_eq!(o.verdict(until), OutageVerdict::Probe);
        assert!(matches!(o.verdict(until), OutageVerdict::Wait { .. }), "one probe at a time");
        let step = o.probe_failed(until, &mut rng).expect("a probe was out");
        assert_eq!(step.strikes, 2);
        assert!(step.wait >= Duration::from_secs(1) && step.wait <= Duration::from_secs(2), "{step:?}");
        let again = until + step.wait;
        assert_eq!(o.verdict(again), OutageVerdict::Probe);
        assert_eq!(o.probe_succeeded(again), Some(again.saturating_since(at(0))));
        assert_eq!(o.verdict(again), OutageVerdict::Run);
        assert!(!o.is_down());
    }

    #[test]
    fn strikes_are_cleared_only_by_a_tick_whose_claims_were_answered() {
        let mut rng = SmallRng::seed_from_u64(2);
        let mut o = Outage::new(POLICY);
        let mut now = at(0);
        // The probe answers, but real claims keep failing: the back-off keeps growing.
        for strikes in 1..=3 {
            let step = o.tick_failed(now, &mut rng).expect("ticks ran: a new outage");
            assert_eq!(step.strikes, strikes);
            now += step.wait;
            assert_eq!(o.verdict(now), OutageVerdict::Probe);
            assert!(o.probe_succeeded(now).is_some());
        }
        o.tick_succeeded();
        assert_eq!(o.tick_failed(now, &mut rng).map(|s| s.strikes), Some(1), "reset on success");
    }

    #[test]
    fn answers_out_of_turn_change_nothing() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut o = Outage::new(POLICY);
        assert_eq!(o.probe_succeeded(at(0)), None);
        assert_eq!(o.probe_failed(at(0), &mut rng), None);
        o.tick_succeeded();
        assert_eq!(o.verdict(at(0)), OutageVerdict::Run);
    }

    #[test]
    fn stale_claims_are_kept_by_token_bounded_and_forgotten_once_released() {
        let (t1, t2) = (LeaseToken::from_random("a", [1; 16]), LeaseToken::from_random("b", [2; 16]));
        let ids = |prefix: &str, n: usize| (0..n).map(|i| MessageId::from(format!("{prefix}{i}"))).collect::<Vec<_>>();
        let mut o = Outage::new(POLICY);
        o.keep_stale(&t1, Vec::new());
        assert!(o.stale().is_empty(), "nothing to keep");
        o.keep_stale(&t1, ids("x", 3));
        o.keep_stale(&t2, ids("y", MAX_STALE_IDS));
        let stale = o.stale();
        assert_eq!(stale.len(), 1, "the oldest go first");
        assert_eq!(stale[0], StaleClaims { token: t2.clone(), ids: ids("y", MAX_STALE_IDS) });
        o.keep_stale(&t1, ids("z", 2));
        let stale = o.stale();
        assert_eq!(stale.iter().map(|s| s.ids.len()).sum::<usize>(), MAX_STALE_IDS);
        assert_eq!(stale[0].ids.first(), Some(&MessageId::from("y2")), "cut from the front");
        o.stale_released(&t2);
        assert_eq!(o.stale(), [StaleClaims { token: t1, ids: ids("z", 2) }]);
    }

    #[test]
    fn the_longest_wait_is_at_most_half_the_lease_ttl() {
        let cap = |secs| OutagePolicy::within_lease_ttl(Duration::from_secs(secs)).cap;
        assert_eq!(cap(120), Duration::from_secs(30), "the default lease TTL keeps the default cap");
        assert_eq!(cap(10), Duration::from_secs(5));
        assert_eq!(cap(1), Duration::from_secs(1), "never below the first wait");
        let mut rng = SmallRng::seed_from_u64(7);
        let o = Outage::new(OutagePolicy::within_lease_ttl(Duration::from_secs(10)));
        let longest = (1..=40).map(|strikes| o.wait(strikes, &mut rng)).max().unwrap();
        assert!(longest <= Duration::from_secs(5) && longest >= Duration::from_millis(2_500), "{longest:?}");
    }

    #[test]
    fn waits_double_up_to_the_cap_and_stay_in_the_upper_half() {
        let mut rng = SmallRng::seed_from_u64(4);
        let o = Outage::new(POLICY);
        for strikes in 1..=40 {
            let step = Duration::from_secs(1u64 << (strikes - 1).min(20)).min(POLICY.cap);
            for _ in 0..200 {
                let w = o.wait(strikes, &mut rng);
                assert!(w >= step / 2 && w <= step, "{strikes} strikes: {w:?} outside [{:?}, {step:?}]", step / 2);
            }
        }
        let zero = Outage::new(OutagePolicy { base: Duration::ZERO, cap: Duration::ZERO });
        assert!(zero.wait(1, &mut rng) <= Duration::from_millis(1), "a zero policy still waits a moment");
    }
}
