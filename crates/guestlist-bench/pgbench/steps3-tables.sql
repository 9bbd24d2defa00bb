-- The tables crates/guestlist-bench/pgbench/steps3.sql writes, as `migrate` makes them.
DROP TABLE IF EXISTS pgb_inbox, pgb_steps, pgb_picks;
CREATE TABLE pgb_inbox (handler text COLLATE "C" NOT NULL, message_id text COLLATE "C" NOT NULL, seen_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (handler, message_id));
CREATE TABLE pgb_steps (handler text COLLATE "C" NOT NULL, message_id text COLLATE "C" NOT NULL, place integer NOT NULL, name text NOT NULL, token bigint NOT NULL, lease_until bigint NOT NULL, result bytea, PRIMARY KEY (handler, message_id, place));
CREATE TABLE pgb_picks (event text NOT NULL);
