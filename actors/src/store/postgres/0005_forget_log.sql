-- Every forget, kept for good: a hash of the user id (never the id), the
-- agent it was limited to ('' for every agent), when. Exports carry it
-- and imports honour it; an instance whose change feed was cut reads the
-- entries after the last it saw.
CREATE TABLE forget_log (
    seq          bigserial PRIMARY KEY,
    user_hash    uuid NOT NULL,
    agent_id     text NOT NULL DEFAULT '',
    forgotten_at timestamptz NOT NULL DEFAULT now()
);

-- The forgotten ids are let go of by age.
CREATE INDEX forgotten_by_age ON forgotten (forgotten_at);
