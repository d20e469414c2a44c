-- A migration (checkpoint-aligned: consolidation moves tasks off an
-- underused node right after their checkpoints, then terminates the
-- emptied node) is an op kind of its own.

-- +goose Up
ALTER TABLE ops DROP CONSTRAINT ops_kind_valid;
ALTER TABLE ops ADD CONSTRAINT ops_kind_valid
    CHECK (kind IN ('scale-up', 'scale-down', 'transfer', 'preempt', 'replace', 'migrate'));

-- +goose Down
ALTER TABLE ops DROP CONSTRAINT ops_kind_valid;
ALTER TABLE ops ADD CONSTRAINT ops_kind_valid
    CHECK (kind IN ('scale-up', 'scale-down', 'transfer', 'preempt', 'replace'));
