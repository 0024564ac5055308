//! Session-enabled entities: the session filter of an attach, the `$management`
//! calls on a held session, and [`SessionSource`], which holds several sessions.

pub(crate) mod filter;
pub(crate) mod management;
mod source;

pub use filter::SessionFilter;
pub use source::{ReleaseReason, SessionEvent, SessionEventKind, SessionOptions, SessionSource};
