//! The Idempotency-Key suite on Redis, in plain mode (the work is outside the store).

mod common;

http_suite!(plain, common::stores::Redis);
http_wire_faults!(plain_wire, common::stores::Redis);
