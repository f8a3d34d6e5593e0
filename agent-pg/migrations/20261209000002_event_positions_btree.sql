-- Event pages of every run (or of an agent's runs) read each kind of record in position
-- order from a cursor, a page at a time (`agent_sql::events`). The BRIN indexes of
-- `20261204000001_run_events.sql` cannot give rows in order: every page read all records
-- after its cursor and sorted them (at 134,000 transitions, 88 ms for the first page of
-- 1,000; seconds at millions). B-trees give them in order, so a page reads its own rows
-- (5.5 ms there). They cost each write a B-tree insert where BRIN cost next to nothing.
-- The pages of one run read its records through their primary keys, as before.
CREATE INDEX transitions_position_order ON transitions (position);
CREATE INDEX journal_started_position_order ON journal (started_position);
CREATE INDEX journal_finished_position_order ON journal (finished_position);
CREATE INDEX signals_position_order ON signals (position);
DROP INDEX transitions_position;
DROP INDEX journal_started_position;
DROP INDEX journal_finished_position;
DROP INDEX signals_position;
