//! End-to-end tests of the `gpack` binary.

mod convert_inspect;
mod interrupt;
mod run;
mod tokenize;
mod verify_inspect;

pub fn gpack() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_gpack"))
}
