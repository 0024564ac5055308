//! The planner, one case a line in a table: `config | script | counts`, each
//! checked by `check(config, script, counts)`. The script is what happened, in
//! order, each input followed by what the planner answered (`input -> answer`; no
//! arrow when it answered nothing); the helper replays the inputs and rebuilds the
//! line from the planner's answers, so a case fails when an answer differs (the
//! assertion shows both lines). The counts are the drain's stats (those not zero), how the
//! claim store fared, the stale claims, the error, and what Shadow counted of what
//! On would decide (`shadow …`).
//!
//! Inputs: `next` (between steps), `poll` (beside a step: may the next batch be
//! received?), `got a b _` (the batch received: message ids, `_` none; `got` alone:
//! the queue is empty; `got!`: the receive failed), `dl` / `dl!` (a dead letter
//! done / refused), `claims` (the claim call answered: every settlement `Settled`,
//! every claim `Claimed`, but for `id=done`, `id=busy` (pending elsewhere) and
//! `id=gone` (its settlement `NotOwner`); or the call failed: `claims timeout` may
//! have run, `claims refused` was never sent, `claims settle-failed` is the two-call
//! default's answer, `claims short` lacks a claim), `ok a` / `fail a` (job `a`
//! started, and its submit succeeded / failed), `start a` then `accepted a` /
//! `refused a` (job `a` started, in flight, and later its outcome), `all` (every job
//! left, submitted fine), `stop` / `lost` (a shutdown, a lost lease), `end` (the step ended),
//! `source-fails` (the source refuses settlements from then on).
//!
//! Answers: `receive`, `no`, `step <jobs>`, `finish: <call>`, a claim call
//! (`dead-letter _`, `settle a+ b-` (mark done, release), `claim a b`, or `no call`),
//! `submit` / `skip`, and the messages settled at the source, batch by batch
//! (`complete a b=dup / release c=elsewhere, abandon d=failed`).

use std::collections::HashMap;

use super::*;
use crate::ports::DeliveryHandle;
use crate::tick::InFlight;

/// What the claim answers decide for each message, and the counts.
const CLAIMS: &str = "
on | next -> receive; got a b -> claim a b; claims; next -> step a b; all -> submit a, submit b; end; next -> receive; got; next -> finish: settle a+ b+; claims -> complete a b | received 2, submitted 2, claims answered
on | next -> receive; got a b -> claim a b; claims b=done; next -> step a b; all -> submit a, skip b; end; next -> receive; got; next -> finish: settle a+; claims -> complete a b=dup | received 2, submitted 1, duplicates 1, claims answered
on | next -> receive; got a b -> claim a b; claims a=busy; next -> step a b; all -> skip a, submit b; end; next -> receive; got; next -> finish: settle b+; claims -> release a=elsewhere, complete b | received 2, submitted 1, abandoned 1, claims answered
on | next -> receive; got a b -> claim a b; claims; next -> step a b; fail a -> submit; ok b -> submit; end; next -> receive; got; next -> finish: settle a- b+; claims -> abandon a=failed, complete b | received 2, submitted 1, abandoned 1, submit_failures 1, claims answered
on | next -> receive; got a -> claim a; claims; next -> step a; ok a -> submit; end; next -> receive; got; next -> finish: settle a+; claims a=gone -> complete a | received 1, submitted 1, claims_expired 1, claims answered
on | next -> receive; got a -> claim a; claims; next -> step a; ok a -> submit; end; next -> receive; got; next -> finish: settle a+; claims settle-failed -> complete a | received 1, submitted 1, claim_settle_errors 1, claims failed
on | next -> receive; got a -> claim a; claims; next -> step a; ok a -> submit; source-fails; end; next -> receive; got; next -> finish: settle a+; claims -> complete a | received 1, submitted 1, settle_errors 1, claims answered
";

/// A batch sorted by the claim switch: On dead-letters a message without an id and
/// holds a later copy of an id back for the first; Off and Shadow submit both
/// (Shadow counts what On would decide, also when its claim call fails).
const SORTING: &str = "
on | next -> receive; got _ a -> dead-letter _, claim a; dl!; claims; next -> step a; ok a -> submit; end; next -> receive; got; next -> finish: settle a+; claims -> complete a | received 2, submitted 1, dead_lettered 1, settle_errors 1, claims answered
on | next -> receive; got a a -> claim a; claims; next -> step a; ok a -> submit; end; next -> receive; got; next -> finish: settle a+; claims -> complete a=dup a | received 2, submitted 1, duplicates 1, claims answered
# The copy of a failed message goes back uncounted; the batch, all back, ends the drain.
on | next -> receive; got a a -> claim a; claims; next -> step a; fail a -> submit; end; next -> finish: settle a-; claims -> release a=elsewhere, abandon a=failed | received 2, abandoned 2, submit_failures 1, claims answered
off | next -> receive; got _ a a -> no call; claims; next -> step _ a a; all -> submit _, submit a, submit a; end; next -> receive; got; next -> finish: no call; claims -> complete _ a a | received 3, submitted 3
shadow | next -> receive; got _ a a b -> claim a b; claims b=done; next -> step _ a a b; all -> submit _, submit a, submit a, submit b; end; next -> receive; got; next -> finish: settle a+; claims -> complete _ a a b | received 4, submitted 4, claims answered, shadow dead_lettered duplicate duplicate
shadow | next -> receive; got a b -> claim a b; claims refused; next -> step a b; all -> submit a, submit b; end; next -> receive; got; next -> finish: no call; claims -> complete a b | received 2, submitted 2, claims failed, shadow claim_error claim_error
";

/// A failed claim call fails closed (On): nothing of its batch is submitted, the
/// receiving ends, and a call that may still have run names its claims for release.
const FAILURES: &str = "
on | next -> receive; got a b -> claim a b; claims timeout; next -> step a b; all -> skip a, skip b; end; next -> finish: no call; claims -> abandon a=claim-error b=claim-error | received 2, abandoned 2, claim_errors 2, claims failed, stale a b
on | next -> receive; got a b -> claim a b; claims refused; next -> step a b; all -> skip a, skip b; end; next -> finish: no call; claims -> abandon a=claim-error b=claim-error | received 2, abandoned 2, claim_errors 2, claims failed
on | next -> receive; got a b -> claim a b; claims short; next -> step a b; all -> skip a, skip b; end; next -> finish: no call; claims -> abandon a=claim-error b=claim-error | received 2, abandoned 2, claim_errors 2, claims failed, stale a b
# Not all of the batch went back (a dead letter), yet the receiving ends.
on | next -> receive; got _ a a -> dead-letter _, claim a; dl; claims timeout; next -> step a; ok a -> skip; end; next -> finish: no call; claims -> release a=elsewhere, abandon a=claim-error | received 3, abandoned 2, dead_lettered 1, claim_errors 1, claims failed, stale a
# The call that settles batch 1 fails while claiming batch 3: batch 3 goes back (one batch per failure), batch 1 stays completed.
on | next -> receive; got a -> claim a; claims; next -> step a; ok a -> submit; poll -> receive; got b -> claim b; claims; end; next -> step b; ok b -> submit; poll -> receive; got c -> settle a+, claim c; claims timeout -> complete a; end; next -> step c; ok c -> skip; end; next -> finish: settle b+; claims -> complete b / abandon c=claim-error | received 3, submitted 2, abandoned 1, claim_errors 1, claim_settle_errors 1, claims failed, stale c
# The store timed out before the drain (as the lease store, one object serving both): On receives nothing, Shadow drains.
on down | next -> finish: no call; claims | claims failed
shadow down | next -> receive | claims failed
";

/// The order the pipeline keeps, a rule a case or two.
const ORDER: &str = "
# The next batch is received only once one message of the batch in its step has completed.
on | next -> receive; got a b -> claim a b; claims; next -> step a b; poll -> no; ok a -> submit; poll -> receive; got c -> claim c; claims; ok b -> submit; end; next -> step c; ok c -> submit; end; next -> receive; got; next -> finish: settle a+ b+ c+; claims -> complete a b / complete c | received 3, submitted 3, claims answered
# Batch 1's claims are settled in the call that takes batch 3's, and its messages go to the source only once that call is answered; batch 2, in its step, waits.
on | next -> receive; got a -> claim a; claims; next -> step a; ok a -> submit; poll -> receive; got b -> claim b; claims; end; next -> step b; ok b -> submit; poll -> receive; got c -> settle a+, claim c; claims -> complete a; end; next -> step c; ok c -> submit; end; next -> receive; got; next -> finish: settle b+ c+; claims -> complete b / complete c | received 3, submitted 3, claims answered
# A batch that all went back ends the drain.
on | next -> receive; got a b -> claim a b; claims a=busy b=busy; next -> step a b; poll -> no; all -> skip a, skip b; end; next -> finish: no call; claims -> release a=elsewhere b=elsewhere | received 2, abandoned 2, claims answered
on max=1 | next -> receive; got a -> claim a; claims; next -> step a; ok a -> submit; poll -> no; end; next -> finish: settle a+; claims -> complete a | received 1, submitted 1, claims answered
on | next -> receive; got!; next -> finish: no call; claims | error: receive failed: connection (temporary): reset
# A stop or a lost lease: nothing more is received or submitted, and what was not submitted goes back, its claim released.
on | next -> receive; got a b c -> claim a b c; claims; next -> step a b c; ok a -> submit; stop; all -> skip b, skip c; poll -> no; end; next -> finish: settle a+ b- c-; claims -> abandon b=cancelled c=cancelled, complete a | received 3, submitted 1, abandoned 2, claims answered
on | next -> receive; got a -> claim a; claims; next -> step a; ok a -> submit; poll -> receive; got b -> claim b; claims; lost; end; next -> step b; ok b -> skip; end; next -> finish: settle a+ b-; claims -> complete a / abandon b=cancelled | received 2, submitted 1, abandoned 1, claims answered
# Submits in flight when the drain stops, or the lease is lost, are waited for: each is completed or given back by its own outcome, its claim settled; what had not started goes back.
on | next -> receive; got a b c -> claim a b c; claims; next -> step a b c; start a -> submit; start b -> submit; stop; start c -> skip; accepted a; refused b; accepted c; end; next -> finish: settle a+ b- c-; claims -> abandon b=failed c=cancelled, complete a | received 3, submitted 1, abandoned 2, submit_failures 1, claims answered
on | next -> receive; got a b -> claim a b; claims; next -> step a b; start a -> submit; start b -> submit; lost; poll -> no; accepted b; accepted a; end; next -> finish: settle b+ a+; claims -> complete b a | received 2, submitted 2, claims answered
";

/// An id in two consecutive batches: the later copy meets the earlier's pending
/// claim (ours) and follows what became of it; Shadow counts what On decides.
const COPIES: &str = "
on | next -> receive; got a b -> claim a b; claims; next -> step a b; ok a -> submit; poll -> receive; got a c -> claim a c; claims a=busy; ok b -> submit; end; next -> step a c; all -> skip a, submit c; end; next -> receive; got; next -> finish: settle a+ b+ c+; claims -> complete a b / complete a=dup c | received 4, submitted 3, duplicates 1, claims answered
on | next -> receive; got a b -> claim a b; claims; next -> step a b; fail a -> submit; ok b -> submit; poll -> receive; got a c -> claim a c; claims a=busy; end; next -> step a c; all -> skip a, submit c; end; next -> receive; got; next -> finish: settle a- b+ c+; claims -> abandon a=failed, complete b / release a=elsewhere, complete c | received 4, submitted 2, abandoned 2, submit_failures 1, claims answered
shadow | next -> receive; got a b -> claim a b; claims; next -> step a b; ok a -> submit; poll -> receive; got a c -> claim a c; claims a=busy; ok b -> submit; end; next -> step a c; all -> submit a, submit c; end; next -> receive; got; next -> finish: settle a+ b+ c+; claims -> complete a b / complete a c | received 4, submitted 4, claims answered, shadow duplicate
";

#[test]
fn claims_decide_each_message() {
    check_all(CLAIMS);
}

#[test]
fn a_batch_is_sorted_by_the_claim_switch() {
    check_all(SORTING);
}

#[test]
fn a_claim_store_failure_stops_the_receiving() {
    check_all(FAILURES);
}

#[test]
fn the_pipeline_keeps_its_order() {
    check_all(ORDER);
}

#[test]
fn a_copy_in_the_next_batch_follows_the_first() {
    check_all(COPIES);
}

/// Where the source cannot give a message back uncounted, a claim-busy one is abandoned.
#[test]
fn a_claim_busy_message_is_released_only_where_the_source_can() {
    let busy = ToSource { handle: DeliveryHandle(1), fate: Fate::Abandon(MessageOutcome::ClaimedElsewhere) };
    let failed = ToSource { handle: DeliveryHandle(2), fate: Fate::Abandon(MessageOutcome::SubmitFailed) };
    let done = ToSource { handle: DeliveryHandle(3), fate: Fate::Complete(MessageOutcome::Duplicate) };
    for (m, release, op) in [
        (busy, true, SourceOp::Release),
        (busy, false, SourceOp::Abandon),
        (failed, true, SourceOp::Abandon),
        (done, false, SourceOp::Complete),
    ] {
        assert_eq!(m.op(release), op, "{m:?}, release {release}");
    }
}

/// Every case of `table`, one a line (`#` starts a comment).
fn check_all(table: &str) {
    for line in table.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let [config, script, counts] = line.split(" | ").collect::<Vec<_>>()[..] else {
            panic!("`config | script | counts`: {line}");
        };
        check(config, script, counts);
    }
}

/// Replays `script`'s inputs against a planner configured by `config` (`on`, `off`,
/// `shadow`, then `max=N`, `down`) and checks every answer, then the counts.
fn check(config: &str, script: &str, counts: &str) {
    let mut words = config.split_whitespace();
    let mode = match words.next() {
        Some("on") => Switch::On,
        Some("off") => Switch::Off,
        Some("shadow") => Switch::Shadow,
        other => panic!("config {other:?}"),
    };
    let (mut max_batches, mut down) = (None, false);
    for w in words {
        match w.split_once('=') {
            Some(("max", n)) => max_batches = Some(n.parse().expect("max=N")),
            _ if w == "down" => down = true,
            _ => panic!("config word {w:?}"),
        }
    }
    let mut run = Run::new(Planner::new(mode, max_batches, down, Window::new(InFlight::Fixed, 1, 32)));
    let mut got = Vec::new();
    for item in script.split(';') {
        let input = item.split_once("->").map_or(item, |(input, _)| input).trim();
        let answer = run.input(input);
        got.push(if answer.is_empty() { input.to_owned() } else { format!("{input} -> {answer}") });
    }
    let got = format!("{config} | {} | {}", got.join("; "), run.counts());
    assert_eq!(got, format!("{config} | {script} | {counts}"));
}

/// The planner, and what the drain loop would hold between two inputs.
struct Run {
    planner: Planner,
    permit: Option<Receive>,
    call: Option<ClaimCall>,
    jobs: Vec<Job>,
    /// Jobs started and in flight: their slot, and whether `start` said submit.
    flying: HashMap<String, (Slot, bool)>,
    names: HashMap<DeliveryHandle, String>,
    received: u64,
    source_fails: bool,
    shadow: Vec<&'static str>,
}

impl Run {
    fn new(planner: Planner) -> Self {
        Run {
            planner,
            permit: None,
            call: None,
            jobs: Vec::new(),
            flying: HashMap::new(),
            names: HashMap::new(),
            received: 0,
            source_fails: false,
            shadow: Vec::new(),
        }
    }

    fn input(&mut self, input: &str) -> String {
        let (verb, args) = input.split_once(' ').unwrap_or((input, ""));
        let args: Vec<&str> = args.split_whitespace().collect();
        let answer = match verb {
            "next" => match self.planner.next() {
                Next::Receive(permit) => {
                    self.permit = Some(permit);
                    "receive".to_owned()
                }
                Next::Submit(jobs) => {
                    let names: Vec<String> = jobs.iter().map(|j| id_name(j.message.message_id.as_ref())).collect();
                    self.jobs = jobs;
                    format!("step {}", names.join(" "))
                }
                Next::Finish(call) => format!("finish: {}", self.call_out(call)),
            },
            "poll" => match self.planner.poll_receive() {
                Some(permit) => {
                    self.permit = Some(permit);
                    "receive".to_owned()
                }
                None => "no".to_owned(),
            },
            "got" => {
                let batch: Vec<Delivery> = args.iter().map(|id| self.delivery(id)).collect();
                match self.planner.handle_received(self.permit.take().expect("a permit"), batch) {
                    Some(prepared) => {
                        let dead = prepared.dead_letters.iter().map(|h| format!("dead-letter {}, ", self.names[h]));
                        let dead: String = dead.collect();
                        format!("{dead}{}", self.call_out(prepared.call))
                    }
                    None => String::new(),
                }
            }
            "got!" => {
                let e = PortError::new(ErrorKind::Connection, "reset");
                self.planner.handle_receive_failed(self.permit.take().expect("a permit"), &e);
                String::new()
            }
            "dl" | "dl!" => {
                self.planner.handle_dead_lettered(verb == "dl");
                String::new()
            }
            "claims" => self.answer(&args),
            "ok" | "fail" => self.job(args[0], verb == "ok"),
            "start" => {
                let at = self.jobs.iter().position(|j| id_name(j.message.message_id.as_ref()) == args[0]);
                let job = self.jobs.remove(at.expect("a job"));
                let submit = self.planner.start(job.slot) == Start::Submit;
                self.flying.insert(args[0].to_owned(), (job.slot, submit));
                if submit { "submit" } else { "skip" }.to_owned()
            }
            "accepted" | "refused" => {
                let (slot, submit) = self.flying.remove(args[0]).expect("a job in flight");
                self.planner.handle_submitted(slot, submit.then_some(verb == "accepted"));
                String::new()
            }
            "all" => {
                let names: Vec<String> = self.jobs.iter().map(|j| id_name(j.message.message_id.as_ref())).collect();
                names.iter().map(|n| format!("{} {n}", self.job(n, true))).collect::<Vec<_>>().join(", ")
            }
            "stop" | "lost" => {
                self.planner.handle_stop(if verb == "stop" { Stop::Shutdown } else { Stop::LeaseLost });
                String::new()
            }
            "end" => {
                self.planner.end_submit(Duration::ZERO);
                self.planner.end_step();
                String::new()
            }
            "source-fails" => {
                self.source_fails = true;
                String::new()
            }
            other => panic!("unknown input {other:?}"),
        };
        self.drain_events();
        answer
    }

    /// Keep what Shadow counted of what On would decide.
    fn drain_events(&mut self) {
        while let Some((outcome, mode)) = self.planner.poll_event() {
            if mode == Switch::Shadow {
                self.shadow.push(outcome.as_str());
            }
        }
    }

    fn delivery(&mut self, id: &str) -> Delivery {
        self.received += 1;
        let handle = DeliveryHandle(self.received);
        self.names.insert(handle, id.to_owned());
        let mut message = Message::new(id, Vec::new());
        if id == "_" {
            message.message_id = None;
        }
        Delivery { handle, message, delivery_count: 0 }
    }

    /// The claim call, kept for the next `claims`, in words.
    fn call_out(&mut self, call: ClaimCall) -> String {
        let mut parts = Vec::new();
        if !call.settle.is_empty() {
            let each = call.settle.iter().map(|s| {
                let mark = if s.action == SettleAction::Done { "+" } else { "-" };
                format!("{}{mark}", id_name(Some(&s.id)))
            });
            parts.push(format!("settle {}", each.collect::<Vec<_>>().join(" ")));
        }
        if !call.claim.is_empty() {
            let ids: Vec<String> = call.claim.iter().map(|id| id_name(Some(id))).collect();
            parts.push(format!("claim {}", ids.join(" ")));
        }
        self.call = Some(call);
        if parts.is_empty() { "no call".to_owned() } else { parts.join(", ") }
    }

    /// Answer the claim call out as `args` say, and settle at the source what the
    /// planner hands out.
    fn answer(&mut self, args: &[&str]) -> String {
        let call = self.call.take().expect("a claim call out");
        let (n_settle, n_claim) = (call.settle.len(), call.claim.len());
        let failed = |e: PortError| SettledThenClaimed::failed(e);
        let answer = match args {
            ["timeout"] => failed(PortError::new(ErrorKind::Timeout, "no answer")),
            ["refused"] => failed(PortError::new(ErrorKind::Connection, "refused").never_sent()),
            ["settle-failed"] => SettledThenClaimed {
                settled: Err(PortError::new(ErrorKind::Connection, "reset")),
                claimed: Err(PortError::new(ErrorKind::Connection, "not asked").never_sent()),
            },
            ["short"] => SettledThenClaimed {
                settled: Ok(vec![SettleResult::Settled; n_settle]),
                claimed: Ok(vec![ClaimState::Claimed; n_claim - 1]),
            },
            states => {
                let said =
                    |id: &MessageId, what: &str| states.contains(&format!("{}={what}", id_name(Some(id))).as_str());
                let settled = call
                    .settle
                    .iter()
                    .map(|s| if said(&s.id, "gone") { SettleResult::NotOwner } else { SettleResult::Settled });
                let claimed = call.claim.iter().map(|id| match () {
                    () if said(id, "done") => ClaimState::Done,
                    () if said(id, "busy") => ClaimState::PendingElsewhere { holder: "other".to_owned() },
                    () => ClaimState::Claimed,
                });
                SettledThenClaimed { settled: Ok(settled.collect()), claimed: Ok(claimed.collect()) }
            }
        };
        let batches = self.planner.handle_claims(call, answer);
        let mut out = Vec::new();
        for batch in batches {
            let messages: Vec<ToSource> = batch.abandons.into_iter().chain(batch.completes).collect();
            let settled: Vec<(ToSource, bool)> = messages.iter().map(|m| (*m, !self.source_fails)).collect();
            self.drain_events();
            self.planner.handle_at_source(&settled);
            // Each message's outcome, under the tick's mode: the counts say it.
            while self.planner.poll_event().is_some() {}
            out.push(self.source_words(&messages));
        }
        out.join(" / ")
    }

    /// `complete a b=dup, release c=elsewhere`: each message's settlement at the
    /// source and, unless it was submitted, why.
    fn source_words(&self, messages: &[ToSource]) -> String {
        let mut words: Vec<String> = Vec::new();
        let mut last = None;
        for m in messages {
            let op = match m.op(true) {
                SourceOp::Complete => "complete",
                SourceOp::Abandon => "abandon",
                SourceOp::Release => "release",
            };
            let why = match m.fate {
                Fate::Complete(o) | Fate::Abandon(o) => match o {
                    MessageOutcome::Submitted => "",
                    MessageOutcome::Duplicate => "=dup",
                    MessageOutcome::ClaimedElsewhere => "=elsewhere",
                    MessageOutcome::ClaimError => "=claim-error",
                    MessageOutcome::SubmitFailed => "=failed",
                    MessageOutcome::Cancelled => "=cancelled",
                    other => other.as_str(),
                },
            };
            let name = format!("{}{why}", self.names[&m.handle]);
            if last == Some(op) {
                words.last_mut().expect("a word").push_str(&format!(" {name}"));
            } else {
                words.push(format!("{op} {name}"));
            }
            last = Some(op);
        }
        words.join(", ")
    }

    /// Start the first job left named `name`, and submit it if the planner says so.
    fn job(&mut self, name: &str, ok: bool) -> String {
        let at = self.jobs.iter().position(|j| id_name(j.message.message_id.as_ref()) == name).expect("a job");
        let job = self.jobs.remove(at);
        let start = self.planner.start(job.slot);
        let submitted = (start == Start::Submit).then_some(ok);
        self.planner.handle_submitted(job.slot, submitted);
        if start == Start::Submit { "submit" } else { "skip" }.to_owned()
    }

    /// The nonzero counts, then how the claim store fared, the stale claims, the
    /// error and what Shadow counted.
    fn counts(&self) -> String {
        let p = &self.planner;
        let s = &p.stats;
        let all = [
            ("received", s.received),
            ("submitted", s.submitted),
            ("duplicates", s.duplicates),
            ("abandoned", s.abandoned),
            ("dead_lettered", s.dead_lettered),
            ("claim_errors", s.claim_errors),
            ("submit_failures", s.submit_failures),
            ("claims_expired", s.claims_expired),
            ("settle_errors", s.settle_errors),
            ("claim_settle_errors", s.claim_settle_errors),
        ];
        let mut out: Vec<String> = all.iter().filter(|(_, n)| *n > 0).map(|(k, n)| format!("{k} {n}")).collect();
        match if p.claims_failed { ClaimHealth::Failed } else { p.claims } {
            ClaimHealth::NotAsked => {}
            ClaimHealth::Answered => out.push("claims answered".to_owned()),
            ClaimHealth::Failed => out.push("claims failed".to_owned()),
        }
        if !p.stale_claims.is_empty() {
            let ids: Vec<String> = p.stale_claims.iter().map(|id| id_name(Some(id))).collect();
            out.push(format!("stale {}", ids.join(" ")));
        }
        if let Some(End::Failed(e)) = &p.end {
            out.push(format!("error: {e}"));
        }
        if !self.shadow.is_empty() {
            out.push(format!("shadow {}", self.shadow.join(" ")));
        }
        out.join(", ")
    }
}

fn id_name(id: Option<&MessageId>) -> String {
    match id {
        Some(MessageId::String(s)) => s.clone(),
        Some(other) => format!("{other:?}"),
        None => "_".to_owned(),
    }
}
