//! `guestlist`: create the guest list's tables, purge old rows, and watch the warehouse story
//! play out exactly once.

mod cli;
mod database;
mod demo;
mod migrate;
mod purge;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GUESTLIST_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let result = runtime.block_on(async {
        match cli.command {
            Command::Migrate(args) => migrate::run(args).await,
            Command::Purge(args) => purge::run(args).await,
            Command::Demo(args) => demo::run(args).await,
            Command::DemoCrashConsumer(args) => demo::crash::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
