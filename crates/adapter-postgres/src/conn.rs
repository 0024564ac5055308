//! Connections: a few tokio-postgres clients, each with drain's statements prepared,
//! replaced when they break or time out.

use std::sync::{Arc, Mutex, PoisonError};

use drain_core::PortError;
use tokio_postgres::{Client, NoTls, Statement};

use crate::config::PostgresConfig;
use crate::error::{map_error, timeout};
use crate::orphans::{Backend, END_BACKENDS, STILL_RUNNING, THIS_BACKEND};
use crate::schema;

/// drain's statements, prepared once per connection: each call is then one
/// Bind/Execute round trip.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) acquire: Statement,
    pub(crate) release: Statement,
    pub(crate) renew: Statement,
    pub(crate) peek: Statement,
    pub(crate) peek_owners: Statement,
    pub(crate) claim_batch: Statement,
    pub(crate) settle_batch: Statement,
    pub(crate) peek_and_wait: Statement,
    pub(crate) acquire_or_wait: Statement,
    pub(crate) release_and_wake: Statement,
    pub(crate) wake_channel: Statement,
    pub(crate) purge_expired: Statement,
    pub(crate) admit_fence: Statement,
    pub(crate) push_backlog: Statement,
    pub(crate) take_batch: Statement,
    pub(crate) record_batch: Statement,
    pub(crate) backlog_pending: Statement,
    pub(crate) acquire_marked: Statement,
    pub(crate) release_drained: Statement,
    pub(crate) peek_marked: Statement,
    pub(crate) end_backends: Statement,
    pub(crate) still_running: Statement,
}

/// One connected client, its statements, and the server backend it talks to (`None`
/// when the server does not show it).
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) client: Client,
    pub(crate) stmts: Statements,
    pub(crate) backend: Option<Backend>,
}

/// A connection that is made on first use and made again after it broke.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    current: Mutex<Option<Arc<Conn>>>,
    connecting: tokio::sync::Mutex<()>,
}

impl Slot {
    /// The live connection, connecting when there is none (bounded by the connect
    /// timeout).
    pub(crate) async fn get(&self, config: &PostgresConfig, check_schema: bool) -> Result<Arc<Conn>, PortError> {
        if let Some(conn) = self.live() {
            return Ok(conn);
        }
        let _one = self.connecting.lock().await;
        if let Some(conn) = self.live() {
            return Ok(conn);
        }
        let endpoint = config.endpoint();
        let conn = tokio::time::timeout(config.connect_timeout, connect(config, check_schema))
            .await
            .map_err(|_| timeout("connect", &endpoint, config.connect_timeout))??;
        let conn = Arc::new(conn);
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(conn.clone());
        Ok(conn)
    }

    /// Forget `conn` (it broke or timed out): the next call connects anew.
    pub(crate) fn discard(&self, conn: &Arc<Conn>) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *current = None;
        }
    }

    fn live(&self) -> Option<Arc<Conn>> {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        current.as_ref().filter(|c| !c.client.is_closed()).cloned()
    }
}

/// A bare client: its connection driven by a task of its own, which ends when the
/// client is dropped or the server goes away.
pub(crate) async fn connect_client(
    config: &PostgresConfig,
) -> Result<(Client, tokio::task::JoinHandle<()>), PortError> {
    let endpoint = config.endpoint();
    let mut pg: tokio_postgres::Config = config.url.parse().map_err(|e: tokio_postgres::Error| {
        PortError::new(
            drain_core::ErrorKind::Config,
            format!("the PostgreSQL URL {} does not parse: {e}", drain_runtime::redact::redact(&config.url)),
        )
    })?;
    pg.connect_timeout(config.connect_timeout);
    if pg.get_application_name().is_none() {
        pg.application_name("drain");
    }
    let (client, connection) = pg.connect(NoTls).await.map_err(|e| map_error(&e, "connect", &endpoint))?;
    let task = tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok((client, task))
}

async fn connect(config: &PostgresConfig, check_schema: bool) -> Result<Conn, PortError> {
    let endpoint = config.endpoint();
    let (client, _task) = connect_client(config).await?;
    if check_schema {
        schema::ensure(&client, config).await?;
    }
    let s = &config.schema;
    let sql = [
        format!("SELECT acquired, fence, holder, remaining_us FROM {s}.acquire($1, $2, $3, $4, $5, $6)"),
        format!("SELECT {s}.release($1, $2, $3, $4)"),
        format!("SELECT {s}.renew($1, $2, $3, $4, $5)"),
        format!("SELECT holder, remaining_us, fence FROM {s}.peek($1, $2, $3)"),
        format!("SELECT ord, holder, remaining_us FROM {s}.peek_owners($1, $2)"),
        format!("SELECT ord, state, holder FROM {s}.claim_batch($1, $2, $3, $4, $5, $6, $7)"),
        format!("SELECT ord, settled FROM {s}.settle_batch($1, $2, $3, $4, $5, $6, $7)"),
        format!("SELECT ord, holder, remaining_us FROM {s}.peek_and_wait($1, $2, $3, $4)"),
        format!("SELECT acquired, fence, holder, remaining_us FROM {s}.acquire_or_wait($1, $2, $3, $4, $5, $6, $7)"),
        format!("SELECT released, woke FROM {s}.release_and_wake($1, $2, $3, $4)"),
        format!("SELECT {s}.wake_channel($1, $2)"),
        format!("SELECT {s}.purge_expired($1, $2)"),
        format!("SELECT accepted, mark FROM {s}.admit_fence($1, $2, $3)"),
        format!("SELECT {s}.push_backlog($1, $2, $3)"),
        format!("SELECT recovered, items FROM {s}.take_batch($1, $2, $3)"),
        format!("SELECT {s}.record_batch($1, $2, $3)"),
        format!("SELECT ord, pending FROM {s}.backlog_pending($1, $2)"),
        format!("SELECT acquired, fence, holder, remaining_us FROM {s}.acquire_marked($1, $2, $3, $4, $5, $6, $7)"),
        format!("SELECT released, woke FROM {s}.release_drained($1, $2, $3, $4, $5)"),
        format!("SELECT ord, holder, remaining_us, drained_us FROM {s}.peek_marked($1, $2, $3, $4)"),
        END_BACKENDS.to_owned(),
        STILL_RUNNING.to_owned(),
    ];
    // Prepared at once, beside the question of which backend this is: the client
    // pipelines them.
    let (prepared, this) = futures::future::try_join(
        futures::future::try_join_all(sql.iter().map(|q| client.prepare(q))),
        client.simple_query(THIS_BACKEND),
    )
    .await
    .map_err(|e| map_error(&e, "preparing drain's statements", &endpoint))?;
    let backend = this.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(row) => {
            Some(Backend { pid: row.get(0)?.parse().ok()?, started: row.get(1)?.to_owned() })
        }
        _ => None,
    });
    let Ok(
        [
            acquire,
            release,
            renew,
            peek,
            peek_owners,
            claim_batch,
            settle_batch,
            peek_and_wait,
            acquire_or_wait,
            release_and_wake,
            wake_channel,
            purge_expired,
            admit_fence,
            push_backlog,
            take_batch,
            record_batch,
            backlog_pending,
            acquire_marked,
            release_drained,
            peek_marked,
            end_backends,
            still_running,
        ],
    ) = <[Statement; 22]>::try_from(prepared)
    else {
        return Err(crate::error::protocol(
            "preparing drain's statements",
            &endpoint,
            "a statement count drain did not ask for",
        ));
    };
    let stmts = Statements {
        acquire,
        release,
        renew,
        peek,
        peek_owners,
        claim_batch,
        settle_batch,
        peek_and_wait,
        acquire_or_wait,
        release_and_wake,
        wake_channel,
        purge_expired,
        admit_fence,
        push_backlog,
        take_batch,
        record_batch,
        backlog_pending,
        acquire_marked,
        release_drained,
        peek_marked,
        end_backends,
        still_running,
    };
    Ok(Conn { client, stmts, backend })
}
