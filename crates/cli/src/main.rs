//! `gpack`: convert, verify, inspect, run and serve model files; push and
//! pull them through OCI registries; export them back to GGUF.
//!
//! Exit codes: 0 success, 1 the input is invalid or the work failed,
//! 2 usage error, 130 interrupted.
#![forbid(unsafe_code)]

mod cmd;
mod progress;

use clap::{Parser, Subcommand};
use std::io::Write;
use std::process::ExitCode;

/// gpack: one portable, page-aligned, mmap-ready, hash-verified file per model.
#[derive(Parser)]
#[command(name = "gpack", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Convert(cmd::convert::Args),
    Verify(cmd::verify::Args),
    Inspect(cmd::inspect::Args),
    Prequant(cmd::prequant::Args),
    Run(cmd::run::Args),
    Tokenize(cmd::tokenize::Args),
    Serve(cmd::serve::Args),
    Push(cmd::push::Args),
    Pull(cmd::pull::Args),
    Ls(cmd::ls::Args),
    Rm(cmd::rm::Args),
    Export(cmd::export::Args),
    Bench(cmd::bench::Args),
    Perplexity(cmd::perplexity::Args),
    Imatrix(cmd::imatrix::Args),
    Cache(cmd::cache::Args),
}

/// Runs one subcommand.
fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Convert(a) => cmd::convert::run(a),
        Command::Verify(a) => cmd::verify::run(a),
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Prequant(a) => cmd::prequant::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Tokenize(a) => cmd::tokenize::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Push(a) => cmd::push::run(a),
        Command::Pull(a) => cmd::pull::run(a),
        Command::Ls(a) => cmd::ls::run(a),
        Command::Rm(a) => cmd::rm::run(a),
        Command::Export(a) => cmd::export::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Perplexity(a) => cmd::perplexity::run(a),
        Command::Imatrix(a) => cmd::imatrix::run(a),
        Command::Cache(a) => cmd::cache::run(a),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Ctrl-C / SIGTERM: remove any half-written output, then exit 130
    // (`serve` handles both itself: it drains and exits 0).
    if !matches!(cli.command, Command::Serve(_)) {
        let _ = ctrlc::set_handler(|| {
            gpack_format::remove_live_temp_files();
            std::process::exit(130);
        });
    }
    // A panic is a bug, never an answer to input (inputs are checked before
    // they are used); the pool hands a task's panic to its caller, and here
    // it becomes an error like any other (exit 1, not 101), after the
    // standard hook has printed where it happened.
    let result = std::panic::catch_unwind(|| run(cli.command)).unwrap_or_else(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        Err(anyhow::anyhow!(
            "internal error (a bug: please report it): {msg}"
        ))
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            let _ = std::io::stdout().flush();
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// A closed stdout (`gpack inspect --json | head`): an io error anywhere in
/// the chain, including one inside a serde_json write error (whose `source`
/// skips the io error itself, so it is asked for its kind).
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    let pipe = Some(std::io::ErrorKind::BrokenPipe);
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().map(std::io::Error::kind) == pipe
            || c.downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind)
                == pipe
    })
}
