-- The statements `Inbox::process_steps` sends for a fresh three-step message on PostgreSQL
-- (the run claimed unless the inbox holds the message, the journal read, an external step's
-- guard and journal row, the database step's insert and its guarded journal row on one
-- transaction, the second external step's, the final commit's guard, claim and forgetting),
-- sent by pgbench: the floor any client of this protocol stands on. Run by
-- scripts/pgbench-steps.sh.
\set r random(1, 2000000000)
\set t random(1, 2000000000)
WITH claimed AS (INSERT INTO pgb_steps (handler, message_id, place, name, token, lease_until) SELECT 'w', :client_id || '-' || :r, 0, '', :t, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint + 30000 WHERE NOT EXISTS (SELECT 1 FROM pgb_inbox WHERE handler = 'w' AND message_id = :client_id || '-' || :r) ON CONFLICT DO NOTHING RETURNING 1) SELECT (SELECT count(*) FROM claimed), (SELECT count(*) FROM pgb_inbox WHERE handler = 'w' AND message_id = :client_id || '-' || :r);
SELECT place, name, result FROM pgb_steps WHERE handler = 'w' AND message_id = :client_id || '-' || :r AND place > 0 UNION ALL SELECT -1, '', NULL FROM pgb_inbox WHERE handler = 'w' AND message_id = :client_id || '-' || :r ORDER BY 1;
WITH run AS (UPDATE pgb_steps SET lease_until = (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint + 30000 WHERE handler = 'w' AND message_id = :client_id || '-' || :r AND place = 0 AND token = :t RETURNING token) INSERT INTO pgb_steps (handler, message_id, place, name, token, lease_until, result) SELECT 'w', :client_id || '-' || :r, 1, 'a', token, 0, '\x2261220a' FROM run;
BEGIN;
INSERT INTO pgb_picks (event) VALUES (:client_id || '-' || :r);
WITH run AS (UPDATE pgb_steps SET lease_until = (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint + 30000 WHERE handler = 'w' AND message_id = :client_id || '-' || :r AND place = 0 AND token = :t RETURNING token) INSERT INTO pgb_steps (handler, message_id, place, name, token, lease_until, result) SELECT 'w', :client_id || '-' || :r, 2, 'reserve', token, 0, 'null' FROM run;
COMMIT;
WITH run AS (UPDATE pgb_steps SET lease_until = (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint + 30000 WHERE handler = 'w' AND message_id = :client_id || '-' || :r AND place = 0 AND token = :t RETURNING token) INSERT INTO pgb_steps (handler, message_id, place, name, token, lease_until, result) SELECT 'w', :client_id || '-' || :r, 3, 'b', token, 0, '\x2262220a' FROM run;
BEGIN;
WITH run AS (SELECT 1 FROM pgb_steps WHERE handler = 'w' AND message_id = :client_id || '-' || :r AND place = 0 AND token = :t FOR NO KEY UPDATE), claimed AS (INSERT INTO pgb_inbox (handler, message_id) SELECT 'w', :client_id || '-' || :r FROM run ON CONFLICT DO NOTHING RETURNING 1), forgot AS (DELETE FROM pgb_steps WHERE handler = 'w' AND message_id = :client_id || '-' || :r AND EXISTS (SELECT 1 FROM run) RETURNING 1) SELECT (SELECT count(*) FROM run), (SELECT count(*) FROM claimed);
COMMIT;
