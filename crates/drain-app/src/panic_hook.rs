//! The panic hook: the default hook's report (thread, location, message, then the
//! backtrace or, on the first panic, the hint to get one), with every configured
//! secret masked in the message. A panic message can quote anything, a URL with its
//! password included, and secrets are redacted everywhere (docs/operations.md).

use std::backtrace::{Backtrace, BacktraceStatus};
use std::io::{self, Write};
use std::panic::{Location, PanicHookInfo};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::scrub;

/// The secret parts of the configuration (see `Config::secret_parts`), once loaded.
static SECRETS: OnceLock<Vec<String>> = OnceLock::new();

/// Whether no panic has been reported yet (the backtrace hint is shown once).
static FIRST: AtomicBool = AtomicBool::new(true);

/// Install the hook, first thing in `main`. Until [`set_secrets`] runs, messages
/// get the pattern redaction only (URL passwords, `SharedAccessKey=`, …).
pub(crate) fn install() {
    std::panic::set_hook(Box::new(|info: &PanicHookInfo<'_>| {
        let secrets = SECRETS.get().map_or(&[][..], Vec::as_slice);
        let thread = std::thread::current();
        let report = Report {
            thread: thread.name().unwrap_or("<unnamed>"),
            location: info.location(),
            message: info.payload_as_str().unwrap_or("Box<dyn Any>"),
            first: FIRST.swap(false, Ordering::Relaxed),
        };
        // RUST_BACKTRACE (or RUST_LIB_BACKTRACE) decides, as for the default hook.
        let backtrace = Backtrace::capture();
        let _ = report.write(&mut io::stderr().lock(), &backtrace, secrets);
    }));
}

/// Mask these in every later panic message: the clear secret parts of the loaded
/// configuration. Only the first call counts.
pub(crate) fn set_secrets(secrets: Vec<String>) {
    let _ = SECRETS.set(secrets);
}

/// One panic, as the hook reports it.
struct Report<'a> {
    thread: &'a str,
    location: Option<&'a Location<'a>>,
    message: &'a str,
    /// The first panic of the process: only it shows the backtrace hint.
    first: bool,
}

impl Report<'_> {
    /// Write the report as the default hook would, with `secrets` masked in the message.
    fn write(&self, out: &mut dyn Write, backtrace: &Backtrace, secrets: &[String]) -> io::Result<()> {
        let at = self.location.map_or_else(String::new, |l| format!(" at {l}"));
        writeln!(out, "\nthread '{}' panicked{at}:\n{}", self.thread, scrub(self.message, secrets))?;
        match backtrace.status() {
            BacktraceStatus::Captured => writeln!(out, "stack backtrace:\n{backtrace}"),
            BacktraceStatus::Disabled if self.first => {
                writeln!(out, "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace")
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn written(report: &Report<'_>, backtrace: &Backtrace, secrets: &[String]) -> String {
        let mut out = Vec::new();
        report.write(&mut out, backtrace, secrets).expect("write to a Vec");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn secrets_are_masked_and_the_rest_is_the_default_report() {
        let mut secrets = Secret::url("redis://drain:Redis-Pw%2F9@10.0.0.5:6379").parts();
        secrets.extend(Secret::url("amqp://guest:Amqp-Pw-7@rabbit:5672/requests").parts());
        secrets.extend(
            Secret::url(
                "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=SasKey+5x9=;EntityPath=q",
            )
            .parts(),
        );
        let location = Location::caller();
        let message = "cannot use redis://drain:Redis-Pw%2F9@10.0.0.5:6379 (password Redis-Pw/9), \
                       source amqp://guest:Amqp-Pw-7@rabbit:5672/requests, key SasKey+5x9=";
        let report = Report { thread: "tokio-runtime-worker", location: Some(location), message, first: true };
        let text = written(&report, &Backtrace::disabled(), &secrets);
        for secret in ["Redis-Pw", "Amqp-Pw-7", "SasKey"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(
            text,
            format!(
                "\nthread 'tokio-runtime-worker' panicked at {location}:\n\
                 cannot use redis://drain:***@10.0.0.5:6379 (password ***), \
                 source amqp://guest:***@rabbit:5672/requests, key ***\n\
                 note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n"
            )
        );
        assert!(text.contains(&format!("src/panic_hook.rs:{}:", location.line())), "the location is kept: {text}");
    }

    #[test]
    fn the_hint_shows_once_and_a_captured_backtrace_is_printed() {
        let later = Report { thread: "main", location: None, message: "boom", first: false };
        assert_eq!(written(&later, &Backtrace::disabled(), &[]), "\nthread 'main' panicked:\nboom\n");
        let text = written(&later, &Backtrace::force_capture(), &[]);
        assert!(text.starts_with("\nthread 'main' panicked:\nboom\nstack backtrace:\n"), "{text}");
        assert!(!text.contains("RUST_BACKTRACE=1"), "{text}");
    }

    #[test]
    fn unconfigured_urls_are_still_redacted() {
        let report = Report { thread: "main", location: None, message: "bad redis://u:Loose-Pw@h", first: false };
        assert_eq!(written(&report, &Backtrace::disabled(), &[]), "\nthread 'main' panicked:\nbad redis://u:***@h\n");
    }
}
