//! `drain simulate`: the fleet simulator's command line. The simulation itself is
//! the drain-simulate crate; this parses the arguments, shows progress on a
//! terminal, and prints or writes what it returns.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use drain_simulate::{BadOverride, Overrides, PRESETS, Progress, REPORTED, Scenario, candidates, chart, simulate};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Arguments of `drain simulate`.
#[derive(Debug, Args)]
pub(crate) struct SimulateArgs {
    /// Scenario preset: `default` (8 instances, 200 owners, 40 items/s, each arrival
    /// requested of 3), `seed-fleet` (the seeds' situation), `large` (50 instances,
    /// 10,000 owners, one hour), `owners` (`drain owners`' benchmark: 4 instances,
    /// 200 owners, 20,000 items in the backlogs at the start, a pass every 100 ms).
    #[arg(long, default_value = "default", value_parser = clap::builder::PossibleValuesParser::new(PRESETS))]
    pub(crate) scenario: String,
    /// RNG seed; the same seed gives byte-identical output.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Override the number of instances (1..=65535).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) instances: Option<u16>,
    /// Override the number of owners (at most 1,000,000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) owners: Option<u32>,
    /// Override the arrival window, in seconds (the run then drains).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub(crate) duration: Option<u64>,
    /// Override the mean arrival rate, items per second.
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// Override how many instances each arrival is requested of (at most --instances).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) requested_of: Option<u16>,
    /// Override the median work of one item, in milliseconds (turns grow with it).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=60_000))]
    pub(crate) item_ms: Option<u32>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also write a chart of wasted turns and p99 latency over time to this SVG file.
    #[arg(long, value_name = "PATH")]
    pub(crate) svg: Option<PathBuf>,
    /// Compare the candidates of the search for a low-latency claim-aware policy
    /// (shorter windows, TTL-shaped backoff, wake all / one on release) instead of
    /// the four reported policies.
    #[arg(long, conflicts_with = "policy")]
    pub(crate) explore: bool,
    /// Run only these policies (repeatable), by report key: legacy, claim_aware,
    /// claim_aware_wake, oracle, or a candidate of --explore.
    #[arg(long, value_name = "KEY")]
    pub(crate) policy: Vec<String>,
    /// Print the wall time of the run on stderr.
    #[arg(long)]
    pub(crate) timing: bool,
}

impl SimulateArgs {
    /// The preset with the overrides applied, or why they do not fit.
    pub(crate) fn scenario(&self) -> Result<Scenario, String> {
        let overrides = Overrides {
            instances: self.instances.map(usize::from),
            owners: self.owners.map(|n| n as usize),
            duration_s: self.duration,
            rate_per_s: self.rate,
            requested_of: self.requested_of.map(usize::from),
            item_ms: self.item_ms,
        };
        let sc = Scenario::preset(&self.scenario).map_err(|e| e.to_string())?;
        sc.with(&overrides).map_err(|e| match e {
            BadOverride::Rate(rate) => format!("--rate {rate}: must be a number of items per second in (0, 1000000]"),
            BadOverride::RequestedOf { requested_of, instances } => {
                format!("--requested-of {requested_of}: more than the {instances} instances")
            }
            BadOverride::TooManyItems { items, max } => format!(
                "--rate x --duration asks for about {items:.0} items; at most {max:.0} fit in memory comfortably"
            ),
            other => other.to_string(),
        })
    }
}

/// `drain simulate`.
pub(crate) fn main(args: &SimulateArgs) -> ExitCode {
    let sc = match args.scenario() {
        Ok(sc) => sc,
        Err(e) => {
            eprintln!("drain simulate: {e}");
            return ExitCode::from(2);
        }
    };
    let policies = if args.explore {
        candidates()
    } else if args.policy.is_empty() {
        REPORTED.to_vec()
    } else {
        let all = candidates();
        let mut chosen = Vec::new();
        for key in &args.policy {
            match all.iter().find(|p| p.key() == key) {
                Some(p) => chosen.push(*p),
                None => {
                    let keys: Vec<&str> = all.iter().map(|p| p.key()).collect();
                    eprintln!("drain simulate: unknown policy `{key}`; one of: {}", keys.join(", "));
                    return ExitCode::from(2);
                }
            }
        }
        chosen
    };
    // Open the chart's file first: a path that cannot be written fails now, not after
    // the whole simulation ran.
    let mut chart_file = match &args.svg {
        Some(path) => match std::fs::File::create(path) {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("drain simulate: cannot write the chart to {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let started = Instant::now();
    let progress = Progress::new(&sc, &policies);
    let outcome = std::thread::scope(|s| {
        let bar = s.spawn(|| show_progress(&progress, sc.duration_s()));
        let outcome = simulate(&sc, args.seed, &policies, &progress);
        progress.finish();
        let _ = bar.join();
        outcome
    });
    if args.timing {
        let jobs: Vec<String> =
            outcome.wall.iter().map(|(job, took)| format!("{job} {:.2} s", took.as_secs_f64())).collect();
        eprintln!(
            "drain simulate: {} in {:.2} s of wall time (jobs in parallel: {})",
            sc.name(),
            started.elapsed().as_secs_f64(),
            jobs.join(", ")
        );
    }
    if args.json {
        match serde_json::to_string(&outcome.report) {
            Ok(line) => crate::out::outln!("{line}"),
            Err(e) => {
                eprintln!("drain simulate: cannot print the report: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        crate::out::out!("{}", outcome.report.table());
    }
    if let (Some(path), Some(file)) = (&args.svg, chart_file.as_mut()) {
        if let Err(e) = std::io::Write::write_all(file, chart(&outcome, sc.duration_s()).as_bytes()) {
            eprintln!("drain simulate: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        eprintln!("drain simulate: chart written to {}", path.display());
    }
    ExitCode::SUCCESS
}

/// Runs shorter than this finish without a progress bar.
const QUIET_FOR: Duration = Duration::from_secs(1);

/// On a terminal, once the run has taken [`QUIET_FOR`]: a progress bar on stderr
/// (virtual time reached, runs finished), cleared when the run ends. Nothing at
/// all when stderr is not a terminal (a pipe, a file, CI logs).
fn show_progress(progress: &Progress, window_s: u64) {
    if !std::io::stderr().is_terminal() {
        return;
    }
    let shown_at = Instant::now() + QUIET_FOR;
    while Instant::now() < shown_at {
        if progress.finished() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let bar = ProgressBar::with_draw_target(Some(1000), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{spinner} {elapsed:>3} [{bar:30}] {percent:>3}% {msg}")
        .map(|s| s.progress_chars("=> "));
    if let Ok(style) = style {
        bar.set_style(style);
    }
    while !progress.finished() {
        let per_mille = progress.per_mille();
        let (done, jobs) = progress.jobs_done();
        bar.set_position(per_mille);
        bar.set_message(format!(
            "drain simulate: {:.0} of {window_s} s simulated, {done} of {jobs} runs done",
            per_mille as f64 * window_s as f64 / 1000.0
        ));
        bar.tick();
        std::thread::sleep(Duration::from_millis(100));
    }
    bar.finish_and_clear();
}
