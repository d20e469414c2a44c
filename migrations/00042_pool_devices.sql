-- Pools describe their devices: a MIG pool's nodes offer MIG slices of one
-- profile (mig_per_gpu per GPU) instead of whole GPUs, and a pool may state
-- each GPU's memory, so demand that selects GPUs by memory can be matched
-- while the pool is at zero. Nodes remember the MIG profile their slices
-- are counted in and the memory their devices publish.

-- +goose Up
ALTER TABLE pools
    ADD COLUMN mig_profile text NOT NULL DEFAULT '',
    ADD COLUMN mig_per_gpu integer NOT NULL DEFAULT 0,
    ADD COLUMN gpu_memory_mib integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT pools_mig_per_gpu_range CHECK (mig_per_gpu >= 0 AND mig_per_gpu <= 7),
    ADD CONSTRAINT pools_gpu_memory_nonnegative CHECK (gpu_memory_mib >= 0);
ALTER TABLE nodes
    ADD COLUMN mig_profile text NOT NULL DEFAULT '',
    ADD COLUMN gpu_memory_mib integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE nodes DROP COLUMN gpu_memory_mib, DROP COLUMN mig_profile;
ALTER TABLE pools DROP COLUMN gpu_memory_mib, DROP COLUMN mig_per_gpu, DROP COLUMN mig_profile;
