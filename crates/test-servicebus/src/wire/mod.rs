//! The AMQP 1.0 byte level: value lengths and frames.

pub(crate) mod frame;
pub(crate) mod value;
