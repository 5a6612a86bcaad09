-- The mirror's ledger: which passages each remote agent (a Letta agent)
-- holds of which summary. It names no user.
CREATE TABLE mirror_ledger (
    remote      text NOT NULL,
    summary_id  uuid NOT NULL,
    -- The entry: its passage ids there, the hash of the text written.
    body        json NOT NULL,
    PRIMARY KEY (remote, summary_id)
);
