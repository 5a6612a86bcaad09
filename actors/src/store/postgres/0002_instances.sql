-- Several recall instances over one schema.

-- Running instances, each renewing its heartbeat; one whose heartbeat is
-- older than its lease is gone, and its open sessions and claimed
-- reflections are taken over.
CREATE TABLE instances (
    instance_id   uuid PRIMARY KEY,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    lease_secs    integer NOT NULL
);

-- The instance that has a session's call (NULL: none, or from before).
ALTER TABLE sessions ADD COLUMN instance_id uuid;

-- A reflection is claimed by one instance until its claim expires.
ALTER TABLE reflection_queue ADD COLUMN claimed_by uuid;
ALTER TABLE reflection_queue ADD COLUMN claimed_until timestamptz;

-- Work one instance at a time does (rollups, the watchdog).
CREATE TABLE leases (
    name        text PRIMARY KEY,
    holder      uuid NOT NULL,
    expires_at  timestamptz NOT NULL
);

-- Ids of sessions and summaries a forget removed: a write about them
-- (the last turns of a call on another instance, a reflection or rollup
-- running meanwhile) is dropped, on every instance. Ids only, never
-- content.
CREATE TABLE forgotten (
    item_id     uuid PRIMARY KEY,
    forgotten_at timestamptz NOT NULL DEFAULT now()
);

-- One current daily or weekly rollup per (agent, user, period), whichever
-- instance made it.
ALTER TABLE summaries ADD COLUMN period_start timestamptz;
UPDATE summaries SET period_start = (body->>'period_start')::timestamptz;
ALTER TABLE summaries ALTER COLUMN period_start SET NOT NULL;
CREATE UNIQUE INDEX summaries_one_current_rollup
    ON summaries (agent_id, user_id, kind, period_start)
    WHERE current AND kind IN (1, 2);
