use async_trait::async_trait;

use crate::error::PortError;
use crate::ports::{Fence, Message};

/// What the tick tells the target about the submit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubmitContext<'a> {
    /// The queue the message was drained from.
    pub queue: &'a str,
    /// The fence of the lease this tick holds, when it holds one: hand it to a
    /// resource that refuses stale fences, or carry it on the message.
    pub fence: Option<&'a Fence>,
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
