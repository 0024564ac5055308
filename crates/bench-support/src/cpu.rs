//! CPU time a process has run, in nanoseconds, from Linux's per-thread
//! `schedstat` (`/proc/<pid>/task/<tid>/schedstat`, its first field): fine enough
//! to charge a slice of a few tens of milliseconds to the client that ran it, where
//! `/proc/<pid>/stat` counts in 10 ms ticks. `None` where the file is missing (not
//! Linux, a process gone).

use std::fs;

/// Nanoseconds every thread of process `pid` has run on a CPU so far.
pub fn process_ns(pid: u32) -> Option<u64> {
    let mut total = 0u64;
    for task in fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let stat = fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total = total.saturating_add(run_ns(&stat)?);
    }
    Some(total)
}

/// Nanoseconds this process has run so far: [`process_ns`] of itself.
pub fn own_ns() -> Option<u64> {
    process_ns(std::process::id())
}

/// The first field of a `schedstat` line: time spent on a CPU, in nanoseconds.
fn run_ns(schedstat: &str) -> Option<u64> {
    schedstat.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_field_is_the_run_time() {
        assert_eq!(run_ns("123456789 2000 17\n"), Some(123_456_789));
        assert_eq!(run_ns(""), None);
        assert_eq!(run_ns("x 1 2"), None);
    }

    #[test]
    fn this_process_has_run_and_keeps_running() {
        let Some(before) = own_ns() else { return };
        // Work the optimiser cannot drop, so that some CPU time passes.
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        std::hint::black_box(x);
        let after = own_ns().expect("read it once, reads it again");
        assert!(before > 0 && after > before, "{before} -> {after}");
        assert_eq!(process_ns(u32::MAX), None, "no such process");
    }
}
