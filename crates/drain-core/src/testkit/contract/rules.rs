//! The named rules of the ports: one per MUST sentence of their docs.

/// The port a rule belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Port {
    /// Every store port.
    Store,
    /// [`LeaseStore`](crate::ports::LeaseStore).
    Lease,
    /// [`ClaimStore`](crate::ports::ClaimStore).
    Claim,
    /// [`OwnerClaims`](crate::ports::OwnerClaims).
    Owners,
    /// [`ReleaseWake`](crate::ports::ReleaseWake).
    Wake,
    /// [`MessageSource`](crate::ports::MessageSource).
    Source,
    /// [`FenceMarks`](crate::ports::FenceMarks).
    Fence,
    /// [`DrainStamps`](crate::ports::DrainStamps).
    Stamps,
    /// [`FencedWrites`](crate::ports::FencedWrites).
    Write,
}

impl Port {
    /// Where the rule's sentence is, for a reader of a violation.
    #[must_use]
    pub fn doc(self) -> &'static str {
        match self {
            Port::Store => "drain_core::ports",
            Port::Lease => "drain_core::ports::LeaseStore",
            Port::Claim => "drain_core::ports::ClaimStore",
            Port::Owners => "drain_core::ports::OwnerClaims",
            Port::Wake => "drain_core::ports::ReleaseWake",
            Port::Source => "drain_core::ports::MessageSource",
            Port::Fence => "drain_core::ports::FenceMarks",
            Port::Stamps => "drain_core::ports::DrainStamps",
            Port::Write => "drain_core::ports::FencedWrites",
        }
    }
}

macro_rules! rules {
    ($($variant:ident => $port:ident, $id:literal;)*) => {
        /// One rule of a port's contract: a MUST sentence of its docs, named by
        /// [`Rule::id`] (the name follows the sentence in the docs).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Rule {
            $(
                #[doc = concat!("`", $id, "`")]
                $variant,
            )*
        }

        impl Rule {
            /// Every rule.
            pub const ALL: &'static [Rule] = &[$(Rule::$variant),*];

            /// The rule's name, as the port's docs give it.
            #[must_use]
            pub fn id(self) -> &'static str {
                match self {
                    $(Rule::$variant => $id,)*
                }
            }

            /// The port it belongs to.
            #[must_use]
            pub fn port(self) -> Port {
                match self {
                    $(Rule::$variant => Port::$port,)*
                }
            }
        }
    };
}

rules! {
    StoreAnswers => Store, "store.answers";
    StoreTimeout => Store, "store.timeout";
    StoreOneClock => Store, "store.one_clock";
    StoreNeverSent => Store, "store.never_sent";

    LeaseAcquireExclusive => Lease, "lease.acquire.exclusive";
    LeaseFenceIncreases => Lease, "lease.fence.increases";
    LeaseHeldUnchanged => Lease, "lease.held.unchanged";
    LeaseHeldRemaining => Lease, "lease.held.remaining";
    LeaseExpires => Lease, "lease.expires";
    LeaseNamesDistinct => Lease, "lease.names.distinct";
    LeaseAcquireError => Lease, "lease.acquire.error";
    LeaseReleaseForeign => Lease, "lease.release.foreign";
    LeaseReleaseExpired => Lease, "lease.release.expired";
    LeaseReleaseFrees => Lease, "lease.release.frees";
    LeaseReleaseError => Lease, "lease.release.error";
    LeaseRenewExtends => Lease, "lease.renew.extends";
    LeaseRenewFromNow => Lease, "lease.renew.from_now";
    LeaseRenewForeign => Lease, "lease.renew.foreign";
    LeaseRenewExpired => Lease, "lease.renew.expired";
    LeaseRenewError => Lease, "lease.renew.error";
    LeasePeekAgrees => Lease, "lease.peek.agrees";
    LeasePeekFree => Lease, "lease.peek.free";
    LeasePeekError => Lease, "lease.peek.error";

    ClaimExclusive => Claim, "claim.exclusive";
    ClaimOrder => Claim, "claim.order";
    ClaimRepeat => Claim, "claim.repeat";
    ClaimPending => Claim, "claim.pending";
    ClaimDone => Claim, "claim.done";
    ClaimPendingExpires => Claim, "claim.pending.expires";
    ClaimDistinct => Claim, "claim.distinct";
    ClaimError => Claim, "claim.error";
    ClaimSettleOwner => Claim, "claim.settle.owner";
    ClaimSettleExpired => Claim, "claim.settle.expired";
    ClaimDoneExpires => Claim, "claim.done.expires";
    ClaimSettleRelease => Claim, "claim.settle.release";
    ClaimSettleOrder => Claim, "claim.settle.order";
    ClaimSettleError => Claim, "claim.settle.error";
    ClaimSettleThenClaim => Claim, "claim.settle_then_claim";

    OwnersOrder => Owners, "owners.order";
    OwnersHeld => Owners, "owners.held";
    OwnersFree => Owners, "owners.free";
    OwnersError => Owners, "owners.error";

    WakeDeliverOwn => Wake, "wake.deliver.own";
    WakePeekAnswers => Wake, "wake.peek.answers";
    WakePeekRegisters => Wake, "wake.peek.registers";
    WakeRegisterOnce => Wake, "wake.register.once";
    WakeRegisterExpires => Wake, "wake.register.expires";
    WakeAcquireExclusive => Wake, "wake.acquire.exclusive";
    WakeAcquireRegisters => Wake, "wake.acquire.registers";
    WakeAcquireUnregisters => Wake, "wake.acquire.unregisters";
    WakeReleaseFrees => Wake, "wake.release.frees";
    WakeReleaseFence => Wake, "wake.release.fence";
    WakeReleaseOne => Wake, "wake.release.one";
    WakeReleaseReports => Wake, "wake.release.reports";
    WakeReleaseCommitted => Wake, "wake.release.committed";
    WakeReleaseQuiet => Wake, "wake.release.quiet";
    WakeError => Wake, "wake.error";
    WakeOffered => Wake, "wake.offered";

    SourceReceiveMax => Source, "source.receive.max";
    SourceReceiveIntact => Source, "source.receive.intact";
    SourceCompleteRemoves => Source, "source.complete.removes";
    SourceSettleOnce => Source, "source.settle.once";
    SourceAbandonRedelivers => Source, "source.abandon.redelivers";
    SourceReleaseUncounted => Source, "source.release.uncounted";
    SourceDeadLetter => Source, "source.dead-letter";
    SourceRenewCapability => Source, "source.renew.capability";

    FenceAccepts => Fence, "fence.accepts";
    FenceStale => Fence, "fence.stale";
    FenceExclusive => Fence, "fence.exclusive";
    FenceKeeps => Fence, "fence.keeps";
    FenceUnits => Fence, "fence.units";
    FenceResources => Fence, "fence.resources";
    FenceError => Fence, "fence.error";

    StampsPeekClaims => Stamps, "stamps.peek.claims";
    StampsPeekNone => Stamps, "stamps.peek.none";
    StampsPeekAtomic => Stamps, "stamps.peek.atomic";
    StampsKeeps => Stamps, "stamps.keeps";
    StampsAcquire => Stamps, "stamps.acquire";
    StampsAcquireExclusive => Stamps, "stamps.acquire.exclusive";
    StampsAcquireUnstamped => Stamps, "stamps.acquire.unstamped";
    StampsRelease => Stamps, "stamps.release";
    StampsReleaseFence => Stamps, "stamps.release.fence";
    StampsReleaseDrained => Stamps, "stamps.release.drained";
    StampsReleaseQuiet => Stamps, "stamps.release.quiet";
    StampsReleaseNotOwner => Stamps, "stamps.release.not_owner";
    StampsReleaseUnstarted => Stamps, "stamps.release.unstarted";
    StampsError => Stamps, "stamps.error";
    StampsOffered => Stamps, "stamps.offered";

    WriteCurrent => Write, "write.current";
    WriteStale => Write, "write.stale";
    WriteAtomic => Write, "write.atomic";
    WriteRead => Write, "write.read";
    WriteError => Write, "write.error";
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The port docs, as compiled in.
    const DOCS: &[(&str, &str)] = &[
        ("ports/mod.rs", include_str!("../../ports/mod.rs")),
        ("ports/lease.rs", include_str!("../../ports/lease.rs")),
        ("ports/claim.rs", include_str!("../../ports/claim.rs")),
        ("ports/owners.rs", include_str!("../../ports/owners.rs")),
        ("ports/wake.rs", include_str!("../../ports/wake.rs")),
        ("ports/source.rs", include_str!("../../ports/source.rs")),
        ("ports/submit.rs", include_str!("../../ports/submit.rs")),
        ("ports/clock.rs", include_str!("../../ports/clock.rs")),
        ("ports/observer.rs", include_str!("../../ports/observer.rs")),
        ("ports/marks.rs", include_str!("../../ports/marks.rs")),
        ("ports/drained.rs", include_str!("../../ports/drained.rs")),
        ("ports/writes.rs", include_str!("../../ports/writes.rs")),
    ];

    /// The doc comments of a file as sentences, with the file's name.
    fn sentences() -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for (file, text) in DOCS {
            let mut doc = String::new();
            for line in text.lines() {
                let t = line.trim_start();
                if let Some(rest) = t.strip_prefix("///").or_else(|| t.strip_prefix("//!")) {
                    doc.push(' ');
                    doc.push_str(rest.trim());
                } else {
                    doc.push_str(" \n");
                }
            }
            for paragraph in doc.split(" \n") {
                // A sentence ends at a full stop followed by a space, outside backticks.
                let mut current = String::new();
                let mut ticks = 0;
                let chars: Vec<char> = paragraph.chars().collect();
                for (i, &c) in chars.iter().enumerate() {
                    current.push(c);
                    if c == '`' {
                        ticks += 1;
                    }
                    let next = chars.get(i + 1).copied();
                    if ticks % 2 == 0 && c == '.' && next.is_none_or(char::is_whitespace) {
                        out.push((*file, std::mem::take(&mut current)));
                    }
                }
                if !current.trim().is_empty() {
                    out.push((*file, current));
                }
            }
        }
        out
    }

    fn ids_in(sentence: &str) -> Vec<&str> {
        sentence.split("(rule `").skip(1).filter_map(|rest| rest.split_once('`').map(|(id, _)| id)).collect()
    }

    #[test]
    fn every_must_sentence_of_the_port_docs_names_a_known_rule() {
        let known: BTreeSet<&str> = Rule::ALL.iter().map(|r| r.id()).collect();
        let mut named: BTreeSet<String> = BTreeSet::new();
        for (file, sentence) in sentences() {
            let ids = ids_in(&sentence);
            if sentence.contains("MUST") {
                assert!(!ids.is_empty(), "{file}: a MUST sentence without a rule name: {sentence}");
            }
            for id in ids {
                assert!(known.contains(id), "{file}: rule `{id}` is not a contract::Rule: {sentence}");
                named.insert(id.to_owned());
            }
        }
        let unnamed: Vec<&str> = known.iter().copied().filter(|id| !named.contains(*id)).collect();
        assert!(unnamed.is_empty(), "rules no port doc states: {unnamed:?}");
    }

    /// Port by port, each rule with the one MUST sentence that states it and the
    /// broken stores that break it (printed with `--nocapture`): every rule is
    /// stated once, and every store rule is broken by a store of its own. The
    /// message source's rules have no broken store: its suite is checked against
    /// doubles in drain-core's `tests/contract.rs`.
    #[test]
    // The table is the test's answer to a reader: printed, not only on failure.
    #[allow(clippy::print_stdout)]
    fn every_port_s_musts_rules_and_broken_stores_map_one_to_one() {
        use std::collections::BTreeMap;
        use std::fmt::Write as _;

        use crate::testkit::broken::Defect;

        let mut stated: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (file, sentence) in sentences() {
            for id in ids_in(&sentence) {
                stated.entry(id.to_owned()).or_default().push(format!("{file}: {}", sentence.trim()));
            }
        }
        let mut ports: Vec<Port> = Rule::ALL.iter().map(|r| r.port()).collect();
        ports.dedup();
        let (mut table, mut wrong) = (String::new(), Vec::new());
        for port in ports {
            let rules: Vec<Rule> = Rule::ALL.iter().copied().filter(|r| r.port() == port).collect();
            let broken = Defect::ALL.iter().filter(|d| d.rule().port() == port).count();
            let _ = writeln!(table, "{}: {} rules, {broken} broken stores", port.doc(), rules.len());
            for rule in rules {
                let sentences = stated.get(rule.id()).map_or(&[][..], Vec::as_slice);
                let stores: Vec<String> =
                    Defect::ALL.iter().filter(|d| d.rule() == rule).map(|d| format!("{d:?}")).collect();
                let _ = writeln!(table, "  {} <- {}", rule.id(), sentences.join(" | "));
                let _ = writeln!(table, "  {} -> {}", rule.id(), stores.join(", "));
                if sentences.len() != 1 {
                    wrong.push(format!("{} is stated by {} sentences", rule.id(), sentences.len()));
                }
                if stores.is_empty() && port != Port::Source {
                    wrong.push(format!("{} has no broken store", rule.id()));
                }
            }
        }
        println!("{table}");
        assert!(wrong.is_empty(), "{}\n{table}", wrong.join("\n"));
    }

    #[test]
    fn ids_are_unique_and_belong_to_their_port() {
        let ids: BTreeSet<&str> = Rule::ALL.iter().map(|r| r.id()).collect();
        assert_eq!(ids.len(), Rule::ALL.len());
        for r in Rule::ALL {
            let prefix = match r.port() {
                Port::Store => "store.",
                Port::Lease => "lease.",
                Port::Claim => "claim.",
                Port::Owners => "owners.",
                Port::Wake => "wake.",
                Port::Source => "source.",
                Port::Fence => "fence.",
                Port::Stamps => "stamps.",
                Port::Write => "write.",
            };
            assert!(r.id().starts_with(prefix), "{r:?}");
        }
    }
}
