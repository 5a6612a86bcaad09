-- Whose words a fact came from: the user's or the agent side's. Every fact
-- stored before this was the user's. (The fact's JSON body holds it too;
-- the column is for readers of the tables and for queries by side.)
ALTER TABLE facts ADD COLUMN speaker text NOT NULL DEFAULT 'user'
    CHECK (speaker IN ('user', 'agent'));
