//! The anchor: RabbitMQ's shovel plugin moving one queue to another, AMQP 1.0 on
//! both sides, each message acknowledged at the source once the target confirmed it
//! (`on-confirm`), 1,000 unacknowledged at most (the prefetch).
//!
//! One `rabbitmqctl eval` per round sets the shovel, waits inside the broker until
//! the source is empty (nothing ready or unacknowledged) and the target holds every
//! message, and clears it: the broker's own clock times it, so the seconds
//! rabbitmqctl takes to boot its Erlang VM are not counted, and no poll from
//! outside adds a VM per look. The node needs the `rabbitmq_shovel` plugin, which
//! the private node enables.

use std::time::Duration;

use drain_e2e::rabbit::Broker;

/// The shovel's definition: what `rabbitmqctl set_parameter shovel` takes.
fn definition(uri: &str, (from, to): (&str, &str)) -> String {
    format!(
        r#"{{"src-protocol":"amqp10","src-uri":"{uri}","src-address":"/amq/queue/{from}","src-prefetch-count":1000,"dest-protocol":"amqp10","dest-uri":"{uri}","dest-address":"/amq/queue/{to}","ack-mode":"on-confirm"}}"#
    )
}

/// The Erlang run by `rabbitmqctl eval`: microseconds from setting the shovel until
/// `n` messages moved, polling the two queues' counts every 2 ms.
fn expression(definition: &str, (from, to): (&str, &str), n: usize) -> String {
    let json = definition.replace('\\', "\\\\").replace('"', "\\\"");
    format!(
        r#"V = <<"/">>, Name = <<"drain-bench-shovel">>,
Count = fun(Q) -> {{ok, R}} = rabbit_amqqueue:lookup(rabbit_misc:r(V, queue, Q)), proplists:get_value(messages, rabbit_amqqueue:info(R, [messages])) end,
T0 = erlang:monotonic_time(microsecond),
ok = rabbit_runtime_parameters:parse_set(V, <<"shovel">>, Name, "{json}", <<"drain-bench">>),
Wait = fun W(Left) -> case {{Count(<<"{from}">>), Count(<<"{to}">>)}} of {{0, N}} when N >= {n} -> ok; _ when Left =< 0 -> timeout; _ -> timer:sleep(2), W(Left - 2) end end,
Done = Wait(60000),
T1 = erlang:monotonic_time(microsecond),
rabbit_runtime_parameters:clear(V, <<"shovel">>, Name, <<"drain-bench">>),
{{Done, T1 - T0}}."#
    )
}

/// Time the shovel moving the `n` messages of `from` to `to`.
pub(crate) fn shovel(broker: &Broker, queues: (&str, &str), n: usize) -> Duration {
    let out = broker.ctl(&["eval", &expression(&definition(&broker.base, queues), queues, n)]);
    // `{ok,1234567}`
    let inner = out.trim().trim_start_matches('{').trim_end_matches('}');
    match inner.split_once(',') {
        Some(("ok", micros)) => Duration::from_micros(micros.trim().parse().expect("microseconds")),
        _ => panic!("the shovel did not move {n} messages from {} to {}: {out}", queues.0, queues.1),
    }
}
