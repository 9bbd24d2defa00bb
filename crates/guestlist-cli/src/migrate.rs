//! `guestlist migrate`: create the inbox table, or the outbox's.

use guestlist::{Backend, Inbox, Outbox};

use crate::cli::MigrateArgs;
use crate::database::{self, Kind, with_pool};

pub(crate) async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    let table = if args.outbox {
        &args.outbox_table
    } else {
        &args.db.table
    };
    if args.print {
        let ddl = match Kind::of(&args.db.database)? {
            Kind::Postgres => ddl::<guestlist::sqlx::Postgres>(table, args.outbox)?,
            Kind::Sqlite => ddl::<guestlist::sqlx::Sqlite>(table, args.outbox)?,
            Kind::MySql => ddl::<guestlist::sqlx::MySql>(table, args.outbox)?,
        };
        println!("{ddl}");
        return Ok(());
    }
    let pool = database::connect(&args.db.database, 1).await?;
    with_pool!(pool, |pool| migrate(&pool, table, args.outbox).await)?;
    println!(
        "{table} is ready on {}",
        database::redact(&args.db.database)
    );
    Ok(())
}

async fn migrate<DB: Backend>(
    pool: &guestlist::sqlx::Pool<DB>,
    table: &str,
    outbox: bool,
) -> anyhow::Result<()> {
    if outbox {
        Outbox::<DB>::with_table(table)?.migrate(pool).await?;
    } else {
        Inbox::<DB>::with_table(table)?.migrate(pool).await?;
    }
    Ok(())
}

fn ddl<DB: Backend>(table: &str, outbox: bool) -> anyhow::Result<String> {
    let statements = if outbox {
        Outbox::<DB>::with_table(table)?.ddl().to_vec()
    } else {
        Inbox::<DB>::with_table(table)?.ddl().to_vec()
    };
    Ok(statements
        .iter()
        .map(|statement| format!("{statement};"))
        .collect::<Vec<_>>()
        .join("\n"))
}
