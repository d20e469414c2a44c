-- Why a node that had been ready no longer serves its side (kubelet
-- NotReady or unreachable, NodeManager LOST or UNHEALTHY) and since when,
-- as its side reports it: broker.Node.Down and DownSince. Empty while the
-- node is up. Stored so that readers of the node table (the API, the
-- dashboard, gpubroker_node_unhealthy) see nodes that are down on their
-- side, not only those whose agent reports GPU failures.

-- +goose Up
ALTER TABLE nodes ADD COLUMN down text NOT NULL DEFAULT '',
    ADD COLUMN down_since timestamptz;

-- +goose Down
ALTER TABLE nodes DROP COLUMN down, DROP COLUMN down_since;
