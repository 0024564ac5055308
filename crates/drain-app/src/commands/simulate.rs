//! `drain simulate`: the fleet simulator (issue 7). The simulation itself lives in
//! `crate::simulate`; this is its command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;

use crate::simulate::policy::{REPORTED, candidates};
use crate::simulate::scenario::{PRESETS, Scenario};
use crate::simulate::{chart, simulate};

/// Arguments of `drain simulate`.
#[derive(Debug, Args)]
pub(crate) struct SimulateArgs {
    /// Scenario preset: `default` (8 instances, 200 owners, 40 items/s, each arrival
    /// requested of 3), `seed-fleet` (the seeds' situation), `large` (50 instances,
    /// 10,000 owners, one hour).
    #[arg(long, default_value = "default", value_parser = clap::builder::PossibleValuesParser::new(PRESETS))]
    pub(crate) scenario: String,
    /// RNG seed; the same seed gives byte-identical output.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Override the number of instances (1..=65535).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) instances: Option<u16>,
    /// Override the number of owners.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
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
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also write a chart of wasted turns and p99 latency over time to this SVG file.
    #[arg(long, value_name = "PATH")]
    pub(crate) svg: Option<PathBuf>,
    /// Compare the candidates of the search for a low-latency claim-aware policy
    /// (shorter windows, TTL-shaped backoff, wake all / one on release) instead of
    /// the four reported policies.
    #[arg(long)]
    pub(crate) explore: bool,
    /// Print the wall time of the run on stderr.
    #[arg(long)]
    pub(crate) timing: bool,
}

impl SimulateArgs {
    /// The preset with the overrides applied, or why they do not fit.
    pub(crate) fn scenario(&self) -> Result<Scenario, String> {
        let mut sc = Scenario::preset(&self.scenario).map_err(|e| e.to_string())?;
        if let Some(n) = self.instances {
            sc.instances = usize::from(n);
            sc.requested_of = sc.requested_of.min(sc.instances);
        }
        if let Some(n) = self.owners {
            sc.owners = n as usize;
        }
        if let Some(d) = self.duration {
            sc.duration_s = d;
        }
        if let Some(rate) = self.rate {
            if !(rate.is_finite() && rate > 0.0 && rate <= 1_000_000.0) {
                return Err(format!("--rate {rate}: must be a number of items per second in (0, 1000000]"));
            }
            sc.rate_per_s = rate;
        }
        if let Some(k) = self.requested_of {
            if usize::from(k) > sc.instances {
                return Err(format!("--requested-of {k}: more than the {} instances", sc.instances));
            }
            sc.requested_of = usize::from(k);
        }
        Ok(sc)
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
    let started = Instant::now();
    let policies = if args.explore { candidates() } else { REPORTED.to_vec() };
    let outcome = simulate(&sc, args.seed, &policies);
    if args.timing {
        eprintln!("drain simulate: {} policies simulated in {:.2} s", policies.len(), started.elapsed().as_secs_f64());
    }
    if args.json {
        match serde_json::to_string(&outcome.report) {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("drain simulate: cannot print the report: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", outcome.report.table());
    }
    if let Some(path) = &args.svg {
        if let Err(e) = std::fs::write(path, chart(&outcome, sc.duration_s)) {
            eprintln!("drain simulate: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        eprintln!("drain simulate: chart written to {}", path.display());
    }
    ExitCode::SUCCESS
}
