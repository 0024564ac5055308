//! The three-position switch (its grammar for settings is drain-app's).

use std::fmt;

use serde::Serialize;

/// How a feature behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Switch {
    /// The feature is not used at all; for the lease this means the store is never touched.
    Off,
    /// The decision is computed and counted (`mode="shadow"`), but the behaviour is Off.
    Shadow,
    /// The feature decides.
    On,
}

impl Switch {
    /// Whether the feature's decision changes behaviour.
    #[must_use]
    pub fn enforces(self) -> bool {
        self == Switch::On
    }

    /// Whether the decision is computed at all (On or Shadow).
    #[must_use]
    pub fn computes(self) -> bool {
        self != Switch::Off
    }

    /// The lowercase name used in config output and metric labels.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Switch::Off => "off",
            Switch::Shadow => "shadow",
            Switch::On => "on",
        }
    }
}

impl fmt::Display for Switch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
