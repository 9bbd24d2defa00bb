//! `guestlist`: create the guest list's tables, purge old rows, and watch the warehouse story
//! play out exactly once.
//!
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [operations](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/operations.md)
//! (or build it locally with `mdbook serve docs/guide`).

mod body_text;
mod broker;
mod cli;
mod console;
mod database;
mod demo;
mod figures;
mod gateway;
mod history;
mod inbox_dead;
mod keys;
mod migrate;
mod ops;
mod outbox;
mod purge;
mod relay;
mod secrets;
mod signal;
mod stats;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

use crate::cli::{Cli, Command, LogFormat};

fn main() -> ExitCode {
    // The gateway's help shows each default from the one table of them.
    let command = Cli::command().mut_subcommand("gateway", gateway::args::annotate);
    let matches = command.get_matches();
    let service = format!("guestlist-{}", matches.subcommand_name().unwrap_or("cli"));
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    };
    // A server says what it does; a one-off command speaks only of trouble.
    let level = match cli.command {
        Command::Gateway(_) | Command::Relay(_) | Command::Console(_) => "info",
        _ => "warn",
    };
    let filter = match std::env::var("GUESTLIST_LOG") {
        Ok(directives) => {
            tracing_subscriber::EnvFilter::try_new(&directives).unwrap_or_else(|err| {
                eprintln!(
                    "GUESTLIST_LOG={directives:?} is not a log filter ({err}); logging at {level}"
                );
                level.into()
            })
        }
        Err(_) => level.into(),
    };
    // lapin logs each message RabbitMQ returns at WARN with its headers and body, and bodies
    // can hold secrets: its warnings stay out unless GUESTLIST_LOG names lapin itself.
    let filter = if std::env::var("GUESTLIST_LOG").is_ok_and(|d| d.contains("lapin")) {
        filter
    } else {
        filter.add_directive("lapin=error".parse().expect("a valid directive"))
    };
    let _export = match tracing_init(&cli, &service, filter) {
        Ok(export) => export,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let result = runtime.block_on(async {
        match cli.command {
            Command::Migrate(args) => migrate::run(args).await,
            Command::Purge(args) => purge::run(args).await,
            Command::Gateway(args) => gateway::run(*args).await,
            Command::Keys(command) => keys::run(command).await,
            Command::Stats(args) => stats::run(args).await,
            Command::History(args) => history::run(args).await,
            Command::Console(args) => console::run(args).await,
            Command::Relay(args) => relay::run(args).await,
            Command::Outbox(command) => outbox::run(command).await,
            Command::Inbox(command) => inbox_dead::run(command).await,
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

/// Logs to stderr through `filter`, as text or JSON; and, given an OTLP endpoint, spans to it
/// as `service` (at info, whatever the logs' filter), until the returned export is dropped.
fn tracing_init(
    cli: &Cli,
    service: &str,
    filter: tracing_subscriber::EnvFilter,
) -> Result<Option<guestlist_otel::Export>, guestlist_otel::Error> {
    use tracing_subscriber::prelude::*;
    let export = match cli
        .otlp_endpoint
        .as_deref()
        .filter(|url| !url.trim().is_empty())
    {
        Some(endpoint) => Some(guestlist_otel::Export::start(service, endpoint)?),
        None => None,
    };
    let spans = export.as_ref().map(|export| {
        export
            .layer()
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO)
    });
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(spans);
    match cli.log_format {
        LogFormat::Text => registry.with(logs.with_filter(filter)).init(),
        LogFormat::Json => registry.with(logs.json().with_filter(filter)).init(),
    }
    Ok(export)
}
