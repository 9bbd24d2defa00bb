//! `guestlist migrate`: create the inbox table.

use guestlist::{Backend, Inbox};

use crate::cli::MigrateArgs;
use crate::database::{self, Kind, with_pool};

pub(crate) async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    if args.print {
        let ddl = match Kind::of(&args.db.database)? {
            Kind::Postgres => ddl::<guestlist::sqlx::Postgres>(&args.db.table)?,
            Kind::Sqlite => ddl::<guestlist::sqlx::Sqlite>(&args.db.table)?,
            Kind::MySql => ddl::<guestlist::sqlx::MySql>(&args.db.table)?,
        };
        println!("{ddl}");
        return Ok(());
    }
    let pool = database::connect(&args.db.database, 1).await?;
    with_pool!(pool, |pool| migrate(&pool, &args.db.table).await)?;
    println!(
        "{} is ready on {}",
        args.db.table,
        database::redact(&args.db.database)
    );
    Ok(())
}

async fn migrate<DB: Backend>(pool: &guestlist::sqlx::Pool<DB>, table: &str) -> anyhow::Result<()> {
    Inbox::<DB>::with_table(table)?.migrate(pool).await?;
    Ok(())
}

fn ddl<DB: Backend>(table: &str) -> anyhow::Result<String> {
    let inbox = Inbox::<DB>::with_table(table)?;
    Ok(inbox
        .ddl()
        .iter()
        .map(|statement| format!("{statement};"))
        .collect::<Vec<_>>()
        .join("\n"))
}
