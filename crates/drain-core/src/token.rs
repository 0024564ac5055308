//! Lease and claim tokens: `<instance-id>:<32 lowercase hex from a CSPRNG>`.

use std::fmt;

use rand::CryptoRng;

/// A holder's token. Unique per acquisition, so a release or renewal can tell
/// "mine" from "a later holder's".
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LeaseToken(String);

impl LeaseToken {
    /// A fresh token for `instance`, with 128 bits from `rng`.
    ///
    /// The bound is [`CryptoRng`]: a predictable generator would let one holder
    /// guess another's token.
    pub fn generate<R: CryptoRng + ?Sized>(instance: &str, rng: &mut R) -> Self {
        let mut bytes = [0u8; 16];
        rng.fill_bytes(&mut bytes);
        Self::from_random(instance, bytes)
    }

    /// A token for `instance` from 16 bytes of a cryptographically secure source
    /// (for a caller whose generator is not [`rand`]'s, e.g. another version of it).
    #[must_use]
    pub fn from_random(instance: &str, bytes: [u8; 16]) -> Self {
        let mut s = String::with_capacity(instance.len() + 33);
        s.push_str(instance);
        s.push(':');
        for b in bytes {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        LeaseToken(s)
    }

    /// The token as stored.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The instance part of a token (everything before the last `:`).
    #[must_use]
    pub fn holder(&self) -> &str {
        Self::holder_of(&self.0)
    }

    /// The instance part of a stored token value: everything before the last `:`,
    /// or the whole value when it has none.
    #[must_use]
    pub fn holder_of(value: &str) -> &str {
        value.rsplit_once(':').map_or(value, |(h, _)| h)
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Debug for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The random part is a capability; show only the holder.
        write!(f, "LeaseToken({}:…)", self.holder())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// A deterministic generator marked cryptographic for the test only.
    struct Seeded(rand::rngs::SmallRng);
    impl rand::TryRng for Seeded {
        type Error = core::convert::Infallible;
        fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
            Ok(rand::Rng::next_u32(&mut self.0))
        }
        fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
            Ok(rand::Rng::next_u64(&mut self.0))
        }
        fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
            rand::Rng::fill_bytes(&mut self.0, dst);
            Ok(())
        }
    }
    impl rand::TryCryptoRng for Seeded {}

    #[test]
    fn shape() {
        let mut rng = Seeded(rand::rngs::SmallRng::seed_from_u64(7));
        let t = LeaseToken::generate("host-42", &mut rng);
        let (holder, hex) = t.as_str().rsplit_once(':').expect("colon");
        assert_eq!(holder, "host-42");
        assert_eq!(t.holder(), "host-42");
        assert_eq!(hex.len(), 32);
        assert!(hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_ne!(t, LeaseToken::generate("host-42", &mut rng));
        assert!(!format!("{t:?}").contains(hex));
        assert_eq!(LeaseToken::holder_of("a:b:c"), "a:b");
        assert_eq!(LeaseToken::holder_of("plain"), "plain");
    }
}
