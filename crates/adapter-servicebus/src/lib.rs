//! adapter-servicebus: placeholder until its issue lands.
