-- How long a tenant's preempted YARN containers may take to exit after
-- GRACEFUL_SHUTDOWN before that container alone gets FORCEFUL_SHUTDOWN:
-- broker.Tenant.EvictGrace, in milliseconds; 0 for the broker's
-- yarn.evict_grace. At most an hour (broker.MaxEvictGrace).

-- +goose Up
ALTER TABLE tenants ADD COLUMN evict_grace_ms bigint NOT NULL DEFAULT 0
    CONSTRAINT tenants_evict_grace_range CHECK (evict_grace_ms >= 0 AND evict_grace_ms <= 3600000);

-- +goose Down
ALTER TABLE tenants DROP COLUMN evict_grace_ms;
