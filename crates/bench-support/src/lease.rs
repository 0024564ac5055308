//! The lease benches' machinery: lease cycles per second of several clients, each
//! (client, tasks) pair measured in many rounds, and within a round the clients
//! alternating in short slices, in the order [`round_order`] gives, so that all of
//! them meet the same noise.
//!
//! A slice is `tasks` Tokio tasks, each cycling on a lease of its own for a short
//! warm-up and then for a timed run; a round's figure for a client is the cycles its
//! slices timed, per second, with their latency percentiles. The benches report the
//! median round of each pair ([`Rounds::medians`]) and each ratio as the median of the
//! per-round ratios, with its spread ([`Rounds::ratios`]).

use std::future::Future;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::order::round_order;
use crate::stats::{Spread, median_by, rounded, spread};

/// How long a lease bench runs: `ci` (the default) or `full` (`--full`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Length {
    /// `"ci"` or `"full"`, for the JSON.
    pub name: &'static str,
    /// Rounds.
    pub rounds: usize,
    /// Slices per client per round.
    pub slices: usize,
    /// Timed length of one slice.
    pub run: Duration,
}

impl Length {
    /// `full` when the command line holds `--full`, else `ci`.
    pub fn from_args(ci: Length, full: Length) -> Length {
        if crate::full() { full } else { ci }
    }

    /// The time one client's slices of a round are timed in all.
    pub fn timed(&self) -> Duration {
        self.run * u32::try_from(self.slices).unwrap_or(u32::MAX)
    }
}

/// A client a lease bench measures.
pub trait LeaseClient: Clone + Send + 'static {
    /// What one task of a slice keeps between its cycles: its lease, token,
    /// prepared commands.
    type Task: Send + Sync + 'static;

    /// The client's name in the table and the JSON.
    fn name(&self) -> &'static str;

    /// The state of task `n` of a slice.
    fn task(&self, n: usize) -> Self::Task;

    /// One lease cycle (acquire + release), asserting that both succeeded.
    fn cycle(&mut self, task: &Self::Task) -> impl Future<Output = ()> + Send;
}

/// What one slice ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Slice {
    /// The latency of each cycle that started after the warm-up, in µs.
    pub latencies_us: Vec<u64>,
    /// Every cycle the slice ran, the warm-up's included.
    pub cycles: usize,
}

/// One slice: `tasks` tasks of `client` cycling for `run` after a `warmup`.
pub async fn slice<C: LeaseClient>(client: &C, tasks: usize, warmup: Duration, run: Duration) -> Slice {
    let warm_until = Instant::now() + warmup;
    let stop = warm_until + run;
    let handles: Vec<_> = (0..tasks)
        .map(|n| {
            let mut client = client.clone();
            let task = client.task(n);
            tokio::spawn(async move {
                let mut slice = Slice::default();
                loop {
                    let t0 = Instant::now();
                    if t0 >= stop {
                        break;
                    }
                    client.cycle(&task).await;
                    slice.cycles += 1;
                    if t0 >= warm_until {
                        slice.latencies_us.push(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX));
                    }
                }
                slice
            })
        })
        .collect();
    let mut all = Slice::default();
    for h in handles {
        let one = h.await.expect("bench task");
        all.latencies_us.extend(one.latencies_us);
        all.cycles += one.cycles;
    }
    all
}

/// A round's figures for one (client, tasks) pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// The client's name.
    pub client: &'static str,
    /// Concurrent tasks.
    pub tasks: usize,
    /// Cycles timed (those that started after a warm-up).
    pub cycles: usize,
    /// `cycles` per second of timed run.
    pub per_sec: f64,
    /// Median latency of a cycle, µs.
    pub p50_us: u64,
    /// 99th percentile latency of a cycle, µs.
    pub p99_us: u64,
}

impl Measured {
    /// The figures of `latencies_us`, the cycles `client` ran in `timed` of slices.
    pub fn new(client: &'static str, tasks: usize, mut latencies_us: Vec<u64>, timed: Duration) -> Measured {
        latencies_us.sort_unstable();
        let n = latencies_us.len();
        let pct = |p: f64| latencies_us.get(((n as f64 * p) as usize).min(n.saturating_sub(1))).copied().unwrap_or(0);
        Measured {
            client,
            tasks,
            cycles: n,
            per_sec: n as f64 / timed.as_secs_f64(),
            p50_us: pct(0.50),
            p99_us: pct(0.99),
        }
    }

    /// This round as a row of the JSON's `results`.
    pub fn json(&self) -> Value {
        json!({
            "client": self.client,
            "tasks": self.tasks,
            "cycles": self.cycles,
            "cycles_per_sec": self.per_sec.round() as u64,
            "p50_us": self.p50_us,
            "p99_us": self.p99_us,
        })
    }
}

/// Every round of every (client, tasks) pair, and each client's cycles.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rounds {
    /// One list of rounds per (client, tasks) pair, the tasks' order outermost.
    pub pairs: Vec<Vec<Measured>>,
    /// Every cycle each client ran (warm-ups included), in the clients' order.
    pub cycles: Vec<usize>,
    /// What each (client, tasks) pair cost in CPU over all its slices, in the
    /// order of `pairs`.
    pub cpu: Vec<Cpu>,
}

/// The CPU time a (client, tasks) pair's slices took, warm-ups included, on the
/// bench's side and the server's ([`crate::cpu`]), and the cycles they ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cpu {
    /// Every cycle of the slices.
    pub cycles: u64,
    /// Nanoseconds the bench process ran (the client, its connection's tasks).
    pub client_ns: u64,
    /// Nanoseconds the server process ran; 0 when it was not measured.
    pub server_ns: u64,
}

impl Cpu {
    /// Microseconds of client and server CPU per cycle.
    pub fn per_cycle_us(&self) -> (f64, f64) {
        let n = self.cycles.max(1) as f64;
        (self.client_ns as f64 / n / 1e3, self.server_ns as f64 / n / 1e3)
    }
}

/// Measure `clients` at each count of `tasks` for `len.rounds` rounds: in a round,
/// for each count, `len.slices` passes through the clients in [`round_order`].
/// Each slice's CPU time, the bench's and that of the process `server` (when
/// given), is charged to its pair ([`Rounds::cpu`]).
pub async fn run<C: LeaseClient>(
    clients: &[C],
    tasks: &[usize],
    warmup: Duration,
    len: &Length,
    server: Option<u32>,
) -> Rounds {
    let pairs = clients.len() * tasks.len();
    let mut rounds = Rounds {
        pairs: (0..pairs).map(|_| Vec::new()).collect(),
        cycles: vec![0; clients.len()],
        cpu: vec![Cpu::default(); pairs],
    };
    let server_ns = || server.and_then(crate::cpu::process_ns).unwrap_or(0);
    for round in 0..len.rounds {
        for (t, &n) in tasks.iter().enumerate() {
            let mut latencies: Vec<Vec<u64>> = vec![Vec::new(); clients.len()];
            for _ in 0..len.slices {
                for c in round_order(round, clients.len()) {
                    let (client_before, server_before) = (crate::cpu::own_ns().unwrap_or(0), server_ns());
                    let slice = slice(&clients[c], n, warmup, len.run).await;
                    let cpu = &mut rounds.cpu[t * clients.len() + c];
                    cpu.client_ns += crate::cpu::own_ns().unwrap_or(0).saturating_sub(client_before);
                    cpu.server_ns += server_ns().saturating_sub(server_before);
                    cpu.cycles += slice.cycles as u64;
                    latencies[c].extend(slice.latencies_us);
                    rounds.cycles[c] += slice.cycles;
                }
            }
            for (c, l) in latencies.into_iter().enumerate() {
                rounds.pairs[t * clients.len() + c].push(Measured::new(clients[c].name(), n, l, len.timed()));
            }
        }
    }
    rounds
}

/// The clients the command line names (`cargo bench --bench x -- adapter rslock`),
/// all of them when it names none.
pub fn chosen<C: LeaseClient>(clients: impl IntoIterator<Item = C>) -> Vec<C> {
    let only = crate::only();
    clients.into_iter().filter(|c| only.is_empty() || only.iter().any(|o| o == c.name())).collect()
}

/// One ratio of two clients' cycles per second: the median of the per-round ratios.
#[derive(Debug, Clone, PartialEq)]
pub struct Ratio {
    /// `"{client}_vs_{other}_{tasks}_tasks"`.
    pub key: String,
    /// The per-round ratios' median, spread and range.
    pub spread: Spread,
}

impl Rounds {
    /// The rounds of `client` at `tasks`, if it ran.
    pub fn of(&self, client: &str, tasks: usize) -> Option<&[Measured]> {
        self.pairs.iter().find(|r| r.first().is_some_and(|m| m.client == client && m.tasks == tasks)).map(Vec::as_slice)
    }

    /// CPU per cycle of each pair that ran, keyed `"{client}_{tasks}_tasks"`:
    /// `client_us` (the bench process) and, when measured, `server_us`.
    pub fn cpu_json(&self) -> Map<String, Value> {
        let mut out = Map::new();
        for (rounds, cpu) in self.pairs.iter().zip(&self.cpu) {
            let Some(first) = rounds.first() else { continue };
            let (client, server) = cpu.per_cycle_us();
            let mut row = Map::new();
            row.insert("client_us".to_owned(), json!(rounded(client, 2)));
            if cpu.server_ns > 0 {
                row.insert("server_us".to_owned(), json!(rounded(server, 2)));
            }
            row.insert("cycles".to_owned(), json!(cpu.cycles));
            out.insert(format!("{}_{}_tasks", first.client, first.tasks), Value::Object(row));
        }
        out
    }

    /// The median round (by cycles per second) of each pair, in the order measured.
    pub fn medians(&self) -> Vec<&Measured> {
        self.pairs.iter().filter_map(|r| median_by(r, |a, b| a.per_sec.total_cmp(&b.per_sec))).collect()
    }

    /// `client` against each of `others` at each count of `tasks` (those that ran),
    /// each printed as it is computed.
    pub fn ratios(&self, tasks: &[usize], client: &str, others: &[&str]) -> Vec<Ratio> {
        let mut out = Vec::new();
        for &n in tasks {
            let Some(mine) = self.of(client, n) else { continue };
            for other in others {
                let Some(base) = self.of(other, n) else { continue };
                let each: Vec<f64> = mine.iter().zip(base).map(|(a, b)| a.per_sec / b.per_sec.max(1.0)).collect();
                let Some(s) = spread(&each) else { continue };
                println!(
                    "{client} / {other} at {n} task(s): {:.3}x (spread {:.1} %, range {:.3}-{:.3})",
                    s.median,
                    s.iqr_over_median * 100.0,
                    s.min,
                    s.max
                );
                out.push(Ratio { key: format!("{client}_vs_{other}_{n}_tasks"), spread: s });
            }
        }
        out
    }
}

/// Print the median rounds as a table, the client column `width` wide.
pub fn print_table(results: &[&Measured], width: usize) {
    println!("{:<width$} {:>5} {:>12} {:>9} {:>9}", "client", "tasks", "cycles/s", "p50 µs", "p99 µs");
    for r in results {
        println!("{:<width$} {:>5} {:>12.0} {:>9} {:>9}", r.client, r.tasks, r.per_sec, r.p50_us, r.p99_us);
    }
}

/// What every lease bench's JSON holds, for the bench called `bench` on `server`:
/// its length and build, the slices, the median rounds (`results`), and the
/// `ratios` with their `ratio_spread`. A bench adds its own keys to the map.
pub struct Report<'a> {
    /// The JSON's `"bench"`.
    pub bench: &'a str,
    /// `"debug"` or `"release"`: the bench binary's build.
    pub build: &'a str,
    /// The server and its version.
    pub server: &'a str,
    /// The warm-up before each slice.
    pub warmup: Duration,
    /// How long the bench ran.
    pub length: &'a Length,
}

impl Report<'_> {
    /// The JSON object, with the median rounds and the ratios.
    pub fn json(&self, results: &[&Measured], ratios: &[Ratio]) -> Map<String, Value> {
        let mut spreads = Map::new();
        let mut medians = Map::new();
        for r in ratios {
            medians.insert(r.key.clone(), json!(rounded(r.spread.median, 3)));
            spreads.insert(
                r.key.clone(),
                json!({
                    "iqr_over_median": rounded(r.spread.iqr_over_median, 3),
                    "min": rounded(r.spread.min, 3),
                    "max": rounded(r.spread.max, 3),
                }),
            );
        }
        let value = json!({
            "bench": self.bench,
            "length": self.length.name,
            "build": self.build,
            "server": self.server,
            "runtime": "tokio current_thread",
            "warmup_ms": self.warmup.as_millis() as u64,
            "run_ms": self.length.run.as_millis() as u64,
            "slices_per_round": self.length.slices,
            "rounds": self.length.rounds,
            "statistic": "median round; ratios: median of per-round ratios, spread = interquartile range / median",
            "results": results.iter().map(|m| m.json()).collect::<Vec<_>>(),
            "ratios": medians,
            "ratio_spread": spreads,
        });
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_of_a_round() {
        let latencies: Vec<u64> = (1..=200).rev().collect();
        let m = Measured::new("adapter", 16, latencies, Duration::from_millis(100));
        assert_eq!((m.cycles, m.per_sec, m.p50_us, m.p99_us), (200, 2000.0, 101, 199));
        let none = Measured::new("adapter", 1, Vec::new(), Duration::from_millis(100));
        assert_eq!((none.cycles, none.per_sec, none.p50_us, none.p99_us), (0, 0.0, 0, 0));
    }

    fn round(client: &'static str, tasks: usize, per_sec: f64) -> Measured {
        Measured { client, tasks, cycles: 1, per_sec, p50_us: 1, p99_us: 2 }
    }

    #[test]
    fn medians_and_ratios_of_rounds() {
        let rounds = Rounds {
            pairs: vec![
                vec![round("adapter", 1, 90.0), round("adapter", 1, 80.0), round("adapter", 1, 100.0)],
                vec![round("hand", 1, 100.0), round("hand", 1, 100.0), round("hand", 1, 100.0)],
            ],
            cycles: vec![3, 3],
            cpu: vec![Cpu { cycles: 4, client_ns: 10_000, server_ns: 0 }, Cpu::default()],
        };
        let cpu = rounds.cpu_json();
        assert_eq!(cpu["adapter_1_tasks"], json!({"client_us": 2.5, "cycles": 4}));
        assert_eq!(cpu["hand_1_tasks"], json!({"client_us": 0.0, "cycles": 0}));
        let medians: Vec<f64> = rounds.medians().iter().map(|m| m.per_sec).collect();
        assert_eq!(medians, [90.0, 100.0]);
        assert!(rounds.of("hand", 16).is_none());
        let ratios = rounds.ratios(&[1, 16], "adapter", &["hand", "missing"]);
        assert_eq!(ratios.len(), 1);
        assert_eq!(ratios[0].key, "adapter_vs_hand_1_tasks");
        assert_eq!((ratios[0].spread.median, ratios[0].spread.min, ratios[0].spread.max), (0.9, 0.8, 1.0));
    }

    #[test]
    fn the_report_keys() {
        let len = Length { name: "ci", rounds: 5, slices: 3, run: Duration::from_millis(20) };
        let report =
            Report { bench: "b", build: "debug", server: "s 1", warmup: Duration::from_millis(5), length: &len };
        let m = round("adapter", 1, 1234.4);
        let ratio = Ratio { key: "adapter_vs_hand_1_tasks".to_owned(), spread: Spread::default() };
        let json = Value::Object(report.json(&[&m], &[ratio]));
        assert_eq!(json["results"][0]["cycles_per_sec"], 1234);
        assert_eq!(json["warmup_ms"], 5);
        assert_eq!(json["ratio_spread"]["adapter_vs_hand_1_tasks"]["max"], 0.0);
        let keys: Vec<&String> = json.as_object().map(|o| o.keys().collect()).unwrap_or_default();
        assert_eq!(keys.len(), 13, "{keys:?}");
    }
}
