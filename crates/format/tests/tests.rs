//! Integration tests of the GPACK container.

mod common;
mod corruption;
mod crash;
mod giw;
mod roundtrip;
