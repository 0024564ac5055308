//! drain's Redis key layout, Cluster-safe and collision-free.
//!
//! | what | key |
//! |---|---|
//! | a queue's lease ([`LeaseName::queue`]) | `<prefix>:lease:{<queue>}` holds the token; `<prefix>:fence:{<queue>}` the fence counter |
//! | an owner's claim ([`LeaseName::owner`]) | `<prefix>:claim:{<owner>}` holds the token; `<prefix>:claim-fence:{<owner>}` the fence counter |
//! | an owner's waiters (release wake-up) | `<prefix>:waiters:{<owner>}`, a list of wake channels |
//! | an owner's drain stamps | `<prefix>:drain-start:{<owner>}` holds the token of the turn that took the claim, `<prefix>:drained:{<owner>}` marks the latest drain (both keep time in their TTL) |
//! | a message's claim | `<prefix>:msg:{<queue>}:<id>` holds `pending:<token>` or `done:<token>` |
//! | an instance's wake channel (pub/sub, not a key) | `<prefix>:wake:<instance>` |
//! | a resource's fence mark ([`KeySpace::mark`]) | `<prefix>:mark:{<tag>}:<resource>`, in the resource key's hash slot |
//!
//! A string message id appears as itself (encoded); an id of another type carries
//! its type, `ulong:<n>`, `uuid:<32 hex>` or `binary:<encoded bytes>`: an encoded
//! name never holds a `:`, so the string `"42"` and the number 42 are two keys.
//!
//! Every key that a multi-key operation touches carries the same hash tag
//! (`{<queue>}` or `{<owner>}`), so a script never crosses slots. Names are encoded
//! so that no name can break out of its hash tag or collide with another name: ASCII
//! letters, digits, `-`, `_` and `.` stay as they are, every other byte becomes
//! `%XX` (uppercase hex). The encoding is injective, so distinct names always give
//! distinct keys.

use std::fmt::Write as _;

use drain_core::ports::{LeaseKind, LeaseName, MessageId};
use redis::cluster_routing::Slot;

/// Encode a queue, owner or message name for use inside a key.
///
/// An empty name encodes as `%` alone, which no non-empty name can produce
/// (a `%` is always followed by two hex digits), so it cannot collide either.
#[must_use]
pub fn encode_name(name: &[u8]) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    push_name(&mut out, name);
    out
}

/// [`encode_name`], appended to `out`: the keys of a batch share their stem and
/// are built without an intermediate string each.
fn push_name(out: &mut String, name: &[u8]) {
    // Every piece is ASCII, so the conversion borrows and never replaces.
    encode_pieces(name, |piece| out.push_str(&String::from_utf8_lossy(piece)));
}

/// The encoding of `name` as pieces: runs of plain bytes as they are, and `%XX`
/// for every other byte.
fn encode_pieces(name: &[u8], mut emit: impl FnMut(&[u8])) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    if name.is_empty() {
        emit(b"%");
        return;
    }
    let mut rest = name;
    while let Some(&first) = rest.first() {
        let run = rest.iter().take_while(|&&b| plain(b)).count();
        if run > 0 {
            emit(&rest[..run]);
            rest = &rest[run..];
        } else {
            emit(&[b'%', HEX[usize::from(first >> 4)], HEX[usize::from(first & 0xf)]]);
            rest = &rest[1..];
        }
    }
}

/// A lease's key (`<prefix>:<kind>:{<name>}`) written straight into a command's
/// arguments, without a string of its own: the lease bench fell under its guard
/// without it (docs/performance.md). The same bytes as [`KeySpace::lease`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseKeyArg<'a> {
    prefix: &'a str,
    kind: &'static str,
    name: &'a [u8],
}

impl LeaseKeyArg<'_> {
    /// The key's length when no byte of the name needs escaping.
    pub(crate) fn plain_len(&self) -> usize {
        self.prefix.len() + self.kind.len() + self.name.len() + 4
    }

    /// The key in `buf` when it fits and no byte of the name needs escaping (the
    /// usual case), so that it is written into the command at once.
    fn plain_into<'b>(&self, buf: &'b mut [u8; 256]) -> Option<&'b [u8]> {
        // An empty name is written `%` (see `encode_pieces`).
        if self.name.is_empty() || self.plain_len() > buf.len() || !self.name.iter().all(|&b| plain(b)) {
            return None;
        }
        let mut at = 0;
        for part in [self.prefix.as_bytes(), b":", self.kind.as_bytes(), b":{", self.name, b"}"] {
            buf[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        Some(&buf[..at])
    }
}

impl redis::ToRedisArgs for LeaseKeyArg<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        use std::io::Write as _;
        if let Some(key) = self.plain_into(&mut [0u8; 256]) {
            out.write_arg(key);
            return;
        }
        let mut w = out.writer_for_next_arg();
        // Writing into the command's buffer cannot fail.
        let _ = w.write_all(self.prefix.as_bytes());
        let _ = w.write_all(b":");
        let _ = w.write_all(self.kind.as_bytes());
        let _ = w.write_all(b":{");
        encode_pieces(self.name, |piece| {
            let _ = w.write_all(piece);
        });
        let _ = w.write_all(b"}");
    }
}

/// The kinds of a lease's two keys, the token's and the fence's: `lease` and
/// `fence` for a queue, `claim` and `claim-fence` for an owner, `job` and `job-fence`
/// for a job.
fn lease_kinds(lease: &LeaseName) -> (&'static str, &'static str) {
    match lease.kind() {
        LeaseKind::Owner => ("claim", "claim-fence"),
        LeaseKind::Job => ("job", "job-fence"),
        _ => ("lease", "fence"),
    }
}

/// A byte that stands for itself in a key.
fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')
}

/// Decode what [`encode_name`] produced; `None` for anything it could not have produced.
#[must_use]
pub fn decode_name(encoded: &str) -> Option<Vec<u8>> {
    match encoded {
        "%" => return Some(Vec::new()),
        // The empty name is `%`; an empty tag is no name (and no hash tag at all).
        "" => return None,
        _ => {}
    }
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = encoded.get(i + 1..i + 3)?;
            if !hex.bytes().all(|h| h.is_ascii_digit() || (b'A'..=b'F').contains(&h)) {
                return None;
            }
            let v = u8::from_str_radix(hex, 16).ok()?;
            if v.is_ascii_alphanumeric() || matches!(v, b'-' | b'_' | b'.') {
                return None; // not canonical
            }
            out.push(v);
            i += 3;
        } else if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.') {
            out.push(b);
            i += 1;
        } else {
            return None;
        }
    }
    Some(out)
}

/// The two keys of one lease; both share the lease's hash slot.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseKeys {
    /// Holds the holder's token.
    pub lease: String,
    /// The fencing counter.
    pub fence: String,
}

/// Builds every key drain uses under one prefix (`DRAIN_KEY_PREFIX`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpace {
    prefix: String,
}

impl KeySpace {
    /// A key space under `prefix`.
    #[must_use]
    pub fn new(prefix: impl Into<String>) -> Self {
        KeySpace { prefix: prefix.into() }
    }

    /// The prefix.
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The keys of `lease`: `lease:`/`fence:` for a queue, `claim:`/`claim-fence:`
    /// for an owner.
    #[must_use]
    pub fn lease(&self, lease: &LeaseName) -> LeaseKeys {
        let tag = encode_name(lease.name().as_bytes());
        let (held, fence) = lease_kinds(lease);
        LeaseKeys { lease: self.tagged(held, &tag), fence: self.tagged(fence, &tag) }
    }

    /// [`Self::lease`]'s two keys as command arguments: the token's, then the fence's.
    pub(crate) fn lease_args<'a>(&'a self, lease: &'a LeaseName) -> [LeaseKeyArg<'a>; 2] {
        let name = lease.name().as_bytes();
        let (held, fence) = lease_kinds(lease);
        [
            LeaseKeyArg { prefix: &self.prefix, kind: held, name },
            LeaseKeyArg { prefix: &self.prefix, kind: fence, name },
        ]
    }

    /// `<prefix>:<kind>:{<tag>}`.
    fn tagged(&self, kind: &str, tag: &str) -> String {
        let mut key = String::with_capacity(self.prefix.len() + kind.len() + tag.len() + 4);
        key.push_str(&self.prefix);
        key.push(':');
        key.push_str(kind);
        key.push_str(":{");
        key.push_str(tag);
        key.push('}');
        key
    }

    /// The value `key` written beside `lease` by a fenced write
    /// (`FencedWrites`): `<prefix>:<kind>-value:{<name>}:<key>`, in the lease's hash
    /// slot, so one script compares the lease's fence and writes it.
    #[must_use]
    pub fn fenced_value(&self, lease: &LeaseName, key: &str) -> String {
        let (held, _) = lease_kinds(lease);
        let mut out = self.tagged(&format!("{held}-value"), &encode_name(lease.name().as_bytes()));
        out.push(':');
        out.push_str(&encode_name(key.as_bytes()));
        out
    }

    /// The owner claim key `<prefix>:claim:{<owner>}` that admission peeks by default.
    #[must_use]
    pub fn owner_claim(&self, owner: &str) -> String {
        format!("{}:claim:{{{}}}", self.prefix, encode_name(owner.as_bytes()))
    }

    /// The owner's waiter list `<prefix>:waiters:{<owner>}`, in the claim's hash slot:
    /// the wake channels of instances waiting for the owner's claim to be released
    /// (oldest first). A claim release pops one and publishes the owner on it.
    #[must_use]
    pub fn owner_waiters(&self, owner: &str) -> String {
        format!("{}:waiters:{{{}}}", self.prefix, encode_name(owner.as_bytes()))
    }

    /// The owner's drain keys `<prefix>:drain-start:{<owner>}` (the token of the turn
    /// that took the claim, expiring the marks' time to live after it did) and
    /// `<prefix>:drained:{<owner>}` (the drain stamp: expiring the marks' time to live
    /// after the latest drained turn took the claim), in the claim's hash slot.
    #[must_use]
    pub fn owner_drain(&self, owner: &str) -> (String, String) {
        let name = encode_name(owner.as_bytes());
        (format!("{}:drain-start:{{{name}}}", self.prefix), format!("{}:drained:{{{name}}}", self.prefix))
    }

    /// The pub/sub channel `<prefix>:wake:<instance>` on which `instance` hears that
    /// an owner it waits for was released. A channel, not a key (no hash tag: plain
    /// `PUBLISH` reaches every node of a Cluster); the ACL grants `&<prefix>:wake:*`.
    #[must_use]
    pub fn wake_channel(&self, instance: &str) -> String {
        format!("{}:wake:{}", self.prefix, encode_name(instance.as_bytes()))
    }

    /// The per-message claim key `<prefix>:msg:{<queue>}:<id>`, the id typed (see
    /// the module docs).
    #[must_use]
    pub fn message_claim(&self, queue: &str, id: &MessageId) -> String {
        let mut key = self.message_claim_stem(queue);
        push_id(&mut key, id);
        key
    }

    /// The claim keys of a batch of one queue, as [`Self::message_claim`] builds
    /// each: the queue's part is encoded once.
    #[must_use]
    pub fn message_claims<'a>(&self, queue: &str, ids: impl IntoIterator<Item = &'a MessageId>) -> Vec<String> {
        let stem = self.message_claim_stem(queue);
        ids.into_iter()
            .map(|id| {
                let mut key = String::with_capacity(stem.len() + 40);
                key.push_str(&stem);
                push_id(&mut key, id);
                key
            })
            .collect()
    }

    /// `<prefix>:msg:{<queue>}:`, what every claim key of the queue starts with.
    fn message_claim_stem(&self, queue: &str) -> String {
        let mut stem = String::with_capacity(self.prefix.len() + queue.len() + 48);
        stem.push_str(&self.prefix);
        stem.push_str(":msg:{");
        push_name(&mut stem, queue.as_bytes());
        stem.push_str("}:");
        stem
    }

    /// What `key` is in this key space; `None` for a key of another prefix or shape.
    #[must_use]
    pub fn parse(&self, key: &str) -> Option<KeyKind> {
        let rest = key.strip_prefix(&self.prefix)?.strip_prefix(':')?;
        let (kind, rest) = rest.split_once(':')?;
        let rest = rest.strip_prefix('{')?;
        let (tag, tail) = rest.split_once('}')?;
        let name = decode_name(tag)?;
        match (kind, tail) {
            ("lease", "") => Some(KeyKind::Lease { queue: name }),
            ("fence", "") => Some(KeyKind::Fence { queue: name }),
            ("claim", "") => Some(KeyKind::OwnerClaim { owner: name }),
            ("claim-fence", "") => Some(KeyKind::OwnerFence { owner: name }),
            ("waiters", "") => Some(KeyKind::OwnerWaiters { owner: name }),
            ("job", "") => Some(KeyKind::Job { job: name }),
            ("job-fence", "") => Some(KeyKind::JobFence { job: name }),
            ("msg", tail) => {
                let id = decode_id(tail.strip_prefix(':')?)?;
                Some(KeyKind::MessageClaim { queue: name, message_id: id })
            }
            _ => None,
        }
    }

    /// The fence mark of `resource` (a key the embedder writes with
    /// [`RedisStore::fenced_write`](crate::RedisStore::fenced_write), or any name
    /// given to [`FenceMarks::admit`](drain_core::ports::FenceMarks::admit)):
    /// `<prefix>:mark:{<tag>}:<resource>`, the resource as it is.
    ///
    /// The tag puts the mark into the hash slot of `resource` taken as a key, so one
    /// script can check the mark and write the key on a Cluster: the key's own hash
    /// tag when it has one (`orders:{42}` gives `{42}`); else the whole key when it
    /// holds no `}` and is not empty (a Cluster hashes such a key whole:
    /// `orders:42` gives `{orders:42}`); else (a key that a `}` keeps from being a
    /// tag, the empty key) the smallest decimal number in the key's slot. The
    /// resource follows the tag whole, so distinct resources never share a mark
    /// (the tag ends at the first `}`, and the tags hold none). Marks stay under the
    /// prefix, inside the ACL's `~<prefix>:*`; a prefix holding `{` or `}` would put
    /// every mark into the prefix's slot (the fenced operations refuse it on a
    /// Cluster).
    #[must_use]
    pub fn mark(&self, resource: &str) -> String {
        let tag = slot_tag(resource);
        let mut key = String::with_capacity(self.prefix.len() + tag.len() + resource.len() + 9);
        key.push_str(&self.prefix);
        key.push_str(":mark:{");
        key.push_str(&tag);
        key.push_str("}:");
        key.push_str(resource);
        key
    }

    /// A SCAN pattern matching every key of this prefix (`*` and friends escaped).
    #[must_use]
    pub fn scan_pattern(&self) -> String {
        let mut p = String::with_capacity(self.prefix.len() + 2);
        for c in self.prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                p.push('\\');
            }
            p.push(c);
        }
        p.push_str(":*");
        p
    }
}

/// What a key of drain's layout is, with its decoded names (see [`KeySpace::parse`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyKind {
    /// A queue's single-flight lease.
    Lease {
        /// Queue name bytes.
        queue: Vec<u8>,
    },
    /// A queue's fencing counter.
    Fence {
        /// Queue name bytes.
        queue: Vec<u8>,
    },
    /// An owner's claim.
    OwnerClaim {
        /// Owner name bytes.
        owner: Vec<u8>,
    },
    /// An owner claim's fencing counter.
    OwnerFence {
        /// Owner name bytes.
        owner: Vec<u8>,
    },
    /// An owner's waiter list (wake channels of instances waiting for its release).
    OwnerWaiters {
        /// Owner name bytes.
        owner: Vec<u8>,
    },
    /// A job's lease.
    Job {
        /// Job name bytes.
        job: Vec<u8>,
    },
    /// A job lease's fencing counter.
    JobFence {
        /// Job name bytes.
        job: Vec<u8>,
    },
    /// A per-message claim.
    MessageClaim {
        /// Queue name bytes.
        queue: Vec<u8>,
        /// The message id, with its type.
        message_id: MessageId,
    },
}

/// A message id as the tail of its claim key.
fn push_id(out: &mut String, id: &MessageId) {
    match id {
        MessageId::String(s) => push_name(out, s.as_bytes()),
        MessageId::Ulong(n) => {
            let _ = write!(out, "ulong:{n}");
        }
        MessageId::Uuid(b) => {
            out.push_str("uuid:");
            for byte in b {
                let _ = write!(out, "{byte:02x}");
            }
        }
        MessageId::Binary(b) => {
            out.push_str("binary:");
            push_name(out, b);
        }
    }
}

/// What [`push_id`] wrote; `None` for anything else.
fn decode_id(tail: &str) -> Option<MessageId> {
    let Some((ty, rest)) = tail.split_once(':') else {
        return String::from_utf8(decode_name(tail)?).ok().map(MessageId::String);
    };
    match ty {
        "ulong" if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) => {
            let n: u64 = rest.parse().ok()?;
            (n.to_string() == rest).then_some(MessageId::Ulong(n))
        }
        "uuid" if rest.len() == 32 && rest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) => {
            let mut out = [0u8; 16];
            for (i, byte) in out.iter_mut().enumerate() {
                *byte = u8::from_str_radix(&rest[2 * i..2 * i + 2], 16).ok()?;
            }
            Some(MessageId::Uuid(out))
        }
        "binary" => decode_name(rest).map(MessageId::Binary),
        _ => None,
    }
}

/// The hash tag Redis Cluster uses for `key`: the bytes between the first `{` and the
/// next `}`, when that is non-empty; otherwise the whole key.
#[must_use]
pub fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// A hash tag in `key`'s slot, holding no `}` and not empty (see [`KeySpace::mark`]).
fn slot_tag(key: &str) -> std::borrow::Cow<'_, str> {
    let tag = hash_tag(key);
    // A key with a tag of its own is longer than the tag (by its braces at least).
    if tag.len() < key.len() || (!key.is_empty() && !key.contains('}')) {
        return std::borrow::Cow::Borrowed(tag);
    }
    // Decimal numbers cover every slot below 200,000 (a test checks it): about 16,000
    // tries for such a key.
    let slot = Slot::for_key(key);
    let mut n = 0u64;
    loop {
        let tag = n.to_string();
        if Slot::for_key(&tag) == slot {
            return std::borrow::Cow::Owned(tag);
        }
        n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(name: &[u8], expected: &str) {
        assert_eq!(encode_name(name), expected);
        assert_eq!(decode_name(expected).as_deref(), Some(name));
    }

    #[test]
    fn encoding() {
        check(b"requests", "requests");
        check(b"a-b_c.d", "a-b_c.d");
        check(b"{evil}", "%7Bevil%7D");
        check(b"a:b", "a%3Ab");
        check(b"a b", "a%20b");
        check(b"%", "%25");
        check(b"", "%");
        check(&[0xff, 0x00, b'\n'], "%FF%00%0A");
        check("é".as_bytes(), "%C3%A9");
    }

    #[test]
    fn decode_refuses_non_canonical() {
        // "" was found by `fuzz/` target keys: it decoded to the empty name, whose
        // encoding is "%", so `drain:lease:{}` parsed as the empty queue's lease.
        for bad in ["%41", "%7b", "a{", "%7", "%%", "%G0", ":", ""] {
            assert_eq!(decode_name(bad), None, "{bad}");
        }
        assert_eq!(KeySpace::new("drain").parse("drain:lease:{}"), None);
        assert_eq!(KeySpace::new("drain").parse("drain:msg:{q}:"), None);
    }

    #[test]
    fn layout_and_slots() {
        let ks = KeySpace::new("drain");
        let k = ks.lease(&LeaseName::queue("requests"));
        assert_eq!(k.lease, "drain:lease:{requests}");
        assert_eq!(k.fence, "drain:fence:{requests}");
        assert_eq!(hash_tag(&k.lease), hash_tag(&k.fence));
        assert_eq!(ks.owner_claim("o{1}"), "drain:claim:{o%7B1%7D}");
        let owner = ks.lease(&LeaseName::owner("o{1}"));
        assert_eq!(owner.lease, ks.owner_claim("o{1}"));
        assert_eq!(owner.fence, "drain:claim-fence:{o%7B1%7D}");
        assert_eq!(hash_tag(&owner.fence), hash_tag(&owner.lease));
        assert_eq!(ks.owner_waiters("o{1}"), "drain:waiters:{o%7B1%7D}");
        assert_eq!(hash_tag(&ks.owner_waiters("o{1}")), hash_tag(&ks.owner_claim("o{1}")));
        let (start, mark) = ks.owner_drain("o{1}");
        assert_eq!((start.as_str(), mark.as_str()), ("drain:drain-start:{o%7B1%7D}", "drain:drained:{o%7B1%7D}"));
        assert_eq!(hash_tag(&start), hash_tag(&ks.owner_claim("o{1}")));
        assert_eq!(hash_tag(&mark), hash_tag(&ks.owner_claim("o{1}")));
        assert_eq!(ks.wake_channel("host-42"), "drain:wake:host-42");
        assert_eq!(ks.wake_channel("a b:{c}"), "drain:wake:a%20b%3A%7Bc%7D");
        let m = ks.message_claim("q:1", &MessageId::from("id}x"));
        assert_eq!(m, "drain:msg:{q%3A1}:id%7Dx");
        assert_eq!(hash_tag(&m), "q%3A1");
        assert_eq!(hash_tag(&m), hash_tag(&ks.lease(&LeaseName::queue("q:1")).lease));
        assert_eq!(hash_tag("plain"), "plain");
        assert_eq!(hash_tag("a{}b"), "a{}b");
        assert_eq!(KeySpace::new("t*1").scan_pattern(), "t\\*1:*");
    }

    #[test]
    fn lease_key_arguments_are_the_lease_keys() {
        let ks = KeySpace::new("p");
        assert_eq!(ks.lease(&LeaseName::queue("q.1")).lease, "p:lease:{q.1}");
        assert_eq!(ks.lease(&LeaseName::owner("o")).fence, "p:claim-fence:{o}");
        let long = "x".repeat(300);
        for name in ["requests", "we{ird}:q", "", "a b", "ünï", "%", "{}", &long] {
            for lease in [LeaseName::queue(name), LeaseName::owner(name)] {
                let keys = ks.lease(&lease);
                let [held, fence] = ks.lease_args(&lease);
                let args = |a: LeaseKeyArg<'_>| redis::ToRedisArgs::to_redis_args(&a);
                assert_eq!(args(held), vec![keys.lease.as_bytes().to_vec()], "{lease:?}");
                assert_eq!(args(fence), vec![keys.fence.as_bytes().to_vec()], "{lease:?}");
                assert!(held.plain_len() <= keys.lease.len());
            }
        }
    }

    #[test]
    fn a_batchs_claim_keys_are_each_claim_key() {
        let ks = KeySpace::new("p");
        let ids = [
            MessageId::from("m-1"),
            MessageId::from("a b{c}"),
            MessageId::from(""),
            MessageId::Ulong(7),
            MessageId::Uuid([0xab; 16]),
            MessageId::Binary(vec![0, b'x', 0xff]),
        ];
        for queue in ["requests", "q:1{x}", ""] {
            let one_by_one: Vec<String> = ids.iter().map(|id| ks.message_claim(queue, id)).collect();
            assert_eq!(ks.message_claims(queue, &ids), one_by_one, "{queue:?}");
        }
        assert!(ks.message_claims("q", &[]).is_empty());
    }

    #[test]
    fn message_ids_keep_their_type() {
        let ks = KeySpace::new("d");
        let check = |id: MessageId, tail: &str| {
            let key = ks.message_claim("q", &id);
            assert_eq!(key, format!("d:msg:{{q}}:{tail}"));
            assert_eq!(ks.parse(&key), Some(KeyKind::MessageClaim { queue: b"q".to_vec(), message_id: id }), "{key}");
        };
        check(MessageId::from("42"), "42");
        check(MessageId::Ulong(42), "ulong:42");
        check(MessageId::from("ulong:42"), "ulong%3A42");
        check(MessageId::Binary(b"42".to_vec()), "binary:42");
        check(MessageId::Binary(vec![0, 255]), "binary:%00%FF");
        check(MessageId::Binary(Vec::new()), "binary:%");
        check(MessageId::from(""), "%");
        check(MessageId::Uuid([0xab; 16]), "uuid:abababababababababababababababab");
        for bad in
            ["ulong:", "ulong:042", "ulong:x", "uuid:ab", "uuid:ABABABABABABABABABABABABABABABAB", "other:1", "a:b:c"]
        {
            assert_eq!(ks.parse(&format!("d:msg:{{q}}:{bad}")), None, "{bad}");
        }
    }

    #[test]
    fn a_mark_shares_its_resource_s_slot_and_no_other_resource_s_mark() {
        let ks = KeySpace::new("drain");
        let check = |resource: &str, mark: &str| {
            assert_eq!(ks.mark(resource), mark, "{resource:?}");
            assert_eq!(Slot::for_key(mark), Slot::for_key(resource), "{resource:?}");
            assert_eq!(ks.parse(mark), None, "a mark is no key drain leases lists");
        };
        check("orders:{42}", "drain:mark:{42}:orders:{42}");
        check("orders:42", "drain:mark:{orders:42}:orders:42");
        check("a{b", "drain:mark:{a{b}:a{b");
        check("{}x", &format!("drain:mark:{{{}}}:{{}}x", slot_tag("{}x")));
        for odd in ["a}b", "}", "{}", "a{}b{c}", "", "x{}", "\u{e9}}"] {
            let mark = ks.mark(odd);
            let tag = slot_tag(odd);
            assert!(tag.bytes().all(|b| b.is_ascii_digit()), "{odd:?}: {tag}");
            check(odd, &mark);
        }
        // Resources that share a slot (or a tag) still have marks of their own.
        let resources = ["abc", "{abc}", "x{abc}", "{abc}x", "a}b", "b}a", "", "}", "abc:fence"];
        let marks: std::collections::BTreeSet<String> = resources.iter().map(|r| ks.mark(r)).collect();
        assert_eq!(marks.len(), resources.len());
    }

    #[test]
    fn decimal_tags_cover_every_slot() {
        let mut seen = std::collections::HashSet::new();
        for n in 0..200_000u64 {
            seen.insert(Slot::for_key(n.to_string()));
        }
        assert_eq!(seen.len(), 16_384);
    }

    #[test]
    fn parse_inverts_every_builder() {
        let ks = KeySpace::new("p:x");
        let q = "we{ird}:q".as_bytes().to_vec();
        let lease = ks.lease(&LeaseName::queue("we{ird}:q"));
        assert_eq!(ks.parse(&lease.lease), Some(KeyKind::Lease { queue: q.clone() }));
        assert_eq!(ks.parse(&lease.fence), Some(KeyKind::Fence { queue: q.clone() }));
        assert_eq!(ks.parse(&ks.owner_claim("o")), Some(KeyKind::OwnerClaim { owner: b"o".to_vec() }));
        assert_eq!(
            ks.parse(&ks.lease(&LeaseName::owner("o")).fence),
            Some(KeyKind::OwnerFence { owner: b"o".to_vec() })
        );
        assert_eq!(ks.parse(&ks.owner_waiters("o:{x}")), Some(KeyKind::OwnerWaiters { owner: b"o:{x}".to_vec() }));
        assert_eq!(ks.parse(&ks.wake_channel("i")), None, "a channel, not a key");
        assert_eq!(
            ks.parse(&ks.message_claim("we{ird}:q", &MessageId::from("m:1"))),
            Some(KeyKind::MessageClaim { queue: q, message_id: MessageId::from("m:1") })
        );
        for other in ["p:x:lease:{q}x", "p:y:lease:{q}", "p:x:other:{q}", "p:x:lease:q", "p:x:msg:{q}"] {
            assert_eq!(ks.parse(other), None, "{other}");
        }
    }
}
