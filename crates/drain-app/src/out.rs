//! Standard output for every subcommand: a reader that stops early (`drain config
//! --json | head -c1`, `drain leases | head`) ends the output quietly instead of
//! panicking (`println!` panics on a closed pipe, and Rust ignores SIGPIPE). After
//! the first broken pipe nothing more is written; the command still finishes and
//! exits with its own status.

use std::fmt::Arguments;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Write `args` to standard output and flush; a closed pipe is remembered and ends
/// the output, any other error is reported once on stderr.
pub(crate) fn write(args: Arguments<'_>) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        CLOSED.store(true, Ordering::Relaxed);
        if e.kind() != io::ErrorKind::BrokenPipe {
            eprintln!("drain: cannot write to standard output: {e}");
        }
    }
}

/// `print!` that a closed pipe ends quietly.
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::write(format_args!($($arg)*)) };
}

/// `println!` that a closed pipe ends quietly.
macro_rules! outln {
    ($($arg:tt)*) => { $crate::out::write(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use {out, outln};
