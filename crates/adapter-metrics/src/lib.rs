//! adapter-metrics: placeholder until its issue lands.
