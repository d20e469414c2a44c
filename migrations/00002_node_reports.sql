-- The latest report of each node's agent (GPU utilisation, health), pushed
-- to POST /api/v1/nodes/{name}/report. Only the newest report per node is
-- kept: reports are small and the latest one wins.

-- +goose Up
CREATE TABLE node_reports (
    node        text PRIMARY KEY CONSTRAINT node_reports_node_not_empty CHECK (node <> ''),
    at          timestamptz NOT NULL,
    body        jsonb NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE node_reports;
