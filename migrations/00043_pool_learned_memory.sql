-- A pool that does not state its GPUs' memory learns it from its live
-- nodes (their DRA devices' memory capacity, or the node agent's NVML
-- reading) and remembers it here, so demand that selects GPUs by memory
-- can still be matched once the pool is at zero again.

-- +goose Up
ALTER TABLE pools
    ADD COLUMN learned_gpu_memory_mib integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT pools_learned_gpu_memory_nonnegative CHECK (learned_gpu_memory_mib >= 0);

-- +goose Down
ALTER TABLE pools DROP COLUMN learned_gpu_memory_mib;
