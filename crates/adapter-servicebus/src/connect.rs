//! Opening a connection and a session: TCP, TLS (rustls), SASL, and for Service
//! Bus the CBS put-token of a SAS token. One function per step, each bounded by the
//! caller's timeout.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use drain_core::{ErrorKind, PortError};
use drain_runtime::redact::Secret;
use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::primitives::Timestamp;
use fe2o3_amqp::{Connection, Session};
use fe2o3_amqp_cbs::client::CbsClient;
use fe2o3_amqp_cbs::token::CbsToken;
use rand::RngExt as _;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::endpoint::{Credentials, Endpoint};
use crate::error;
use crate::sas;
use crate::token_refresh::{PutToken, TokenRefresh};

/// The CBS token type of a SAS token.
const SAS_TOKEN_TYPE: &str = "servicebus.windows.net:sastoken";

/// How long to wait for the broker's answer to our session `end`. It comes within
/// milliseconds, but RabbitMQ 3.10's AMQP 1.0 plugin sometimes never sends it (its
/// session process stops before its writer flushes the frame), and fe2o3-amqp 0.18
/// waits for it in a busy loop at 100 % CPU. Closing the connection afterwards ends
/// the session anyway, so a missing answer costs this long, not the whole timeout.
pub(crate) const SESSION_END_LIMIT: Duration = Duration::from_secs(1);

/// An open connection with one session, and for Service Bus the task that keeps its
/// CBS token fresh (see [`crate::token_refresh`]).
pub(crate) struct Conn {
    pub(crate) connection: ConnectionHandle<()>,
    pub(crate) session: SessionHandle<()>,
    refresh: Option<TokenRefresh>,
}

/// Where a connection's CBS tokens come from.
enum Signer {
    /// Signed here with the policy's key, fresh for every put.
    Key { key_name: String, key: Secret },
    /// A ready-made token, put as it is again and again until its expiry passes.
    Fixed(Secret),
}

/// The CBS client of a Service Bus connection, and what it signs tokens with.
struct Cbs {
    client: CbsClient,
    audience: String,
    signer: Signer,
    /// How long each token is valid.
    lifetime: Duration,
    what: String,
}

/// A name no other link or container of this process uses: `<prefix>-<pid>-<random>`.
pub(crate) fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{}-{:016x}", std::process::id(), rand::rng().random::<u64>())
}

fn unix_now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Open a connection and a session to `endpoint`, within `timeout`. On Service Bus
/// every SAS token it puts is valid for `token_lifetime`.
pub(crate) async fn open(
    endpoint: &Endpoint,
    idle_timeout: Duration,
    timeout: Duration,
    token_lifetime: Duration,
) -> Result<Conn, PortError> {
    let what = endpoint.to_string();
    match tokio::time::timeout(timeout, open_inner(endpoint, &what, (idle_timeout, token_lifetime), timeout)).await {
        Ok(r) => r,
        Err(_) => Err(error::timeout(&what, "connecting", timeout)),
    }
}

/// `put_limit` bounds each later CBS token refresh.
async fn open_inner(
    endpoint: &Endpoint,
    what: &str,
    (idle_timeout, token_lifetime): (Duration, Duration),
    put_limit: Duration,
) -> Result<Conn, PortError> {
    let tcp =
        TcpStream::connect((endpoint.host.as_str(), endpoint.port)).await.map_err(|e| error::io_error(what, &e))?;
    let _ = tcp.set_nodelay(true);
    let mut connection = if endpoint.tls {
        let server_name = rustls::pki_types::ServerName::try_from(endpoint.host.clone()).map_err(|_| {
            PortError::new(ErrorKind::Config, format!("{what}: {:?} is not a valid TLS server name", endpoint.host))
        })?;
        let config = tls_config().map_err(|e| PortError::new(ErrorKind::Config, format!("{what}: {e}")))?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(server_name, tcp)
            .await
            .map_err(|e| error::io_error(what, &e))?;
        handshake(endpoint, what, idle_timeout, tls).await?
    } else {
        handshake(endpoint, what, idle_timeout, tcp).await?
    };
    let mut session = match Session::begin(&mut connection).await {
        Ok(s) => s,
        Err(e) => {
            let _ = connection.close().await;
            return Err(error::begin_error(what, &e));
        }
    };
    let signer = match &endpoint.credentials {
        Credentials::SharedAccessKey { key_name, key } => {
            Some(Signer::Key { key_name: key_name.clone(), key: key.clone() })
        }
        Credentials::SharedAccessSignature { token } => Some(Signer::Fixed(token.clone())),
        Credentials::Plain { .. } | Credentials::Anonymous => None,
    };
    let refresh = match signer {
        Some(signer) => match put_first_token(endpoint, signer, token_lifetime, what, &mut session).await {
            Ok((cbs, valid_for)) => Some(TokenRefresh::start(cbs, valid_for, put_limit, what.to_owned())),
            Err(e) => {
                let _ = tokio::time::timeout(SESSION_END_LIMIT, session.end()).await;
                let _ = tokio::time::timeout(put_limit, connection.close()).await;
                return Err(e);
            }
        },
        None => None,
    };
    Ok(Conn { connection, session, refresh })
}

async fn handshake<Io>(
    endpoint: &Endpoint,
    what: &str,
    idle_timeout: Duration,
    stream: Io,
) -> Result<ConnectionHandle<()>, PortError>
where
    Io: AsyncRead + AsyncWrite + std::fmt::Debug + Send + Unpin + 'static,
{
    let hostname = endpoint.open_hostname();
    let profile = match &endpoint.credentials {
        Credentials::Plain { username, password } => {
            SaslProfile::Plain { username: username.clone(), password: password.expose().to_owned() }
        }
        // Service Bus authenticates links with CBS tokens after an anonymous SASL.
        Credentials::SharedAccessKey { .. } | Credentials::SharedAccessSignature { .. } | Credentials::Anonymous => {
            SaslProfile::Anonymous
        }
    };
    let idle_ms = u32::try_from(idle_timeout.as_millis()).unwrap_or(u32::MAX);
    Connection::builder()
        .container_id(unique_name("drain"))
        .scheme("amqp") // TLS, if any, is already established underneath.
        .hostname(hostname.as_str())
        .sasl_hostname(endpoint.host.as_str())
        .idle_time_out(idle_ms)
        .sasl_profile(profile)
        .open_with_stream(stream)
        .await
        .map_err(|e| error::open_error(what, &e))
}

/// TLS settings: the operating system's roots, rustls on ring. Built once.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err("no TLS root certificates found on this system (install ca-certificates)".to_owned());
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|b| Arc::new(b.with_root_certificates(roots).with_no_client_auth()))
                .map_err(|e| format!("TLS setup failed: {e}"))
        })
        .clone()
}

/// The CBS audience of the endpoint's entity: `amqps://<host>/<entity>`.
fn audience(endpoint: &Endpoint) -> String {
    format!("amqps://{}/{}", endpoint.host, endpoint.entity.as_deref().unwrap_or(""))
}

async fn put_first_token(
    endpoint: &Endpoint,
    signer: Signer,
    lifetime: Duration,
    what: &str,
    session: &mut SessionHandle<()>,
) -> Result<(Cbs, Duration), PortError> {
    let client = CbsClient::attach(session).await.map_err(|e| {
        PortError::new(ErrorKind::Protocol, format!("{what}: could not attach to the CBS node $cbs: {e}"))
    })?;
    let mut cbs = Cbs {
        client,
        audience: audience(endpoint),
        signer,
        lifetime: lifetime.max(Duration::from_secs(1)),
        what: what.to_owned(),
    };
    let valid_for = cbs.put_token().await?;
    Ok((cbs, valid_for))
}

#[async_trait]
impl PutToken for Cbs {
    /// Sign a fresh token (or take the ready-made one) and put it on the CBS node.
    async fn put_token(&mut self) -> Result<Duration, PortError> {
        // Expiries are whole seconds: the token is valid a little less than `lifetime`.
        let now_ms = unix_now_ms();
        let (token, expires) = match &self.signer {
            Signer::Key { key_name, key } => {
                let expires = now_ms / 1000 + self.lifetime.as_secs();
                (sas::sas_token(&self.audience, key_name, key.expose(), expires), expires)
            }
            Signer::Fixed(token) => {
                let expires = sas::token_expiry(token.expose()).ok_or_else(|| {
                    PortError::new(
                        ErrorKind::Config,
                        format!("{}: the SharedAccessSignature has no se=<expiry in Unix seconds>", self.what),
                    )
                })?;
                if expires <= now_ms / 1000 {
                    return Err(PortError::new(
                        ErrorKind::Auth,
                        format!(
                            "{}: the SharedAccessSignature expired at {expires} (Unix seconds); put a fresh one in the connection string",
                            self.what
                        ),
                    ));
                }
                (token.expose().to_owned(), expires)
            }
        };
        let expires_ms = i64::try_from(expires.saturating_mul(1000)).unwrap_or(i64::MAX);
        let cbs_token = CbsToken::new(token, SAS_TOKEN_TYPE, Some(Timestamp::from_milliseconds(expires_ms)));
        self.client.put_token(self.audience.clone(), cbs_token).await.map_err(|e| {
            // The error describes the status, never the token.
            PortError::new(
                ErrorKind::Auth,
                format!("{}: the CBS node refused the SAS token ({e}); check the SharedAccessKeyName/SharedAccessKey or SharedAccessSignature and the policy's rights", self.what),
            )
        })?;
        Ok(Duration::from_millis(expires.saturating_mul(1000).saturating_sub(now_ms)))
    }

    async fn close(self) {
        let _ = self.client.close().await;
    }
}

impl Conn {
    /// Resolves when the CBS token could not be kept valid (the connection must be
    /// replaced); pending forever without CBS. Cancel-safe.
    pub(crate) async fn token_lost(&mut self) -> PortError {
        match &mut self.refresh {
            Some(refresh) => refresh.failed().await,
            None => std::future::pending().await,
        }
    }

    /// End the session (bounded by [`SESSION_END_LIMIT`] or `timeout`, whichever is
    /// shorter) and close the connection (bounded by `timeout`).
    pub(crate) async fn close(mut self, timeout: Duration) {
        if let Some(refresh) = self.refresh.take() {
            refresh.stop(timeout).await;
        }
        let _ = tokio::time::timeout(timeout.min(SESSION_END_LIMIT), self.session.end()).await;
        let _ = tokio::time::timeout(timeout, self.connection.close()).await;
    }
}

/// The outcome of attaching a link on `conn` within `limit` (`attach`: what the
/// timed-out attach future gave): the link, or — after closing `conn` within
/// `close_within` — an error naming `what` and `step`, mapped by `attach_error`.
pub(crate) async fn attached<T, E>(
    conn: Conn,
    attach: Result<Result<T, E>, tokio::time::error::Elapsed>,
    (what, step): (&str, &str),
    (limit, close_within): (Duration, Duration),
    attach_error: fn(&str, &E) -> PortError,
) -> Result<(Conn, T), PortError> {
    let failed = match attach {
        Ok(Ok(link)) => return Ok((conn, link)),
        Ok(Err(e)) => attach_error(what, &e),
        Err(_) => error::timeout(what, step, limit),
    };
    conn.close(close_within).await;
    Err(failed)
}

/// The result of a background (re)connect task, once it ends; pending forever when
/// none runs (for a `select!` branch guarded by `task.is_some()`).
pub(crate) async fn join<T>(task: &mut Option<tokio::task::JoinHandle<Result<T, PortError>>>) -> Result<T, PortError> {
    match task {
        Some(t) => match t.await {
            Ok(r) => r,
            Err(e) => Err(PortError::new(ErrorKind::Other, format!("connect task failed: {e}"))),
        },
        None => std::future::pending().await,
    }
}
