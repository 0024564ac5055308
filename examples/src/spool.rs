//! A spool directory as a peek-lock queue ([`SpoolSource`], drain-core's
//! `MessageSource`) and as a target ([`SpoolWriter`], a `Submitter` that puts each
//! message into a spool), shared by the processes of one machine.
//!
//! A spool `dir` holds one file per message:
//!
//! * `dir/ready/<name>.<count>`: waiting; `count` is how many times it was delivered;
//! * `dir/locked/<name>.<count>.<until>.<holder>`: received and locked until `until`
//!   (milliseconds since the Unix epoch) by `holder` (a process id and a sequence
//!   number), so that every holding has a path of its own;
//! * `dir/dead`: a spool of its own, holding what was dead-lettered.
//!
//! Every move is one `rename`, so of several processes that race for a file exactly
//! one gets it; a lock that ran out is moved back to `ready` (a delivery counted) by
//! whichever receiver finds it first. Writers write a hidden file and rename it into
//! `ready`, so no receiver reads half a message. A message file is its headers, one
//! `name: value` per line, a blank line, then the body:
//!
//! ```text
//! id: string:order-17
//! correlation-id: ulong:42
//! content-type: application/json
//!
//! {"order": 17}
//! ```
//!
//! The spool keeps the message id and correlation id (strings and numbers), the
//! content type, the subject, reply-to and the body; a writer refuses a message that
//! carries anything else rather than drop it. Files are read and moved inline on the
//! caller's task: they are small and local. They are not synced to disk: a machine
//! that loses power may lose a message the writer accepted.

use std::collections::HashMap;
use std::fs;
use std::io::{self, ErrorKind as IoKind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use drain_core::ports::{
    Capabilities, Delivery, DeliveryHandle, Message, MessageId, MessageSource, SubmitContext, Submitter,
};
use drain_core::{ErrorKind, PortError};

/// Sequence numbers of this process's holdings and written files.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// How often an empty spool is looked at again while a receive waits.
const POLL: Duration = Duration::from_millis(20);

/// A spool directory as a peek-lock queue: see the module docs.
#[derive(Debug)]
pub struct SpoolSource {
    dir: PathBuf,
    lock: Duration,
    /// This process's deliveries: handle -> locked path.
    held: Mutex<HashMap<u64, PathBuf>>,
}

/// A spool directory as a target: every submitted message becomes a file in `ready`.
#[derive(Debug, Clone)]
pub struct SpoolWriter {
    dir: PathBuf,
}

/// A message file's name, parsed: `<name>.<count>` in `ready`, with `.<until>.<holder>`
/// in `locked`.
struct Parsed<'a> {
    name: &'a str,
    count: u32,
    until: u64,
}

fn parse(file: &str) -> Option<Parsed<'_>> {
    let mut parts = file.split('.');
    let (name, count) = (parts.next()?, parts.next()?.parse().ok()?);
    let until = parts.next().map_or(Some(0), |u| u.parse().ok())?;
    (!name.is_empty()).then_some(Parsed { name, count, until })
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn failed(what: &str, path: &Path, e: &io::Error) -> PortError {
    PortError::new(ErrorKind::Unavailable, format!("spool: cannot {what} {}: {e}", path.display()))
}

/// The names in `dir` that are message files (hidden files are being written), sorted.
fn files(dir: &Path) -> Result<Vec<String>, PortError> {
    let entries = fs::read_dir(dir).map_err(|e| failed("list", dir, &e))?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.') && parse(n).is_some())
        .collect();
    names.sort();
    Ok(names)
}

impl SpoolSource {
    /// The queue in `dir` (created if missing), each delivery locked for `lock`.
    ///
    /// # Errors
    /// When the directories cannot be created.
    pub fn new(dir: impl Into<PathBuf>, lock: Duration) -> io::Result<SpoolSource> {
        let dir = dir.into();
        for sub in ["ready", "locked", "dead/ready", "dead/locked"] {
            fs::create_dir_all(dir.join(sub))?;
        }
        Ok(SpoolSource { dir, lock, held: Mutex::new(HashMap::new()) })
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<u64, PathBuf>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Move locks that ran out back to `ready`, each counted as a delivery. A file
    /// another process moved first is left to it.
    fn unlock_expired(&self) -> Result<(), PortError> {
        let now = now_ms();
        for file in files(&self.dir.join("locked"))? {
            if let Some(p) = parse(&file).filter(|p| p.until <= now) {
                let back = self.dir.join("ready").join(format!("{}.{}", p.name, p.count + 1));
                let _ = fs::rename(self.dir.join("locked").join(&file), back);
            }
        }
        Ok(())
    }

    /// Lock up to `max` ready files; what this call got.
    fn lock_ready(&self, max: usize) -> Result<Vec<Delivery>, PortError> {
        let mut out = Vec::new();
        let until = now_ms() + u64::try_from(self.lock.as_millis()).unwrap_or(u64::MAX / 2);
        for file in files(&self.dir.join("ready"))? {
            if out.len() >= max {
                break;
            }
            let Some(p) = parse(&file) else { continue };
            let seq = SEQ.fetch_add(1, Ordering::Relaxed);
            let locked = format!("{}.{}.{until}.{}-{seq}", p.name, p.count, std::process::id());
            let locked = self.dir.join("locked").join(locked);
            match fs::rename(self.dir.join("ready").join(&file), &locked) {
                Ok(()) => {}
                // Another receiver took it.
                Err(e) if e.kind() == IoKind::NotFound => continue,
                Err(e) => return Err(failed("lock", &locked, &e)),
            }
            let bytes = match fs::read(&locked) {
                Ok(bytes) => bytes,
                Err(e) => {
                    // Give it back as it was; what this call locked before it is returned.
                    let _ = fs::rename(&locked, self.dir.join("ready").join(&file));
                    return if out.is_empty() { Err(failed("read", &locked, &e)) } else { Ok(out) };
                }
            };
            self.held().insert(seq, locked);
            out.push(Delivery { handle: DeliveryHandle(seq), message: decode(&bytes), delivery_count: p.count });
        }
        Ok(out)
    }

    /// Take `handle`'s locked file out of this process's deliveries, or say why not:
    /// unknown, settled already, or its lock ran out (then it goes back to `ready`).
    fn settle(&self, handle: DeliveryHandle) -> Result<(PathBuf, String, u32), PortError> {
        let lost = |why: &str| PortError::new(ErrorKind::LockLost, format!("spool delivery {}: {why}", handle.0));
        let path = self.held().remove(&handle.0).ok_or_else(|| lost("unknown or settled already"))?;
        let file = path.file_name().and_then(|f| f.to_str()).unwrap_or_default();
        let p = parse(file).ok_or_else(|| lost("not a locked message file"))?;
        let (name, count) = (p.name.to_owned(), p.count);
        if p.until <= now_ms() {
            let _ = fs::rename(&path, self.dir.join("ready").join(format!("{name}.{}", count + 1)));
            return Err(lost("its lock ran out"));
        }
        Ok((path, name, count))
    }

    /// Move a settled delivery to `to`: `NotFound` means another receiver found its
    /// lock run out and took it back.
    fn move_to(path: &Path, to: &Path) -> Result<(), PortError> {
        fs::rename(path, to).map_err(|e| match e.kind() {
            IoKind::NotFound => PortError::new(ErrorKind::LockLost, "spool: the lock ran out and was taken back"),
            _ => failed("move", path, &e),
        })
    }
}

#[drain_core::async_trait]
impl MessageSource for SpoolSource {
    fn capabilities(&self) -> Capabilities {
        Capabilities { lock_renewal: false, release: true }
    }

    async fn receive(&self, max: usize, max_wait: Duration) -> Result<Vec<Delivery>, PortError> {
        let until = tokio::time::Instant::now() + max_wait;
        loop {
            self.unlock_expired()?;
            let got = self.lock_ready(max)?;
            if !got.is_empty() || max == 0 || tokio::time::Instant::now() >= until {
                return Ok(got);
            }
            tokio::time::sleep(POLL.min(until.saturating_duration_since(tokio::time::Instant::now()))).await;
        }
    }

    async fn complete(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        let (path, _, _) = self.settle(handle)?;
        fs::remove_file(&path).map_err(|e| match e.kind() {
            IoKind::NotFound => PortError::new(ErrorKind::LockLost, "spool: the lock ran out and was taken back"),
            _ => failed("remove", &path, &e),
        })
    }

    async fn abandon(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        let (path, name, count) = self.settle(handle)?;
        Self::move_to(&path, &self.dir.join("ready").join(format!("{name}.{}", count + 1)))
    }

    async fn release(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        let (path, name, count) = self.settle(handle)?;
        Self::move_to(&path, &self.dir.join("ready").join(format!("{name}.{count}")))
    }

    async fn dead_letter(&self, handle: DeliveryHandle, reason: &str, description: &str) -> Result<(), PortError> {
        let (path, name, count) = self.settle(handle)?;
        // The reason goes to the log; the dead-letter spool keeps the message as it was.
        eprintln!("spool: dead-lettered {name}: {reason}: {description}");
        Self::move_to(&path, &self.dir.join("dead/ready").join(format!("{name}.{count}")))
    }

    async fn renew_lock(&self, _handle: DeliveryHandle) -> Result<Duration, PortError> {
        Err(PortError::new(ErrorKind::Unsupported, "a spool lock lasts its fixed time; it is not renewed"))
    }
}

impl SpoolWriter {
    /// A target writing into the spool `dir` (created if missing).
    ///
    /// # Errors
    /// When the directory cannot be created.
    pub fn new(dir: impl Into<PathBuf>) -> io::Result<SpoolWriter> {
        let dir = dir.into();
        fs::create_dir_all(dir.join("ready"))?;
        Ok(SpoolWriter { dir })
    }

    /// Every message in the spool's `ready` directory, oldest first (for tests and tools).
    ///
    /// # Errors
    /// When the directory or a file cannot be read.
    pub fn ready(&self) -> Result<Vec<Message>, PortError> {
        let dir = self.dir.join("ready");
        let read = |f: &String| fs::read(dir.join(f)).map(|b| decode(&b)).map_err(|e| failed("read", &dir, &e));
        files(&dir)?.iter().map(read).collect()
    }
}

#[drain_core::async_trait]
impl Submitter for SpoolWriter {
    async fn submit(&self, message: &Message, ctx: &SubmitContext<'_>) -> Result<(), PortError> {
        let mut bytes = encode(message)?;
        if let Some(fence) = ctx.fence {
            // Where it came from, for whoever reads the spool: the tick's fence.
            bytes.splice(0..0, format!("fence: {}\n", fence.number()).into_bytes());
        }
        let name = format!("{:020}-{}-{}", now_ms(), std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        let (hidden, ready) =
            (self.dir.join("ready").join(format!(".{name}")), self.dir.join("ready").join(name + ".0"));
        fs::write(&hidden, bytes).map_err(|e| failed("write", &hidden, &e))?;
        fs::rename(&hidden, &ready).map_err(|e| failed("publish", &ready, &e))
    }
}

/// `string:<text>` or `ulong:<number>`; other id types are refused.
fn id_text(id: &MessageId) -> Result<String, PortError> {
    match id {
        MessageId::String(s) => Ok(format!("string:{s}")),
        MessageId::Ulong(n) => Ok(format!("ulong:{n}")),
        other => Err(PortError::new(ErrorKind::Unsupported, format!("a spool keeps no {} ids", other.type_name()))),
    }
}

fn id_of(text: &str) -> Option<MessageId> {
    match text.split_once(':')? {
        ("string", s) => Some(MessageId::String(s.to_owned())),
        ("ulong", n) => n.parse().ok().map(MessageId::Ulong),
        _ => None,
    }
}

/// The file of `message`, or why the spool cannot keep it.
fn encode(message: &Message) -> Result<Vec<u8>, PortError> {
    let kept = {
        let mut m = Message::default();
        m.message_id = message.message_id.clone();
        m.correlation_id = message.correlation_id.clone();
        m.content_type = message.content_type.clone();
        m.subject = message.subject.clone();
        m.reply_to = message.reply_to.clone();
        m.body = message.body.clone();
        m
    };
    if kept != *message {
        let why = "the message carries headers a spool does not keep (it keeps ids, content type, subject, reply-to)";
        return Err(PortError::new(ErrorKind::Unsupported, why));
    }
    let ids = [("id", &message.message_id), ("correlation-id", &message.correlation_id)];
    let mut headers = Vec::new();
    for (name, id) in ids.into_iter().filter_map(|(n, id)| Some((n, id.as_ref()?))) {
        headers.push((name, id_text(id)?));
    }
    let texts =
        [("content-type", &message.content_type), ("subject", &message.subject), ("reply-to", &message.reply_to)];
    headers.extend(texts.into_iter().filter_map(|(n, v)| Some((n, v.clone()?))));
    if headers.iter().any(|(_, v)| v.contains(['\n', '\r'])) {
        return Err(PortError::new(ErrorKind::Unsupported, "a spool header cannot hold a line break"));
    }
    let head: String = headers.iter().map(|(name, value)| format!("{name}: {value}\n")).collect();
    Ok([head.into_bytes(), b"\n".to_vec(), message.body.clone()].concat())
}

/// The message in a spool file. A file without the blank line after its headers is
/// all body and has no id (the tick dead-letters a message without an id).
fn decode(bytes: &[u8]) -> Message {
    // `end` is the blank line's index: the first byte when there are no headers.
    let end = if bytes.first() == Some(&b'\n') {
        Some(0)
    } else {
        bytes.windows(2).position(|w| w == b"\n\n").map(|i| i + 1)
    };
    let Some(end) = end else {
        return {
            let mut m = Message::default();
            m.body = bytes.to_vec();
            m
        };
    };
    let mut message = {
        let mut m = Message::default();
        m.body = bytes[end + 1..].to_vec();
        m
    };
    for line in String::from_utf8_lossy(&bytes[..end]).lines() {
        let Some((name, value)) = line.split_once(": ") else { continue };
        let value = value.to_owned();
        match name {
            "id" => message.message_id = id_of(&value),
            "correlation-id" => message.correlation_id = id_of(&value),
            "content-type" => message.content_type = Some(value),
            "subject" => message.subject = Some(value),
            "reply-to" => message.reply_to = Some(value),
            _ => {}
        }
    }
    message
}

#[cfg(test)]
mod tests {
    use drain_core::ports::PropertyValue;

    use super::*;

    #[track_caller]
    fn round_trip(message: &Message) {
        let bytes = encode(message).expect("kept");
        assert_eq!(decode(&bytes), *message, "{}", String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn what_a_spool_keeps_comes_back_as_it_was() {
        let id = |s: &str| Some(MessageId::String(s.to_owned()));
        round_trip(&{
            let mut m = Message::default();
            m.message_id = id("a");
            m.body = b"x".to_vec();
            m
        });
        round_trip(&{
            let mut m = Message::default();
            m.message_id = Some(MessageId::Ulong(42));
            m.correlation_id = id("c:1");
            m
        });
        round_trip(&{
            let mut m = Message::default();
            m.message_id = id("b");
            m.subject = Some("a: b".to_owned());
            m.body = b"\n\nx\n".to_vec();
            m
        });
        round_trip(&{
            let mut m = Message::default();
            m.body = b"no headers".to_vec();
            m
        });
        round_trip(&Message::default());
    }

    #[test]
    fn what_a_spool_cannot_keep_is_refused_not_dropped() {
        let refused = |m: Message| assert_eq!(encode(&m).map_err(|e| e.kind), Err(ErrorKind::Unsupported), "{m:?}");
        refused({
            let mut m = Message::default();
            m.message_id = Some(MessageId::Uuid([1; 16]));
            m
        });
        refused({
            let mut m = Message::default();
            m.subject = Some("two\nlines".to_owned());
            m
        });
        refused({
            let mut m = Message::default();
            m.group_id = Some("g".to_owned());
            m
        });
        let properties = [("k".to_owned(), PropertyValue::Long(1))].into();
        refused({
            let mut m = Message::default();
            m.properties = properties;
            m
        });
    }

    #[test]
    fn a_file_without_headers_is_all_body_and_has_no_id() {
        assert_eq!(decode(b"id: string:x"), {
            let mut m = Message::default();
            m.body = b"id: string:x".to_vec();
            m
        });
        assert_eq!(decode(b"fence: 3\nid: ulong:7\n\nx").message_id, Some(MessageId::Ulong(7)));
    }

    #[test]
    fn file_names() {
        let check = |file: &str, expected: Option<(&str, u32, u64)>| {
            assert_eq!(parse(file).map(|p| (p.name, p.count, p.until)), expected, "{file}");
        };
        check("0001-2-3.0", Some(("0001-2-3", 0, 0)));
        check("0001-2-3.4.1700000000000.99-1", Some(("0001-2-3", 4, 1_700_000_000_000)));
        check("0001-2-3", None);
        check(".0001-2-3", None);
        check("0001.x", None);
        check("a.1.soon.h", None);
    }
}
