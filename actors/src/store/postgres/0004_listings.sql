-- Listings read newest first and stop at their limit: an index in each
-- listing's order, so a page reads what it returns.

-- One agent's sessions by start time (every user's).
CREATE INDEX sessions_by_agent ON sessions (agent_id, started_at, session_id);
-- An agent's summaries by period end (every type's), and one user's.
CREATE INDEX summaries_by_end ON summaries (agent_id, period_end, summary_id);
CREATE INDEX summaries_by_user_end ON summaries (agent_id, user_id, period_end, summary_id);
-- An agent's dead letters, oldest first.
CREATE INDEX dead_letters_by_agent ON dead_letters (agent_id, failed_at, session_id);
