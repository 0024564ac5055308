//! Lease tokens from a CSPRNG never collide and are not sequential.

use std::collections::HashSet;

use drain_core::LeaseToken;

/// A real CSPRNG, as the binary uses (rand's thread generator, seeded from the OS).
#[test]
fn a_million_tokens_are_distinct_and_unordered() {
    let mut rng =
        <rand::rngs::StdRng as rand::SeedableRng>::try_from_rng(&mut rand::rngs::SysRng).expect("os randomness");
    let mut seen = HashSet::with_capacity(1_000_000);
    let mut prev: Option<u128> = None;
    let mut ascending = 0u32;
    let mut ones = 0u64;
    for _ in 0..1_000_000 {
        let t = LeaseToken::generate("host-1", &mut rng);
        let hex = t.as_str().rsplit_once(':').expect("holder:hex").1;
        let v = u128::from_str_radix(hex, 16).expect("hex");
        assert!(seen.insert(v), "collision after {} tokens", seen.len());
        if prev.is_some_and(|p| v > p) {
            ascending += 1;
        }
        ones += u64::from(v.count_ones());
        prev = Some(v);
    }
    // Sequential or counter-like tokens would ascend nearly every time; random ones
    // about half the time (binomial, sd 500 on a million draws).
    assert!((490_000..510_000).contains(&ascending), "ascending {ascending} of 999,999");
    // Each of the 128 bits is set half the time: 64 per token on average.
    let mean = ones as f64 / 1e6;
    assert!((63.9..64.1).contains(&mean), "mean set bits {mean}");
}
