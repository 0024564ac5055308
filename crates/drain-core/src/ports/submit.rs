use async_trait::async_trait;

use crate::error::PortError;
use crate::ports::Message;

/// What the tick tells the target about the submit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubmitContext<'a> {
    /// The queue the message was drained from.
    pub queue: &'a str,
    /// The fencing number of the lease this tick holds, when it holds one; a
    /// downstream store can reject writes carrying a fence older than one it has seen.
    pub fence: Option<u64>,
}

/// Where drained messages are resubmitted.
#[async_trait]
pub trait Submitter: Send + Sync {
    /// Send `message` (body, properties and message id kept). MUST return `Ok` only
    /// after the target accepted it.
    ///
    /// # Errors
    /// MUST return `Err` when the target did not accept it; the tick then releases the
    /// message's claim and abandons it for redelivery.
    async fn submit(&self, message: &Message, ctx: &SubmitContext<'_>) -> Result<(), PortError>;
}
