//! The owner identity the scheduler admits.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

/// The name of one owner whose drain work the scheduler admits (a projection owner, a
/// tenant, a partition: whatever the embedder drains one at a time).
///
/// Compared, hashed and ordered as its string, so `HashMap<OwnerId, _>` can be looked
/// up with a `&str` through [`Borrow`].
///
/// The name is shared (`Arc<str>`): cloning an `OwnerId` — into a request, the
/// scheduler's queues, a launch — counts a reference and never allocates; only
/// making one from a name does.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerId(Arc<str>);

impl OwnerId {
    /// The owner's name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The owner's name, by value.
    #[must_use]
    pub fn into_string(self) -> String {
        self.0.as_ref().to_owned()
    }
}

impl From<&str> for OwnerId {
    fn from(name: &str) -> Self {
        OwnerId(Arc::from(name))
    }
}

impl From<String> for OwnerId {
    fn from(name: String) -> Self {
        OwnerId(Arc::from(name))
    }
}

impl Borrow<str> for OwnerId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for OwnerId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
