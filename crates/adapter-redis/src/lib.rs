//! adapter-redis: placeholder until its issue lands.
