//! The `$management` client that renew-lock calls go through (Service Bus), attached
//! on the live link's session and tagged with its generation: a renewal through the
//! client of a lost link is `LockLost`.

use drain_core::{ErrorKind, PortError};
use fe2o3_amqp_management::MgmtClient;
use tokio::time::timeout;

use super::Actor;
use crate::connect;
use crate::endpoint::Profile;
use crate::error;

/// A management client attached on the link's session (Service Bus).
pub(in crate::source) struct Management {
    pub(in crate::source) generation: u64,
    pub(in crate::source) client: MgmtClient,
}

impl Actor {
    pub(super) async fn attach_management(&mut self) -> Result<Management, PortError> {
        let entity = self.endpoint.require_entity()?.to_owned();
        let Some(link) = &mut self.link else {
            return Err(self.not_connected());
        };
        let attach = MgmtClient::builder()
            .management_node_address(Profile::management_address(&entity))
            .client_node_addr(connect::unique_name("drain-mgmt"))
            .attach(&mut link.conn.session);
        match timeout(self.opts.operation_timeout, attach).await {
            Ok(Ok(client)) => Ok(Management { generation: self.generation, client }),
            Ok(Err(e)) => Err(PortError::new(
                ErrorKind::Protocol,
                format!("{}: could not attach to {entity}/$management: {e}", self.what),
            )),
            Err(_) => Err(error::timeout(&self.what, "attaching $management", self.opts.operation_timeout)),
        }
    }
}
