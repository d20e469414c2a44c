-- Fencing of the old leader. leader_epoch holds one row: the epoch that
-- the replica holding the leader lock took when it acquired it (each
-- acquisition adds one). ops.epoch is the epoch of the leader that owns an
-- op: a new leader adopts every open op in the same transaction that
-- raises the epoch, and every op write names its writer's epoch
-- (UPDATE ... WHERE id = $1 AND epoch = $2), so a replica that lost the
-- lock but does not know it yet cannot advance an op any more.

-- +goose Up
CREATE TABLE leader_epoch (
    id          boolean PRIMARY KEY DEFAULT true CONSTRAINT leader_epoch_one_row CHECK (id),
    epoch       bigint NOT NULL DEFAULT 0 CONSTRAINT leader_epoch_nonnegative CHECK (epoch >= 0),
    holder_pid  integer NOT NULL DEFAULT 0,
    acquired_at timestamptz
);
INSERT INTO leader_epoch DEFAULT VALUES;
ALTER TABLE ops ADD COLUMN epoch bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE ops DROP COLUMN epoch;
DROP TABLE leader_epoch;
