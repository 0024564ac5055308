//! Bad input over the real RabbitMQ: messages a foreign producer may send (no message
//! id, huge application properties, a binary or odd-typed body, an empty body, ids
//! that are not strings) never crash the drain. The id-less one is dead-lettered,
//! every other one reaches the target exactly once, with its id of the type it was
//! sent with, and the source ends empty.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use adapter_servicebus::{AmqpSource, AmqpSubmitter, SourceOptions, SubmitterOptions};
use async_trait::async_trait;
use drain_core::LeaseToken;
use drain_core::PortError;
use drain_core::memory::MemoryStore;
use drain_core::ports::{
    Capabilities, Clock, Delivery, DeliveryHandle, Message, MessageId as Id, MessageSource, NoopObserver, PropertyValue,
};
use drain_core::testkit::TestRng;
use drain_core::tick::{TickConfig, TickPorts, run_tick};
use drain_runtime::TokioClock;
use fe2o3_amqp::types::messaging::{
    AmqpValue, ApplicationProperties, Batch, Body, Data, Message as AmqpMessage, MessageId, Properties,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Uuid, Value};
use support::{Rabbit, TestQueue, rabbit, send_raw};

/// Every wait of this test ends within this.
const BOUND: Duration = Duration::from_secs(90);
/// Each step of the test ends within this, and a step that does not names itself.
const STEP: Duration = Duration::from_secs(30);

/// Await `fut` within [`STEP`]; a step that hangs fails with its name.
async fn step<T>(name: &str, fut: impl Future<Output = T>) -> T {
    eprintln!("step: {name}");
    tokio::time::timeout(STEP, fut).await.unwrap_or_else(|_| panic!("step `{name}` did not end within {STEP:?}"))
}

/// One malformed message: what is sent, and what drain-core should see of it.
struct Case {
    id: Option<MessageId>,
    properties: BTreeMap<String, String>,
    body: Body<Value>,
    /// The body drain-core sees (and submits).
    want_body: Vec<u8>,
}

impl Case {
    fn new(id: Option<MessageId>, body: Body<Value>, want_body: &[u8]) -> Case {
        Case { id, properties: BTreeMap::new(), body, want_body: want_body.to_vec() }
    }

    fn amqp(&self) -> AmqpMessage<Body<Value>> {
        let application_properties = (!self.properties.is_empty()).then(|| {
            let mut map = ApplicationProperties::default();
            for (k, v) in &self.properties {
                map.0.insert(k.clone(), SimpleValue::String(v.clone()));
            }
            map
        });
        AmqpMessage {
            header: None,
            delivery_annotations: None,
            message_annotations: None,
            properties: Some(Properties { message_id: self.id.clone(), ..Properties::default() }),
            application_properties,
            body: self.body.clone(),
            footer: None,
        }
    }

    fn want_properties(&self) -> BTreeMap<String, PropertyValue> {
        self.properties.iter().map(|(k, v)| (k.clone(), PropertyValue::String(v.clone()))).collect()
    }
}

fn data(bytes: &[u8]) -> Body<Value> {
    Body::Data(Batch::new(vec![Data(Binary::from(bytes.to_vec()))]))
}

/// The malformed messages, keyed by the id the target must see: the id as sent,
/// with its AMQP type (a ulong 42 arrives as a ulong, not as the string `ulong:42`).
fn cases() -> (Case, BTreeMap<Id, Case>) {
    let no_id = Case::new(None, data(b"I have no id"), b"I have no id");
    let mut many = Case::new(Some(MessageId::String("many-properties".into())), data(b"many"), b"many");
    for i in 0..200 {
        many.properties.insert(format!("p{i:03}"), format!("{i:03}").repeat(342)[..1024].to_owned());
    }
    let mut huge = Case::new(Some(MessageId::String("huge-property".into())), data(b"huge"), b"huge");
    huge.properties.insert("huge".into(), "x".repeat(256 * 1024));
    // A map, not a list: RabbitMQ 3.10's AMQP 1.0 plugin ends the session on an
    // amqp-value list (`badarg` in `amqp10_framing:fill_from_list`).
    let mut map = fe2o3_amqp::types::primitives::OrderedMap::new();
    map.insert(Value::String("n".into()), Value::Int(5));
    map.insert(Value::Symbol("none".into()), Value::Null);
    map.insert(Value::Ulong(7), Value::Uuid(Uuid::from([9; 16])));
    let odd_value = Value::Map(map);
    let odd_bytes = serde_amqp::to_vec(&odd_value).expect("encode");
    let uuid = [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff];
    let others = [
        (Id::from("many-properties"), many),
        (Id::from("huge-property"), huge),
        (
            Id::from("non-utf8-body"),
            Case::new(
                Some(MessageId::String("non-utf8-body".into())),
                data(&[0xff, 0xfe, 0, 0xc3, 0x28]),
                &[0xff, 0xfe, 0, 0xc3, 0x28],
            ),
        ),
        (
            Id::from("odd-value"),
            Case::new(Some(MessageId::String("odd-value".into())), Body::Value(AmqpValue(odd_value)), &odd_bytes),
        ),
        (Id::from("empty-body"), Case::new(Some(MessageId::String("empty-body".into())), Body::Empty, b"")),
        (Id::from("empty-data"), Case::new(Some(MessageId::String("empty-data".into())), data(b""), b"")),
        (Id::Ulong(42), Case::new(Some(MessageId::Ulong(42)), data(b"ulong id"), b"ulong id")),
        // The string "42" is another message than the ulong 42: both reach the target.
        (Id::from("42"), Case::new(Some(MessageId::String("42".into())), data(b"string id"), b"string id")),
        (Id::from("ulong:42"), Case::new(Some(MessageId::String("ulong:42".into())), data(b"tag"), b"tag")),
        (Id::Uuid(uuid), Case::new(Some(MessageId::Uuid(Uuid::from(uuid))), data(b"uuid id"), b"uuid id")),
        (
            Id::Binary(vec![0xde, 0xad, 0xbe, 0xef, 0x00, 0xff]),
            Case::new(
                Some(MessageId::Binary(Binary::from(vec![0xde, 0xad, 0xbe, 0xef, 0x00, 0xff]))),
                data(b"binary id"),
                b"binary id",
            ),
        ),
    ];
    (no_id, others.into_iter().collect())
}

/// The adapter's source, recording the reason of every dead-letter (RabbitMQ keeps
/// only its own `x-death` reason, `rejected`, on the dead-lettered message).
struct Recording {
    inner: AmqpSource,
    reasons: Mutex<Vec<(String, String)>>,
}

#[async_trait]
impl MessageSource for Recording {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn receive(&self, max: usize, max_wait: Duration) -> Result<Vec<Delivery>, PortError> {
        self.inner.receive(max, max_wait).await
    }

    async fn complete(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.inner.complete(handle).await
    }

    async fn abandon(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.inner.abandon(handle).await
    }

    async fn release(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.inner.release(handle).await
    }

    async fn dead_letter(&self, handle: DeliveryHandle, reason: &str, description: &str) -> Result<(), PortError> {
        self.reasons.lock().expect("reasons").push((reason.to_owned(), description.to_owned()));
        self.inner.dead_letter(handle, reason, description).await
    }

    async fn renew_lock(&self, handle: DeliveryHandle) -> Result<Duration, PortError> {
        self.inner.renew_lock(handle).await
    }
}

/// Everything on `queue` (completed), bounded.
async fn take_all(r: &Rabbit, queue: &str) -> Vec<Message> {
    let source = AmqpSource::connect(r.endpoint(queue, None), SourceOptions::default()).await.expect("collector");
    let mut all = Vec::new();
    for _ in 0..100 {
        let got = source.receive(64, Duration::from_millis(500)).await.expect("receive");
        if got.is_empty() {
            break;
        }
        for d in got {
            source.complete(d.handle).await.expect("complete");
            all.push(d.message);
        }
    }
    source.close().await.expect("close collector");
    all
}

async fn malformed_messages_never_crash_the_drain(r: Rabbit) {
    let source_q = step("declare the source", TestQueue::declare(&r, None, true)).await;
    let target_q = step("declare the target", TestQueue::declare(&r, None, false)).await;
    let dlq = source_q.dlq.clone().expect("dlq");
    let (no_id, others) = cases();
    let sent: Vec<_> = std::iter::once(&no_id).chain(others.values()).map(Case::amqp).collect();
    let n = sent.len() as u64;
    step("send the malformed messages", send_raw(&r, &source_q.name, sent)).await;
    assert_eq!(source_q.ready(&source_q.name), n);

    let source =
        step("connect the source", AmqpSource::connect(r.endpoint(&source_q.name, None), SourceOptions::default()))
            .await
            .unwrap();
    let source = Recording { inner: source, reasons: Mutex::new(Vec::new()) };
    let target = step(
        "connect the target",
        AmqpSubmitter::connect(r.endpoint(&target_q.name, None), SubmitterOptions::default()),
    )
    .await
    .unwrap();
    let clock = Arc::new(TokioClock::new());
    let store = MemoryStore::new(clock.clone() as Arc<dyn Clock>);
    let mut cfg = TickConfig::new(&source_q.name);
    cfg.concurrency = 4;
    cfg.max_wait = Duration::from_millis(500);
    let ports = TickPorts::new(&source, &target, &*clock, &NoopObserver).leases(&store).claims(&store);
    let token = LeaseToken::generate("drain-test", &mut TestRng::new(6));
    let report = step("run the tick", run_tick(&cfg, &ports, &token, &Default::default())).await;
    eprintln!("{report:?}");
    assert_eq!(report.error, None);
    let stats = report.stats.expect("stats");
    assert_eq!(
        (stats.received, stats.submitted, stats.dead_lettered, stats.duplicates, stats.abandoned, stats.settle_errors),
        (n, n - 1, 1, 0, 0, 0),
        "{stats:?}"
    );
    let reasons = source.reasons.lock().expect("reasons").clone();
    assert_eq!(reasons.len(), 1, "one dead-letter: {reasons:?}");
    assert_eq!(reasons[0].0, drain_core::ports::MessageId::MISSING_REASON);
    assert!(!reasons[0].1.is_empty(), "with a description");

    let rest = step("receive the rest", source.receive(10, Duration::from_millis(300))).await.unwrap();
    assert!(rest.is_empty(), "the source ends empty");
    assert_eq!(source_q.ready(&source_q.name), 0);
    step("close the source", source.inner.close()).await.unwrap();
    step("close the target", target.close()).await.unwrap();

    let dead = step("collect the dead letters", take_all(&r, &dlq)).await;
    assert_eq!(dead.len(), 1, "only the id-less message is dead-lettered");
    assert_eq!((dead[0].message_id.as_ref(), dead[0].body.as_slice()), (None, no_id.want_body.as_slice()));

    let delivered = step("collect the target", take_all(&r, &target_q.name)).await;
    let mut seen: BTreeMap<Id, u32> = BTreeMap::new();
    for m in &delivered {
        let id = m.message_id.clone().expect("every submitted message has an id");
        *seen.entry(id.clone()).or_insert(0) += 1;
        let case = others.get(&id).unwrap_or_else(|| panic!("unexpected id {id:?} on the target"));
        assert_eq!(m.body, case.want_body, "{id}: body");
        assert_eq!(m.properties, case.want_properties(), "{id}: application properties");
    }
    let want: BTreeMap<Id, u32> = others.keys().map(|k| (k.clone(), 1)).collect();
    assert_eq!(seen, want, "each malformed message reaches the target exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_are_submitted_once_or_dead_lettered() {
    let r = rabbit("malformed");
    tokio::time::timeout(BOUND, malformed_messages_never_crash_the_drain(r)).await.expect("bounded");
}
