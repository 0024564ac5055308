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
///
/// `Ok` means the target accepted the message (body, id with its type, headers and
/// properties as [`Message`] carries them); the tick then marks the message's claim
/// done and completes it at the source. `Err` means it did not: the tick releases the
/// claim and abandons the message for redelivery.
#[async_trait]
pub trait Submitter: Send + Sync {
    /// Send `message`, answering once the target has accepted it or refused.
    async fn submit(&self, message: &Message, ctx: &SubmitContext<'_>) -> Result<(), PortError>;
}
