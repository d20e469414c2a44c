-- The YARN partition (node label) a pool's NodeManagers join; empty for the
-- default partition. The planner serves labelled YARN demand only from
-- pools and nodes of its partition.

-- +goose Up
ALTER TABLE pools ADD COLUMN partition text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE pools DROP COLUMN partition;
