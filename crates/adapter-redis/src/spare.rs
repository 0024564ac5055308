//! Command buffers kept between calls, so that a lease operation does not
//! allocate its command's two buffers each time.
//!
//! A [`redis::Cmd`] holds its bytes and its argument list in two vectors; building
//! one per call cost two allocations and two frees, about a twentieth of a lease
//! operation's client instructions (benches/lease_cycle.rs). Small commands go back
//! to a short per-thread list when dropped, cleared; large ones (a claim batch's
//! keys, a script's source) are freed as before, so nothing large stays behind.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

use redis::Cmd;

/// Commands kept per thread: one per task in flight is plenty.
const KEEP: usize = 32;
/// Only commands sized up to this many bytes are kept.
const KEEP_BYTES: usize = 512;

thread_local! {
    static SPARE: RefCell<Vec<Cmd>> = const { RefCell::new(Vec::new()) };
}

/// An empty command, from the spare list when it holds one; back to it on drop.
pub(crate) struct SpareCmd {
    cmd: Cmd,
    keep: bool,
}

impl SpareCmd {
    /// An empty command with room for `args` arguments of `bytes` bytes in all.
    pub(crate) fn with_capacity(args: usize, bytes: usize) -> SpareCmd {
        let keep = bytes <= KEEP_BYTES;
        let spare = if keep { SPARE.try_with(|s| s.borrow_mut().pop()).ok().flatten() } else { None };
        SpareCmd { cmd: spare.unwrap_or_else(|| Cmd::with_capacity(args, bytes)), keep }
    }
}

impl Deref for SpareCmd {
    type Target = Cmd;

    fn deref(&self) -> &Cmd {
        &self.cmd
    }
}

impl DerefMut for SpareCmd {
    fn deref_mut(&mut self) -> &mut Cmd {
        &mut self.cmd
    }
}

impl Drop for SpareCmd {
    fn drop(&mut self) {
        if !self.keep {
            return;
        }
        let mut cmd = std::mem::take(&mut self.cmd);
        cmd.clear();
        // A thread being torn down has no list any more: the command is freed.
        let _ = SPARE.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < KEEP {
                s.push(cmd);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spare_count() -> usize {
        SPARE.with(|s| s.borrow().len())
    }

    #[test]
    fn a_small_command_comes_back_empty_and_a_large_one_is_not_kept() {
        SPARE.with(|s| s.borrow_mut().clear());
        {
            let mut cmd = SpareCmd::with_capacity(4, 64);
            cmd.arg("EVALSHA").arg("abc").arg(1).arg("k");
        }
        assert_eq!(spare_count(), 1);
        let mut again = SpareCmd::with_capacity(4, 64);
        assert_eq!(spare_count(), 0, "the kept command is reused");
        assert_eq!(again.args_iter().count(), 0, "and comes back empty");
        again.arg("GET").arg("k");
        assert_eq!(again.get_packed_command(), b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
        drop(again);
        drop(SpareCmd::with_capacity(4, KEEP_BYTES + 1));
        assert_eq!(spare_count(), 1, "a large command is freed, not kept");
    }

    #[test]
    fn the_list_stays_short() {
        SPARE.with(|s| s.borrow_mut().clear());
        let many: Vec<SpareCmd> = (0..KEEP + 8).map(|_| SpareCmd::with_capacity(2, 16)).collect();
        drop(many);
        assert_eq!(spare_count(), KEEP);
    }
}
