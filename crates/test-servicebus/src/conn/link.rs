//! Sessions and links as one connection sees them: windows, handles, credit,
//! delivery ids, and the deliveries it sent and not yet saw settled.

use std::collections::{BTreeMap, VecDeque};

use crate::queue::LockToken;
use crate::state::EntityRef;

/// Frames a session may receive before it widens its window again.
pub(super) const INCOMING_WINDOW: u32 = 8192;
/// Messages a client may send on a link before we grant more.
pub(super) const LINK_CREDIT: u32 = 1000;

/// `a - b` for serial numbers (RFC 1982): positive when `a` is ahead.
pub(super) fn serial_diff(a: u32, b: u32) -> i64 {
    i64::from(a.wrapping_sub(b) as i32)
}

/// A request/response node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Node {
    /// `$cbs`: put-token.
    Cbs,
    /// `<entity>/$management`.
    Management(EntityRef),
}

/// What a link is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    /// The client receives from a queue or its dead-letter sub-queue.
    Consumer(EntityRef),
    /// The client sends to a queue.
    Producer(String),
    /// The client sends requests to a node.
    Requests(Node),
    /// The client receives a node's responses.
    Responses(Node),
}

impl Kind {
    /// The entity whose token the link needs, if any.
    pub(super) fn entity(&self) -> Option<(&str, &'static str)> {
        match self {
            Kind::Consumer(e) | Kind::Requests(Node::Management(e)) | Kind::Responses(Node::Management(e)) => {
                Some((e.queue.as_str(), "Listen"))
            }
            Kind::Producer(q) => Some((q.as_str(), "Send")),
            Kind::Requests(Node::Cbs) | Kind::Responses(Node::Cbs) => None,
        }
    }

    /// Whether the broker sends on this link.
    pub(super) fn broker_sends(&self) -> bool {
        matches!(self, Kind::Consumer(_) | Kind::Responses(_))
    }
}

/// A delivery arriving in several transfer frames.
#[derive(Debug, Default)]
pub(super) struct Partial {
    pub(super) delivery_id: Option<u32>,
    pub(super) settled: bool,
    pub(super) format: u32,
    pub(super) payload: Vec<u8>,
}

/// One attached link.
#[derive(Debug)]
pub(super) struct Link {
    pub(super) name: String,
    /// Our handle.
    pub(super) local: u32,
    pub(super) kind: Kind,
    /// The address the client gave, for logs and errors.
    pub(super) address: String,
    /// A response link's target address, which requests name in `reply-to`.
    pub(super) reply_address: Option<String>,
    /// Sending: the link's delivery-count and the credit the client gave.
    pub(super) delivery_count: u32,
    pub(super) credit: u32,
    pub(super) drain: bool,
    /// Sending pre-settled (the client asked `snd-settle-mode settled`: receive and delete).
    pub(super) presettled: bool,
    /// Responses waiting for credit.
    pub(super) responses: VecDeque<Vec<u8>>,
    /// Receiving: credit we granted that is left, and the sender's delivery-count.
    pub(super) granted: u32,
    pub(super) rx_count: u32,
    pub(super) partial: Option<Partial>,
    /// Until when the link's token lets it live (broker ms); `None`: no token needed.
    pub(super) auth_until: Option<i64>,
    /// This broker's id of the link (a session lock names its holder by it).
    pub(super) id: u64,
    /// The session a session receiver holds.
    pub(super) session: Option<String>,
}

/// A delivery we sent and the client has not settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outgoing {
    /// A peek-locked message.
    Locked { handle: u32, entity: EntityRef, token: LockToken },
    /// A management or CBS response.
    Response,
}

/// One session.
#[derive(Debug)]
pub(super) struct Session {
    pub(super) local: u16,
    pub(super) next_incoming_id: u32,
    pub(super) incoming_window: u32,
    pub(super) next_outgoing_id: u32,
    pub(super) remote_incoming_window: u32,
    pub(super) next_delivery_id: u32,
    /// Links by the client's handle.
    pub(super) links: BTreeMap<u32, Link>,
    next_local_handle: u32,
    pub(super) unsettled: BTreeMap<u32, Outgoing>,
}

impl Session {
    pub(super) fn new(local: u16, next_incoming_id: u32, remote_incoming_window: u32) -> Session {
        Session {
            local,
            next_incoming_id,
            incoming_window: INCOMING_WINDOW,
            next_outgoing_id: 0,
            remote_incoming_window,
            next_delivery_id: 0,
            links: BTreeMap::new(),
            next_local_handle: 0,
            unsettled: BTreeMap::new(),
        }
    }

    /// A handle for a new link.
    pub(super) fn allocate_handle(&mut self) -> u32 {
        let h = self.next_local_handle;
        self.next_local_handle = self.next_local_handle.wrapping_add(1);
        h
    }

    /// The peer's view of our window changed (a flow's session fields). Transfer ids
    /// are serial numbers: what the peer has not seen yet is the (wrapping)
    /// difference, and a window it already used up is 0.
    pub(super) fn on_flow(&mut self, next_incoming_id: Option<u32>, incoming_window: u32, next_outgoing_id: u32) {
        let unseen = serial_diff(self.next_outgoing_id, next_incoming_id.unwrap_or(0)).max(0);
        self.remote_incoming_window = u32::try_from(i64::from(incoming_window) - unseen).unwrap_or(0);
        self.next_incoming_id = next_outgoing_id;
    }

    /// The link the client calls `name`.
    pub(super) fn link_named(&self, name: &str) -> Option<u32> {
        self.links.iter().find(|(_, l)| l.name == name).map(|(h, _)| *h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_and_credit_follow_serial_number_arithmetic() {
        assert_eq!(serial_diff(5, 3), 2);
        assert_eq!(serial_diff(3, 5), -2);
        assert_eq!(serial_diff(1, u32::MAX), 2, "across the wrap");
        let check = |ours: u32, their_next_incoming: u32, window: u32, want: u32| {
            let mut s = Session::new(0, 0, 0);
            s.next_outgoing_id = ours;
            s.on_flow(Some(their_next_incoming), window, 0);
            assert_eq!(
                s.remote_incoming_window, want,
                "sent up to {ours}, seen up to {their_next_incoming}, window {window}"
            );
        };
        check(10, 10, 100, 100);
        check(10, 4, 100, 94);
        check(10, 4, 3, 0);
        check(2, u32::MAX - 1, 100, 96);
    }
}
