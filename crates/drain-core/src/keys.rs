//! The Redis key layout of SPEC §4–§6, Cluster-safe and collision-free.
//!
//! Every key that a multi-key operation touches carries the same hash tag
//! (`{<queue>}` or `{<owner>}`), so a script never crosses slots. Names are encoded
//! so that no name can break out of its hash tag or collide with another name: ASCII
//! letters, digits, `-`, `_` and `.` stay as they are, every other byte becomes
//! `%XX` (uppercase hex). The encoding is injective, so distinct names always give
//! distinct keys.

use std::fmt::Write as _;

/// Encode a queue, owner or message name for use inside a key.
///
/// An empty name encodes as `%` alone, which no non-empty name can produce
/// (a `%` is always followed by two hex digits), so it cannot collide either.
#[must_use]
pub fn encode_name(name: &[u8]) -> String {
    if name.is_empty() {
        return "%".to_owned();
    }
    let mut out = String::with_capacity(name.len());
    for &b in name {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.') {
            out.push(char::from(b));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
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

/// The two keys of one queue's single-flight lease; both share the queue's hash slot.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseKey {
    /// `<prefix>:lease:{<queue>}`: holds the holder's token.
    pub lease: String,
    /// `<prefix>:fence:{<queue>}`: the fencing counter.
    pub fence: String,
}

/// Builds every key drain uses under one prefix (`DRAIN_KEY_PREFIX`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpace {
    prefix: String,
}

impl KeySpace {
    /// A key space under `prefix` (validated by [`crate::settings::key_prefix`]).
    #[must_use]
    pub fn new(prefix: impl Into<String>) -> Self {
        KeySpace { prefix: prefix.into() }
    }

    /// The prefix.
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The lease and fence keys of `queue`.
    #[must_use]
    pub fn lease(&self, queue: &str) -> LeaseKey {
        let tag = encode_name(queue.as_bytes());
        LeaseKey {
            lease: format!("{}:lease:{{{tag}}}", self.prefix),
            fence: format!("{}:fence:{{{tag}}}", self.prefix),
        }
    }

    /// The owner claim key `<prefix>:claim:{<owner>}` that admission peeks by default.
    #[must_use]
    pub fn owner_claim(&self, owner: &str) -> String {
        format!("{}:claim:{{{}}}", self.prefix, encode_name(owner.as_bytes()))
    }

    /// The owner's claim as a lease: the claim key admission peeks, and a fence
    /// counter in the same slot, for owner work that takes its claim with
    /// [`crate::ports::LeaseStore::acquire`].
    #[must_use]
    pub fn owner_lease(&self, owner: &str) -> LeaseKey {
        let tag = encode_name(owner.as_bytes());
        LeaseKey {
            lease: format!("{}:claim:{{{tag}}}", self.prefix),
            fence: format!("{}:claim-fence:{{{tag}}}", self.prefix),
        }
    }

    /// The owner's waiter list `<prefix>:waiters:{<owner>}`, in the claim's hash slot:
    /// the wake channels of instances waiting for the owner's claim to be released
    /// (oldest first). A claim release pops one and publishes the owner on it.
    #[must_use]
    pub fn owner_waiters(&self, owner: &str) -> String {
        format!("{}:waiters:{{{}}}", self.prefix, encode_name(owner.as_bytes()))
    }

    /// The pub/sub channel `<prefix>:wake:<instance>` on which `instance` hears that
    /// an owner it waits for was released. A channel, not a key (no hash tag: plain
    /// `PUBLISH` reaches every node of a Cluster); the ACL grants `&<prefix>:wake:*`.
    #[must_use]
    pub fn wake_channel(&self, instance: &str) -> String {
        format!("{}:wake:{}", self.prefix, encode_name(instance.as_bytes()))
    }

    /// The per-message claim key `<prefix>:msg:{<queue>}:<message-id>`.
    #[must_use]
    pub fn message_claim(&self, queue: &str, message_id: &str) -> String {
        format!("{}:msg:{{{}}}:{}", self.prefix, encode_name(queue.as_bytes()), encode_name(message_id.as_bytes()))
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
            ("msg", tail) => {
                let id = decode_name(tail.strip_prefix(':')?)?;
                Some(KeyKind::MessageClaim { queue: name, message_id: id })
            }
            _ => None,
        }
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
    /// A per-message claim.
    MessageClaim {
        /// Queue name bytes.
        queue: Vec<u8>,
        /// Message id bytes.
        message_id: Vec<u8>,
    },
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
        let k = ks.lease("requests");
        assert_eq!(k.lease, "drain:lease:{requests}");
        assert_eq!(k.fence, "drain:fence:{requests}");
        assert_eq!(hash_tag(&k.lease), hash_tag(&k.fence));
        assert_eq!(ks.owner_claim("o{1}"), "drain:claim:{o%7B1%7D}");
        assert_eq!(ks.owner_lease("o{1}").lease, ks.owner_claim("o{1}"));
        assert_eq!(hash_tag(&ks.owner_lease("o").fence), hash_tag(&ks.owner_lease("o").lease));
        assert_eq!(ks.owner_waiters("o{1}"), "drain:waiters:{o%7B1%7D}");
        assert_eq!(hash_tag(&ks.owner_waiters("o{1}")), hash_tag(&ks.owner_claim("o{1}")));
        assert_eq!(ks.wake_channel("host-42"), "drain:wake:host-42");
        assert_eq!(ks.wake_channel("a b:{c}"), "drain:wake:a%20b%3A%7Bc%7D");
        let m = ks.message_claim("q:1", "id}x");
        assert_eq!(m, "drain:msg:{q%3A1}:id%7Dx");
        assert_eq!(hash_tag(&m), "q%3A1");
        assert_eq!(hash_tag(&m), hash_tag(&ks.lease("q:1").lease));
        assert_eq!(hash_tag("plain"), "plain");
        assert_eq!(hash_tag("a{}b"), "a{}b");
        assert_eq!(KeySpace::new("t*1").scan_pattern(), "t\\*1:*");
    }

    #[test]
    fn parse_inverts_every_builder() {
        let ks = KeySpace::new("p:x");
        let q = "we{ird}:q".as_bytes().to_vec();
        assert_eq!(ks.parse(&ks.lease("we{ird}:q").lease), Some(KeyKind::Lease { queue: q.clone() }));
        assert_eq!(ks.parse(&ks.lease("we{ird}:q").fence), Some(KeyKind::Fence { queue: q.clone() }));
        assert_eq!(ks.parse(&ks.owner_claim("o")), Some(KeyKind::OwnerClaim { owner: b"o".to_vec() }));
        assert_eq!(ks.parse(&ks.owner_lease("o").fence), Some(KeyKind::OwnerFence { owner: b"o".to_vec() }));
        assert_eq!(ks.parse(&ks.owner_waiters("o:{x}")), Some(KeyKind::OwnerWaiters { owner: b"o:{x}".to_vec() }));
        assert_eq!(ks.parse(&ks.wake_channel("i")), None, "a channel, not a key");
        assert_eq!(
            ks.parse(&ks.message_claim("we{ird}:q", "m:1")),
            Some(KeyKind::MessageClaim { queue: q, message_id: b"m:1".to_vec() })
        );
        for other in ["p:x:lease:{q}x", "p:y:lease:{q}", "p:x:other:{q}", "p:x:lease:q", "p:x:msg:{q}"] {
            assert_eq!(ks.parse(other), None, "{other}");
        }
    }
}
