-- Agent credentials bound to nodes, and agent reports judged by the
-- server's clock (issue 25).
--
-- api_tokens.nodes / pool: an agent token reports only for the nodes it
-- names, or for the nodes the broker knows in its pool. An agent token
-- with neither (made before this migration) may report for no node.
--
-- node_reports.prev_body / prev_received_at: the report before the latest,
-- so that an unhealthy verdict needs two consecutive reports. The existing
-- received_at column is the server's receive time, which decides
-- freshness; the agent's own "at" only orders reports.

-- +goose Up
ALTER TABLE api_tokens ADD COLUMN nodes text[],
    ADD COLUMN pool text,
    ADD CONSTRAINT api_tokens_binding_agent_only
        CHECK (role = 'agent' OR (nodes IS NULL AND pool IS NULL)),
    ADD CONSTRAINT api_tokens_binding_one
        CHECK (nodes IS NULL OR pool IS NULL);
ALTER TABLE node_reports ADD COLUMN prev_body jsonb,
    ADD COLUMN prev_received_at timestamptz;
CREATE INDEX node_reports_received_at ON node_reports (received_at);

-- +goose Down
DROP INDEX node_reports_received_at;
ALTER TABLE node_reports DROP COLUMN prev_body, DROP COLUMN prev_received_at;
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_binding_one,
    DROP CONSTRAINT api_tokens_binding_agent_only,
    DROP COLUMN nodes, DROP COLUMN pool;
