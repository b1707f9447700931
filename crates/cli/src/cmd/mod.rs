//! One module per subcommand.

pub mod convert;
pub mod inspect;
pub mod prequant;
pub mod run;
pub mod serve;
pub mod tokenize;
pub mod verify;

/// Prints a JSON value to stdout, pretty, with a trailing newline.
pub fn print_json(v: &serde_json::Value) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, v)?;
    writeln!(out)?;
    Ok(())
}
