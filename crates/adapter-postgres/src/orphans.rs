//! Backends of calls that timed out: ended before the store sends anything else.
//!
//! A client's timeout does not withdraw a statement. A backend that froze, or waited
//! on a lock, with a call in hand runs it later and commits, beside the calls the
//! store makes on a fresh connection meanwhile: a claim call that timed out would take
//! its claims after the tick gave the messages back, and after the release meant to
//! undo it. So the store notes the backend of every connection it gives up on a
//! timeout (or a break), and the next call first ends those backends
//! (`pg_terminate_backend`, waiting for each to be gone) on its own connection. A
//! backend still running its statement then rolls it back; one that committed already
//! did so before anything sent after. A backend that cannot be ended in time fails the
//! call as a timeout: nothing else is sent while an earlier call may still run (the
//! calls beside the one ending it wait for it, then try again themselves).
//! Backends are told apart by pid and start time, so a reused pid is never ended.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use drain_core::PortError;

use crate::conn::Conn;
use crate::error::{breaks_connection, map_error, timeout};

/// One server backend: its pid and start time (as the server prints it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Backend {
    pub(crate) pid: i32,
    pub(crate) started: String,
}

/// The backends to end before the next call.
#[derive(Debug, Default)]
pub(crate) struct Orphans {
    backends: Mutex<Vec<Backend>>,
    /// One caller ends them at a time; the others wait for it, then see what is left
    /// (as `Slot` makes one connection at a time).
    ending: tokio::sync::Mutex<()>,
}

impl Orphans {
    /// `conn` was given up while a call may still run on its backend.
    pub(crate) fn add(&self, conn: &Conn) {
        if let Some(backend) = &conn.backend {
            let mut backends = self.lock();
            if !backends.contains(backend) {
                backends.push(backend.clone());
            }
        }
    }

    /// End every noted backend, on `conn`, within `budget` (the server waits up to
    /// half of it for them all to go, the rest is the round trip's slack): `Ok`
    /// once none runs (most calls: there is none, and nothing is sent). A backend not
    /// gone in time stays noted and fails the call as a timeout, as a connection that
    /// breaks or answers nothing on the way does (then the error says `true`: give
    /// `conn` up too); any other refusal (the server may not signal it) is given up
    /// on, as before the store ended backends.
    pub(crate) async fn end(
        &self,
        conn: &Conn,
        op: &str,
        endpoint: &str,
        budget: Duration,
    ) -> Result<(), (PortError, bool)> {
        if self.lock().is_empty() {
            return Ok(());
        }
        let waited = std::time::Instant::now();
        let Ok(_one) = tokio::time::timeout(budget, self.ending.lock()).await else {
            return Err((timeout(op, endpoint, budget), false));
        };
        let budget = budget.saturating_sub(waited.elapsed());
        // Noted until ended: a call beside this one waits above, then ends what is left.
        let noted = self.lock().clone();
        if noted.is_empty() {
            return Ok(());
        }
        let pids: Vec<i32> = noted.iter().map(|b| b.pid).collect();
        let started: Vec<&str> = noted.iter().map(|b| b.started.as_str()).collect();
        // pg_terminate_backend does not wait at all when told 0 ms.
        let wait = (budget / 2).max(Duration::from_millis(1));
        let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&pids, &started, &wait_ms];
        // Which are still there is asked in a statement of its own, pipelined after
        // the one that ends them: `pg_terminate_backend` answers false alike for a
        // backend that outlived the wait and for one already gone when its row came
        // (the statement's view of the backends is taken when it begins).
        let ending = conn.client.query(&conn.stmts.end_backends, &params);
        let looking = conn.client.query(&conn.stmts.still_running, &params[..2]);
        let bound = budget.max(wait.saturating_mul(2));
        let rows = match tokio::time::timeout(bound, futures::future::join(ending, looking)).await {
            Ok((Ok(_), Ok(rows))) => rows,
            Ok((Err(e), _) | (_, Err(e))) if breaks_connection(&e) => return Err((map_error(&e, op, endpoint), true)),
            Ok(_) => {
                self.lock().retain(|b| !noted.contains(b));
                return Ok(());
            }
            Err(_) => return Err((timeout(op, endpoint, bound), true)),
        };
        // An answer that cannot be read counts as every noted backend still there.
        let alive: Vec<i32> = rows.iter().map(|r| r.try_get::<_, i32>(0)).collect::<Result<_, _>>().unwrap_or(pids);
        self.lock().retain(|b| !noted.contains(b) || alive.contains(&b.pid));
        if alive.is_empty() {
            return Ok(());
        }
        let e = PortError::new(
            drain_core::ErrorKind::Timeout,
            format!(
                "{op}: PostgreSQL at {endpoint} still runs a call that timed out earlier (backend {alive:?}, not \
                 ended within {wait:?}); nothing is sent until it ends"
            ),
        );
        Err((e, false))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Backend>> {
        self.backends.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The SQL that ends the noted backends still there (`$1` pids, `$2` start times,
/// `$3` the wait in ms): all are signalled first (in the select list, so only a
/// backend the join matched, never a reused pid), then each is waited for until the
/// one deadline, so the whole takes the wait at most, however many there are.
pub(crate) const END_BACKENDS: &str = "WITH signalled AS MATERIALIZED ( \
       SELECT o.pid, pg_terminate_backend(o.pid) AS sent FROM unnest($1::int4[], $2::text[]) AS o(pid, started) \
       JOIN pg_stat_activity a ON a.pid = o.pid AND a.backend_start::text = o.started) \
     SELECT pg_terminate_backend(pid, greatest(1, $3::int8 \
       - (extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000)::int8)) FROM signalled WHERE sent";

/// The SQL that lists the noted backends still there (`$1` pids, `$2` start times):
/// one row each. A backend leaves `pg_stat_activity` after it rolled back what it
/// ran, on its way out.
pub(crate) const STILL_RUNNING: &str = "SELECT a.pid \
     FROM unnest($1::int4[], $2::text[]) AS o(pid, started) \
     JOIN pg_stat_activity a ON a.pid = o.pid AND a.backend_start::text = o.started";

/// The SQL that names this connection's backend.
pub(crate) const THIS_BACKEND: &str =
    "SELECT pid, backend_start::text FROM pg_stat_activity WHERE pid = pg_backend_pid()";
