//! The `$management` calls on the session a session receiver holds, sent through
//! the same management client as renew-lock (attached on the live link's session).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use drain_core::{ErrorKind, PortError};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp_management::error::Error as MgmtError;
use fe2o3_amqp_management::{Request, Response};
use tokio::time::timeout;

use super::actor::Command;
use super::{AmqpSource, Inner};
use crate::error;
use crate::renewal::renew_error;
use crate::session::management::{GetSessionState, RenewSessionLock, SessionCall, SetSessionState};

impl AmqpSource {
    /// The session this receiver holds (`None`: not a session receiver, or not
    /// attached now).
    #[must_use]
    pub fn session_id(&self) -> Option<String> {
        self.auto.source().held.session().map(|(s, _, _)| s.id)
    }

    /// Why the held session was lost (its receiver's link ended: the broker's
    /// `com.microsoft:session-lock-lost`, or a lost connection); `None` while it is
    /// held. A session receiver does not reconnect: another receiver may hold the
    /// session by then.
    #[must_use]
    pub fn session_lost(&self) -> Option<PortError> {
        self.auto.source().held.session_lost()
    }

    /// When the held session's lock expires, as last heard from the broker.
    #[must_use]
    pub fn session_locked_until(&self) -> Option<SystemTime> {
        let (s, _, _) = self.auto.source().held.session()?;
        let ms = u64::try_from(s.locked_until_ms?).ok()?;
        Some(UNIX_EPOCH + Duration::from_millis(ms))
    }

    /// Renew the held session's lock (`com.microsoft:renew-session-lock`), and with it
    /// the locks of the session's messages this source holds. Returns the new expiry.
    ///
    /// # Errors
    /// `LockLost` when the session lock is lost (the broker answered 410, or the link
    /// that held it is gone); `Unsupported` on a receiver that holds no session.
    pub async fn renew_session_lock(&self) -> Result<SystemTime, PortError> {
        let inner = self.auto.source();
        let until_ms = inner.session_call(RenewSessionLock).await?.0;
        inner.held.session_renewed(until_ms);
        Ok(UNIX_EPOCH + Duration::from_millis(u64::try_from(until_ms).unwrap_or(0)))
    }

    /// The held session's state (`com.microsoft:get-session-state`); `None` when none
    /// was set.
    ///
    /// # Errors
    /// As [`AmqpSource::renew_session_lock`].
    pub async fn session_state(&self) -> Result<Option<Vec<u8>>, PortError> {
        Ok(self.auto.source().session_call(GetSessionState).await?.0)
    }

    /// Set (or, with `None`, clear) the held session's state
    /// (`com.microsoft:set-session-state`).
    ///
    /// # Errors
    /// As [`AmqpSource::renew_session_lock`].
    pub async fn set_session_state(&self, state: Option<Vec<u8>>) -> Result<(), PortError> {
        self.auto.source().session_call(|call| SetSessionState(call, state)).await.map(|_| ())
    }
}

impl Inner {
    /// Send the request `make` builds for the held session, through the management
    /// client of the link that holds it.
    async fn session_call<R, Res>(&self, make: impl FnOnce(SessionCall) -> R) -> Result<Res, PortError>
    where
        R: Request<Response = Res> + Send,
        Res: Response<Body = Value, Error = MgmtError> + Send,
    {
        if let Some(lost) = self.held.session_lost() {
            return Err(PortError::new(ErrorKind::LockLost, lost.message));
        }
        let Some((session, generation, link_name)) = self.held.session() else {
            return Err(PortError::new(
                ErrorKind::Unsupported,
                format!("{}: this receiver holds no session (or its link is being replaced)", self.what),
            ));
        };
        let op = self.options.operation_timeout;
        let mut slot = self.management.lock().await;
        if slot.as_ref().is_none_or(|m| m.generation != generation) {
            *slot = Some(self.ask(|reply| Command::Management { reply }).await?);
        }
        let Some(mgmt) = slot.as_mut() else { return Err(self.closed()) };
        if mgmt.generation != generation {
            return Err(session_lost(&self.what, &session.id));
        }
        let request = make(SessionCall { session_id: session.id.clone(), link_name, server_timeout: op });
        match timeout(op, mgmt.client.call(request)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => {
                let err = renew_error(&e);
                if err.kind != ErrorKind::LockLost && err.kind != ErrorKind::Other {
                    *slot = None;
                }
                if err.kind == ErrorKind::LockLost {
                    return Err(session_lost(&self.what, &session.id));
                }
                Err(PortError::new(err.kind, format!("{}: session {}: {}", self.what, session.id, err.message)))
            }
            Err(_) => {
                *slot = None;
                Err(error::timeout(&self.what, "a session call", op))
            }
        }
    }
}

pub(crate) fn session_lost(what: &str, session: &str) -> PortError {
    PortError::new(
        ErrorKind::LockLost,
        format!("{what}: the lock of session {session} is lost; its unsettled messages go back to the session"),
    )
}
