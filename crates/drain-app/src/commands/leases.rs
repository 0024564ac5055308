//! `drain leases`: leases, fences and claims with holder and TTL (on Redis by SCAN,
//! never KEYS; on PostgreSQL by two calls of drain's listing functions).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use adapter_postgres::PostgresConfig;
use adapter_redis::keys::KeyKind;
use adapter_redis::{KeySpace, Scanned};
use clap::Args;
use drain_core::LeaseToken;
use serde::Serialize;

use crate::compose;
use crate::config::{Loaded, Secret};

/// `drain leases` arguments.
#[derive(Debug, Args)]
pub(crate) struct LeasesArgs {
    /// One JSON object instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Default, Serialize)]
struct Listing {
    leases: Vec<LeaseRow>,
    /// Jobs' leases (`LeaseName::job`), shown only when there are any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    jobs: Vec<JobRow>,
    owner_claims: Vec<ClaimRow>,
    message_claims: BTreeMap<String, MessageClaims>,
}

#[derive(Debug, Serialize)]
struct LeaseRow {
    queue: String,
    holder: Option<String>,
    ttl_ms: Option<u128>,
    fence: Option<String>,
}

#[derive(Debug, Serialize)]
struct JobRow {
    job: String,
    holder: Option<String>,
    ttl_ms: Option<u128>,
    fence: Option<String>,
}

#[derive(Debug, Serialize)]
struct ClaimRow {
    owner: String,
    holder: String,
    ttl_ms: Option<u128>,
}

#[derive(Debug, Default, Serialize)]
struct MessageClaims {
    pending: Vec<PendingRow>,
    done: u64,
}

#[derive(Debug, Serialize)]
struct PendingRow {
    message_id: String,
    holder: String,
    ttl_ms: Option<u128>,
}

fn name(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Sort scanned keys into the listing.
fn classify(keys: &KeySpace, found: Vec<(String, Scanned)>) -> Listing {
    let mut out = Listing::default();
    let mut leases: BTreeMap<String, LeaseRow> = BTreeMap::new();
    let mut jobs: BTreeMap<String, JobRow> = BTreeMap::new();
    let job_row = |j: &[u8]| JobRow { job: name(j), holder: None, ttl_ms: None, fence: None };
    for (key, h) in found {
        let ttl_ms = h.remaining.map(|d| d.as_millis());
        match keys.parse(&key) {
            Some(KeyKind::Lease { queue }) => {
                let row = leases.entry(name(&queue)).or_insert_with(|| LeaseRow {
                    queue: name(&queue),
                    holder: None,
                    ttl_ms: None,
                    fence: None,
                });
                row.holder = Some(LeaseToken::holder_of(&h.value).to_owned());
                row.ttl_ms = ttl_ms;
            }
            Some(KeyKind::Fence { queue }) => {
                leases
                    .entry(name(&queue))
                    .or_insert_with(|| LeaseRow { queue: name(&queue), holder: None, ttl_ms: None, fence: None })
                    .fence = Some(h.value);
            }
            Some(KeyKind::OwnerClaim { owner }) => {
                out.owner_claims.push(ClaimRow {
                    owner: name(&owner),
                    holder: LeaseToken::holder_of(&h.value).to_owned(),
                    ttl_ms,
                });
            }
            Some(KeyKind::MessageClaim { queue, message_id }) => {
                let entry = out.message_claims.entry(name(&queue)).or_default();
                match h.value.strip_prefix("pending:") {
                    Some(token) => entry.pending.push(PendingRow {
                        message_id: message_id.to_string(),
                        holder: LeaseToken::holder_of(token).to_owned(),
                        ttl_ms,
                    }),
                    None => entry.done += 1,
                }
            }
            Some(KeyKind::Job { job }) => {
                let row = jobs.entry(name(&job)).or_insert_with(|| job_row(&job));
                (row.holder, row.ttl_ms) = (Some(LeaseToken::holder_of(&h.value).to_owned()), ttl_ms);
            }
            Some(KeyKind::JobFence { job }) => {
                jobs.entry(name(&job)).or_insert_with(|| job_row(&job)).fence = Some(h.value);
            }
            Some(KeyKind::OwnerFence { .. } | KeyKind::OwnerWaiters { .. }) | None => {}
        }
    }
    out.leases = leases.into_values().collect();
    out.jobs = jobs.into_values().collect();
    out
}

/// `text` as one table cell of at most `width` characters: control characters
/// (NUL, escape sequences, newlines: a foreign writer's token may hold anything) are
/// shown escaped, so nothing reaches the terminal raw, and a longer value is cut with
/// `…` so the columns stay aligned (`--json` has every value in full).
fn cell(text: &str, width: usize) -> String {
    let escaped: String =
        text.chars().flat_map(|c| if c.is_control() { c.escape_default().collect() } else { vec![c] }).collect();
    if escaped.chars().count() <= width {
        escaped
    } else {
        let mut cut: String = escaped.chars().take(width.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

fn ttl(ms: Option<u128>) -> String {
    ms.map_or_else(|| "-".to_owned(), |ms| format!("{:.1}s", ms as f64 / 1000.0))
}

/// The FENCE column fits a u64 (20 digits): a fence is never cut.
fn table(l: &Listing) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<10} {:<32} {:<28} {:>9} {:>20}", "KIND", "NAME", "HOLDER", "TTL", "FENCE");
    for r in &l.leases {
        let _ = writeln!(
            out,
            "{:<10} {:<32} {:<28} {:>9} {:>20}",
            "lease",
            cell(&r.queue, 32),
            cell(r.holder.as_deref().unwrap_or("(free)"), 28),
            ttl(r.ttl_ms),
            cell(r.fence.as_deref().unwrap_or("-"), 20)
        );
    }
    for r in &l.jobs {
        let _ = writeln!(
            out,
            "{:<10} {:<32} {:<28} {:>9} {:>20}",
            "job",
            cell(&r.job, 32),
            cell(r.holder.as_deref().unwrap_or("(free)"), 28),
            ttl(r.ttl_ms),
            cell(r.fence.as_deref().unwrap_or("-"), 20)
        );
    }
    for r in &l.owner_claims {
        let _ = writeln!(
            out,
            "{:<10} {:<32} {:<28} {:>9} {:>20}",
            "owner",
            cell(&r.owner, 32),
            cell(&r.holder, 28),
            ttl(r.ttl_ms),
            "-"
        );
    }
    for (queue, m) in &l.message_claims {
        for p in &m.pending {
            let n = cell(&format!("{queue}/{}", p.message_id), 32);
            let _ = writeln!(
                out,
                "{:<10} {:<32} {:<28} {:>9} {:>20}",
                "pending",
                n,
                cell(&p.holder, 28),
                ttl(p.ttl_ms),
                "-"
            );
        }
        let _ = writeln!(
            out,
            "{:<10} {:<32} {} message(s) submitted within the dedup window",
            "done",
            cell(queue, 32),
            m.done
        );
    }
    if l.leases.is_empty() && l.owner_claims.is_empty() && l.message_claims.is_empty() {
        out.push_str("(nothing held)\n");
    }
    out
}

/// The exit code of a listing that failed: 1 when the store is down or not
/// answering (retrying may help), 2 when a setting or a right is wrong (as for every
/// fatal setting).
fn failed(temporary: bool) -> ExitCode {
    ExitCode::from(if temporary { 1 } else { 2 })
}

/// `drain leases`.
pub(crate) async fn main(args: &LeasesArgs, loaded: Loaded) -> ExitCode {
    if let Some(url) = &loaded.config.postgres_url {
        return postgres(args, &compose::postgres_config(&loaded.config, url), url).await;
    }
    if loaded.config.redis_url.is_none() {
        eprintln!(
            "drain leases: no DRAIN_STORE_URL: the embedded store lives inside each running `drain run` process \
             and cannot be listed from outside"
        );
        return ExitCode::from(2);
    }
    let store = match compose::connect_redis(&loaded.config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("drain leases: {e}");
            return failed(e.is_temporary());
        }
    };
    let found = match store.scan().await {
        Ok(f) => f,
        Err(e) => {
            eprintln!("drain leases: scanning {}: {e}", store.endpoint());
            return failed(e.is_temporary());
        }
    };
    let listing = classify(store.keys(), found);
    if args.json {
        crate::out::outln!("{}", serde_json::to_string(&listing).unwrap_or_default());
    } else {
        crate::out::out!("{}", table(&listing));
    }
    ExitCode::SUCCESS
}

/// `drain leases` on PostgreSQL: the same listing, from the adapter's `list`
/// (which never creates the schema).
async fn postgres(args: &LeasesArgs, config: &PostgresConfig, url: &Secret) -> ExitCode {
    let found = match adapter_postgres::list(config).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("drain leases: listing PostgreSQL at {url}: {e}");
            return failed(e.is_temporary());
        }
    };
    let listing = from_postgres(found);
    if args.json {
        crate::out::outln!("{}", serde_json::to_string(&listing).unwrap_or_default());
    } else {
        crate::out::out!("{}", table(&listing));
    }
    ExitCode::SUCCESS
}

/// The PostgreSQL listing in the shape of the Redis one (a free lease keeps its fence).
fn from_postgres(found: adapter_postgres::Listing) -> Listing {
    let mut out = Listing::default();
    for l in found.leases {
        let ttl_ms = l.remaining.map(|d| d.as_millis());
        if l.kind == "owner" {
            if let Some(holder) = l.holder {
                out.owner_claims.push(ClaimRow { owner: l.name, holder, ttl_ms });
            }
        } else if l.kind == "job" {
            out.jobs.push(JobRow { job: l.name, holder: l.holder, ttl_ms, fence: Some(l.fence.to_string()) });
        } else {
            out.leases.push(LeaseRow { queue: l.name, holder: l.holder, ttl_ms, fence: Some(l.fence.to_string()) });
        }
    }
    for q in found.claims {
        let pending = q
            .pending
            .into_iter()
            .map(|p| PendingRow {
                message_id: p.id.to_string(),
                holder: p.holder,
                ttl_ms: Some(p.remaining.as_millis()),
            })
            .collect();
        out.message_claims.insert(q.queue, MessageClaims { pending, done: q.done });
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use drain_core::ports::{LeaseName, MessageId};

    use super::*;

    #[test]
    fn classifies_every_kind() {
        let ks = KeySpace::new("drain");
        let h = |v: &str, ttl: Option<u64>| Scanned { value: v.to_owned(), remaining: ttl.map(Duration::from_millis) };
        let q = |name: &str| ks.lease(&LeaseName::queue(name));
        let found = vec![
            (q("requests").lease, h("host-1:0123", Some(90_000))),
            (q("requests").fence, h("7", None)),
            (q("idle").fence, h("3", None)),
            (ks.owner_claim("tenant{a}"), h("w-2:ff", Some(5_000))),
            (ks.lease(&LeaseName::job("nightly")).lease, h("cron-1:ab", Some(20_000))),
            (ks.lease(&LeaseName::job("nightly")).fence, h("4", None)),
            (ks.message_claim("requests", &MessageId::Ulong(1)), h("pending:host-1:0123", Some(300_000))),
            (ks.message_claim("requests", &MessageId::from("m2")), h("done:host-1:0123", Some(86_000_000))),
            ("other:key".to_owned(), h("x", None)),
        ];
        let l = classify(&ks, found);
        assert_eq!(l.leases.len(), 2);
        let r = &l.leases[1];
        assert_eq!(
            (r.queue.as_str(), r.holder.as_deref(), r.fence.as_deref()),
            ("requests", Some("host-1"), Some("7"))
        );
        assert_eq!(l.leases[0].holder, None, "a queue with only a fence is free");
        assert_eq!(l.owner_claims[0].owner, "tenant{a}");
        let j = &l.jobs[0];
        assert_eq!((j.job.as_str(), j.holder.as_deref(), j.fence.as_deref()), ("nightly", Some("cron-1"), Some("4")));
        let m = &l.message_claims["requests"];
        assert_eq!((m.pending.len(), m.done), (1, 1));
        assert_eq!(m.pending[0].message_id, "ulong:1", "an id of another type says so");
        let t = table(&l);
        assert!(t.contains("lease") && t.contains("host-1") && t.contains("90.0s") && t.contains("(free)"), "{t}");
        assert!(t.lines().any(|l| l.starts_with("job") && l.contains("nightly") && l.contains("cron-1")), "{t}");
    }

    #[test]
    fn cells_escape_control_characters_and_keep_the_columns() {
        for (text, width, shown) in [
            ("host-1", 28, "host-1"),
            ("evil\u{0}\u{1b}[31mred", 28, "evil\\u{0}\\u{1b}[31mred"),
            ("line\nbreak", 28, "line\\nbreak"),
            ("abcdefghij", 5, "abcd…"),
            ("", 5, ""),
        ] {
            assert_eq!(cell(text, width), shown, "{text:?}");
        }
        let ks = KeySpace::new("drain");
        let h = |v: &str| Scanned { value: v.to_owned(), remaining: Some(Duration::from_secs(5)) };
        let long = "x".repeat(200);
        let found = vec![
            (ks.lease(&LeaseName::queue("q")).lease, h("evil\u{0}\u{1b}[2Jhost:00")),
            (ks.owner_claim(&long), h(&format!("{long}:ff"))),
        ];
        let t = table(&classify(&ks, found));
        assert!(!t.chars().any(|c| c.is_control() && c != '\n'), "{t:?}");
        let widths: Vec<usize> = t.lines().take(3).map(|l| l.chars().count()).collect();
        assert!(widths.iter().all(|w| *w == widths[0]), "aligned: {widths:?}\n{t}");
    }
}
