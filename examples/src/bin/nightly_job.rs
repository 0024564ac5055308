//! A nightly job that must never run twice at once, however many processes start it:
//! it takes the job's lease on Redis (`drain_runtime::take`), checks the lease before
//! each side effect, and writes each step's result with the lease's fence, so that a
//! holder that lost the lease without noticing cannot overwrite a newer holder's work.
//!
//! `nightly-job REDIS_URL INSTANCE_ID TTL_MS STEPS STEP_MS`: the lease lives TTL_MS
//! unless renewed (every TTL_MS/3 while the job runs); the job runs STEPS steps of
//! STEP_MS of work each, writing `nightly-report:step:<n>`. Exit 0 when it ran or another
//! process runs it, 1 when it stopped or could not tell who runs it, 2 on bad arguments.

use std::{process::ExitCode, sync::Arc, time::Duration};

use adapter_redis::{FencedWrite, RedisConfig, RedisStore};
use drain_core::{LeaseToken, ports::FenceVerdict, ports::LeaseName};
use drain_runtime::{Taken, take};

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: Vec<u64> = args.iter().skip(2).map_while(|a| a.parse().ok()).collect();
    let ([url, me, _, _, _], &[ttl, steps, step_ms]) = (&args[..], &n[..]) else {
        eprintln!("usage: nightly-job REDIS_URL INSTANCE_ID TTL_MS STEPS STEP_MS");
        return ExitCode::from(2);
    };
    let result = job(url, me, Duration::from_millis(ttl), steps, Duration::from_millis(step_ms)).await;
    result.as_ref().map_or_else(|why| eprintln!("nightly-report: {why}"), |said| println!("{said}"));
    ExitCode::from(u8::from(result.is_err()))
}

async fn job(url: &str, me: &str, ttl: Duration, steps: u64, step_time: Duration) -> Result<String, String> {
    let store = RedisStore::connect(RedisConfig::new(url)).await.map_err(|e| format!("no Redis: {e}"))?;
    let token = LeaseToken::generate(me, &mut rand::rng());
    // Fail-closed: when the store cannot say who holds the lease, the job does not run.
    let lease = match take(Arc::new(store.clone()), LeaseName::job("nightly-report"), ttl, token, None).await {
        Taken::Held(lease) => lease,
        Taken::Skipped { holder, remaining } => return Ok(format!("skipped: {holder} runs it ({remaining:?} left)")),
        Taken::Refused(e) => return Err(format!("not run: cannot tell who runs it ({e})")),
    };
    for step in 1..=steps {
        // The step's own work (a sleep here), cut short when the lease is lost: a
        // renewal found it gone, or none was confirmed by its deadline (a frozen store).
        tokio::select! {
            loss = lease.lost() => return Err(format!("stopped in step {step}: lease lost ({loss})")),
            () = tokio::time::sleep(step_time) => {}
        }
        lease.check().map_err(|loss| format!("stopped before writing step {step}: lease lost ({loss})"))?;
        let (key, value) = (format!("nightly-report:step:{step}"), format!("step {step} by {me}"));
        match store.fenced_write(&key, lease.fence(), FencedWrite::Set { value: value.as_bytes(), ttl: None }).await {
            Ok(FenceVerdict::Accepted) => println!("step {step} done under fence {}", lease.fence().number()),
            Ok(FenceVerdict::Stale { mark }) => return Err(format!("step {step} refused: fence {mark} wrote since")),
            Err(e) => return Err(format!("step {step} not written: {e}")),
        }
    }
    lease.release().await;
    Ok("nightly-report done".to_owned())
}
