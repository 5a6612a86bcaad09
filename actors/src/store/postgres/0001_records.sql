-- recall's records in PostgreSQL: one table per record kind. Each row
-- keeps the record as the JSON the sled backend stores (`body`), beside
-- the columns it is found and ordered by. `json`, not `jsonb`: it keeps
-- the text as written, and takes every string serde writes (`jsonb`
-- refuses a NUL character, and one such turn would hold back the batch it
-- arrived in).

CREATE TABLE sessions (
    session_id  uuid PRIMARY KEY,
    agent_id    text NOT NULL,
    user_id     text NOT NULL,
    started_at  timestamptz NOT NULL,
    ended_at    timestamptz,
    open        boolean NOT NULL,
    body        json NOT NULL
);
CREATE INDEX sessions_by_user ON sessions (agent_id, user_id, started_at, session_id);
CREATE INDEX sessions_by_start ON sessions (started_at, session_id);
CREATE INDEX sessions_open ON sessions (started_at, session_id) WHERE open;

CREATE TABLE turns (
    session_id  uuid NOT NULL,
    seq         bigint NOT NULL,
    body        json NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE summaries (
    summary_id  uuid PRIMARY KEY,
    agent_id    text NOT NULL,
    user_id     text NOT NULL,
    -- 0 session, 1 daily, 2 weekly, 3 topic
    kind        smallint NOT NULL,
    period_end  timestamptz NOT NULL,
    current     boolean NOT NULL,
    body        json NOT NULL
);
CREATE INDEX summaries_by_kind ON summaries (agent_id, kind, period_end, summary_id);
CREATE INDEX summaries_by_user ON summaries (agent_id, user_id) WHERE current;

-- Agent-wide blocks have user_id ''; a block drawn from one user's
-- conversations is also kept under that user.
CREATE TABLE blocks (
    agent_id        text NOT NULL,
    user_id         text NOT NULL,
    -- the label's position in BlockLabel
    label           smallint NOT NULL,
    source_user_id  text,
    body            json NOT NULL,
    PRIMARY KEY (agent_id, user_id, label)
);

CREATE TABLE agents (
    agent_id            text PRIMARY KEY,
    summary_version     bigint NOT NULL DEFAULT 0,
    context_version     bigint NOT NULL DEFAULT 0,
    persistent_context  json NOT NULL DEFAULT '[]',
    context_expires_at  timestamptz
);

CREATE TABLE reflection_queue (
    session_id   uuid PRIMARY KEY,
    agent_id     text NOT NULL,
    enqueued_at  timestamptz NOT NULL,
    body         json NOT NULL
);

CREATE TABLE dead_letters (
    session_id  uuid PRIMARY KEY,
    agent_id    text NOT NULL,
    user_id     text NOT NULL,
    failed_at   timestamptz NOT NULL,
    body        json NOT NULL
);

CREATE TABLE facts (
    fact_id       uuid PRIMARY KEY,
    agent_id      text NOT NULL,
    user_id       text NOT NULL,
    shared        boolean NOT NULL,
    extracted_at  timestamptz NOT NULL,
    body          json NOT NULL
);
CREATE INDEX facts_by_user ON facts (agent_id, user_id);
CREATE INDEX facts_shared ON facts (agent_id) WHERE shared;

-- A deleted fact's normalized content, hashed (never the content), so a
-- replay does not bring it back.
CREATE TABLE fact_tombstones (
    agent_id      text NOT NULL,
    user_id       text NOT NULL,
    content_hash  uuid NOT NULL,
    PRIMARY KEY (agent_id, user_id, content_hash)
);

CREATE TABLE rollup_cursors (
    agent_id  text NOT NULL,
    -- 0 daily, 1 weekly
    level     smallint NOT NULL,
    period    date NOT NULL,
    PRIMARY KEY (agent_id, level)
);

-- Session summaries and facts the Rollup actor has not taken in yet. The
-- key orders them by when they happened (the sled backend's inbox key).
CREATE TABLE rollup_inbox (
    key       bytea PRIMARY KEY,
    item_id   uuid NOT NULL,
    agent_id  text NOT NULL
);
CREATE INDEX rollup_inbox_by_item ON rollup_inbox (item_id);

CREATE TABLE topics (
    topic_id    uuid PRIMARY KEY,
    agent_id    text NOT NULL,
    user_id     text NOT NULL,
    created_at  timestamptz NOT NULL,
    body        json NOT NULL
);
CREATE INDEX topics_by_user ON topics (agent_id, user_id);

-- Vectors of summaries, facts and turns, by the item's id.
CREATE TABLE embeddings (
    item_id  uuid PRIMARY KEY,
    vector   bytea NOT NULL
);

CREATE TABLE meta (
    key    text PRIMARY KEY,
    value  text NOT NULL
);
