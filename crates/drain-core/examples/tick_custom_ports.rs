//! A tick over ports of your own: a queue and a target written here (any broker,
//! any sink), the per-message claim in drain-core's in-memory store, virtual time.
//! The tick receives, claims each message, submits it, marks its claim done and
//! completes it; a redelivered copy is completed as a duplicate, never submitted
//! twice.
//!
//! `cargo run -p drain-core --features memory --example tick_custom_ports`

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drain_core::memory::{ManualClock, MemoryStore, block_on};
use drain_core::ports::{
    Capabilities, Delivery, DeliveryHandle, Message, MessageId, MessageSource, NoopObserver, SubmitContext, Submitter,
};
use drain_core::tick::{TickConfig, TickPorts, run_tick};
use drain_core::{ErrorKind, LeaseToken, PortError, Switch};

/// A queue: `receive` locks messages until they are settled.
#[derive(Default)]
struct Queue {
    ready: Mutex<VecDeque<Message>>,
    locked: Mutex<BTreeMap<u64, Message>>,
}

impl Queue {
    fn settle(&self, handle: DeliveryHandle) -> Result<Message, PortError> {
        let lost = || PortError::new(ErrorKind::LockLost, format!("delivery {} is not locked", handle.0));
        self.locked.lock().unwrap().remove(&handle.0).ok_or_else(lost)
    }
}

#[drain_core::async_trait]
impl MessageSource for Queue {
    fn capabilities(&self) -> Capabilities {
        Capabilities { lock_renewal: false, release: true }
    }
    async fn receive(&self, max: usize, _max_wait: Duration) -> Result<Vec<Delivery>, PortError> {
        let (mut ready, mut locked) = (self.ready.lock().unwrap(), self.locked.lock().unwrap());
        let n = max.min(ready.len());
        let mut out = Vec::with_capacity(n);
        for message in ready.drain(..n) {
            let handle = locked.keys().next_back().map_or(1, |h| h + 1);
            locked.insert(handle, message.clone());
            out.push(Delivery { handle: DeliveryHandle(handle), message, delivery_count: 0 });
        }
        Ok(out)
    }
    async fn complete(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.settle(handle).map(drop)
    }
    async fn abandon(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        let message = self.settle(handle)?;
        self.ready.lock().unwrap().push_back(message);
        Ok(())
    }
    async fn release(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.abandon(handle).await // this queue counts no deliveries
    }
    async fn dead_letter(&self, handle: DeliveryHandle, reason: &str, _description: &str) -> Result<(), PortError> {
        let message = self.settle(handle)?;
        println!("dead-lettered {:?}: {reason}", message.message_id);
        Ok(())
    }
    async fn renew_lock(&self, _handle: DeliveryHandle) -> Result<Duration, PortError> {
        Err(PortError::new(ErrorKind::Unsupported, "this queue holds a lock until the message is settled"))
    }
}

/// A target that keeps what it accepted.
#[derive(Default)]
struct Sink(Mutex<Vec<MessageId>>);

#[drain_core::async_trait]
impl Submitter for Sink {
    async fn submit(&self, message: &Message, _ctx: &SubmitContext<'_>) -> Result<(), PortError> {
        self.0.lock().unwrap().extend(message.message_id.clone());
        Ok(())
    }
}

fn message(id: MessageId) -> Message {
    {
        let mut m = Message::default();
        m.message_id = Some(id);
        m.body = b"{\"order\":1}".to_vec();
        m
    }
}

fn main() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryStore::new(clock.clone());
    let (queue, sink) = (Queue::default(), Sink::default());
    // The claim on, single-flight off: no lease store is needed, none is given.
    let cfg = {
        let mut m = TickConfig::new("orders");
        m.singleflight = Switch::Off;
        m.atomic_claim = Switch::On;
        m
    };
    let ports = TickPorts::new(&queue, &sink, &*clock, &NoopObserver).claims(&store);
    assert!(ports.missing(&cfg).is_empty());
    let token = |n: u8| LeaseToken::from_random("example-host", [n; 16]);

    for id in [MessageId::Ulong(42), MessageId::from("42"), MessageId::from("order-7")] {
        queue.ready.lock().unwrap().push_back(message(id));
    }
    let first = block_on(&clock, run_tick(&cfg, &ports, &token(1), &Default::default()));
    let stats = first.stats.expect("the tick ran");
    assert_eq!((stats.received, stats.submitted, stats.duplicates), (3, 3, 0), "{first:?}");

    // The broker redelivers one (its completion was lost): the done claim suppresses it.
    queue.ready.lock().unwrap().push_back(message(MessageId::Ulong(42)));
    let second = block_on(&clock, run_tick(&cfg, &ports, &token(2), &Default::default()));
    let stats = second.stats.expect("the tick ran");
    assert_eq!((stats.received, stats.submitted, stats.duplicates), (1, 0, 1), "{second:?}");

    let accepted = sink.0.lock().unwrap().clone();
    assert_eq!(accepted, [MessageId::Ulong(42), MessageId::from("42"), MessageId::from("order-7")]);
    assert!(queue.locked.lock().unwrap().is_empty(), "every delivery settled");
    println!("accepted {accepted:?} once each; the redelivery was completed as a duplicate");
}
