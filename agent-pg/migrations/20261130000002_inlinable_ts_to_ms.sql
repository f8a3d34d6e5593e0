-- `extract(epoch FROM timestamptz)` is STABLE, so an IMMUTABLE `ts_to_ms` could not be
-- inlined and ran through the SQL-function executor on every row a query returned. Declared
-- STABLE (what it is), the planner inlines it into the calling query.
CREATE OR REPLACE FUNCTION ts_to_ms(ts timestamptz) RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT round(extract(epoch FROM ts) * 1000)::bigint $$;
