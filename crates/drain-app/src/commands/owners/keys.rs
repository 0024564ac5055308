//! The keys of `drain owners`' workload, each in its owner's hash slot (beside the
//! owner's claim): the backlog list, the in-flight list of the batch a turn took,
//! and the processed-items hash.

use adapter_redis::KeySpace;
use adapter_redis::keys::encode_name;
use drain_core::admission::OwnerId;

/// The keys of the owner workload.
#[derive(Debug, Clone)]
pub(crate) struct OwnerKeys {
    keys: KeySpace,
}

impl OwnerKeys {
    pub(crate) fn new(keys: KeySpace) -> Self {
        OwnerKeys { keys }
    }

    /// The name of owner `i`.
    pub(crate) fn owner(i: usize) -> OwnerId {
        OwnerId::from(format!("owner-{i}"))
    }

    /// `<prefix>:backlog:{<owner>}`, in the owner's hash slot.
    pub(crate) fn backlog(&self, owner: &str) -> String {
        format!("{}:backlog:{{{}}}", self.keys.prefix(), encode_name(owner.as_bytes()))
    }

    /// `<prefix>:inflight:{<owner>}`: the batch a turn took and has not recorded yet.
    pub(crate) fn in_flight(&self, owner: &str) -> String {
        format!("{}:inflight:{{{}}}", self.keys.prefix(), encode_name(owner.as_bytes()))
    }

    /// `<prefix>:processed:{<owner>}`: item -> times recorded as processed.
    pub(crate) fn processed(&self, owner: &str) -> String {
        format!("{}:processed:{{{}}}", self.keys.prefix(), encode_name(owner.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use drain_core::ports::LeaseName;

    use super::*;

    /// The text between the first `{` and the following `}`: the Cluster hash tag.
    fn tag(key: &str) -> &str {
        let open = key.find('{').expect("a hash tag");
        let close = key[open..].find('}').expect("a closed hash tag") + open;
        &key[open + 1..close]
    }

    #[test]
    fn an_owners_keys_share_its_claims_hash_slot() {
        let keys = KeySpace::new("drain");
        let owners = OwnerKeys::new(keys.clone());
        for owner in ["owner-7", "a b{c}", ""] {
            let backlog = owners.backlog(owner);
            assert!(backlog.starts_with("drain:backlog:{"), "{backlog}");
            assert_eq!(tag(&backlog), tag(&keys.lease(&LeaseName::owner(owner)).lease), "{owner:?}");
            assert_eq!(tag(&backlog), tag(&keys.owner_claim(owner)), "{owner:?}");
            assert_eq!(tag(&backlog), tag(&owners.in_flight(owner)), "{owner:?}");
            assert_eq!(tag(&backlog), tag(&owners.processed(owner)), "{owner:?}");
        }
        assert_eq!(owners.backlog("a b{c}"), "drain:backlog:{a%20b%7Bc%7D}");
        assert_eq!(owners.in_flight("owner-1"), "drain:inflight:{owner-1}");
        assert_eq!(owners.processed("owner-1"), "drain:processed:{owner-1}");
        assert_eq!(OwnerKeys::owner(3).as_str(), "owner-3");
    }
}
