-- gpubroker's initial schema: tenants and their queue/namespace mappings,
-- pools, nodes, the live demand ledger and its closed history, the ops
-- journal, decisions, capacity samples and API tokens.
--
-- Constraint names are stable: the store maps a violated constraint to the
-- API field it guards (store/errors.go).

-- +goose Up
CREATE TABLE tenants (
    name            text PRIMARY KEY
        CONSTRAINT tenants_name_format CHECK (name ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    base_priority   bigint NOT NULL DEFAULT 0,
    guaranteed_gpus integer NOT NULL DEFAULT 0
        CONSTRAINT tenants_guaranteed_gpus_nonnegative CHECK (guaranteed_gpus >= 0),
    max_gpus        integer NOT NULL
        CONSTRAINT tenants_max_gpus_nonnegative CHECK (max_gpus >= 0),
    weight          double precision NOT NULL DEFAULT 1
        CONSTRAINT tenants_weight_positive CHECK (weight > 0 AND weight <= 1000000),
    admins          text[] NOT NULL DEFAULT '{}',
    version         bigint NOT NULL DEFAULT 1,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tenants_max_ge_guaranteed CHECK (max_gpus >= guaranteed_gpus)
);

-- A YARN queue or a namespace belongs to at most one tenant.
CREATE TABLE tenant_yarn_queues (
    queue  text PRIMARY KEY CONSTRAINT tenant_yarn_queues_not_empty CHECK (queue <> ''),
    tenant text NOT NULL REFERENCES tenants (name) ON UPDATE CASCADE ON DELETE CASCADE
);
CREATE INDEX tenant_yarn_queues_tenant ON tenant_yarn_queues (tenant);

CREATE TABLE tenant_namespaces (
    namespace text PRIMARY KEY CONSTRAINT tenant_namespaces_not_empty CHECK (namespace <> ''),
    tenant    text NOT NULL REFERENCES tenants (name) ON UPDATE CASCADE ON DELETE CASCADE
);
CREATE INDEX tenant_namespaces_tenant ON tenant_namespaces (tenant);

CREATE TABLE pools (
    name              text PRIMARY KEY
        CONSTRAINT pools_name_format CHECK (name ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    provider          text NOT NULL DEFAULT 'aws',
    grp               text NOT NULL DEFAULT '',
    gpu_model         text NOT NULL DEFAULT '',
    gpus_per_node     integer NOT NULL
        CONSTRAINT pools_gpus_per_node_nonnegative CHECK (gpus_per_node >= 0),
    min_nodes         integer NOT NULL DEFAULT 0
        CONSTRAINT pools_min_nodes_nonnegative CHECK (min_nodes >= 0),
    max_nodes         integer NOT NULL,
    labels            jsonb NOT NULL DEFAULT '{}',
    taints            jsonb NOT NULL DEFAULT '[]',
    sides             text NOT NULL DEFAULT 'shared'
        CONSTRAINT pools_sides_valid CHECK (sides IN ('yarn', 'k8s', 'shared')),
    price_per_hour    double precision NOT NULL DEFAULT 0
        CONSTRAINT pools_price_nonnegative CHECK (price_per_hour >= 0),
    expander_priority integer NOT NULL DEFAULT 0,
    backoff_until     timestamptz,
    backoff_reason    text NOT NULL DEFAULT '',
    version           bigint NOT NULL DEFAULT 1,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pools_max_ge_min CHECK (max_nodes >= min_nodes)
);

-- The single-row policy (id is always 1).
CREATE TABLE policy (
    id         integer PRIMARY KEY DEFAULT 1 CONSTRAINT policy_single_row CHECK (id = 1),
    body       jsonb NOT NULL,
    version    bigint NOT NULL DEFAULT 1,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE nodes (
    name            text PRIMARY KEY CONSTRAINT nodes_name_not_empty CHECK (name <> ''),
    instance_id     text UNIQUE,
    pool            text REFERENCES pools (name) ON UPDATE CASCADE ON DELETE SET NULL,
    owner           text NOT NULL DEFAULT 'none'
        CONSTRAINT nodes_owner_valid CHECK (owner IN ('yarn', 'k8s', 'none')),
    phase           text NOT NULL
        CONSTRAINT nodes_phase_valid CHECK (phase IN ('requested', 'booting', 'registered',
            'gpu-ready', 'active', 'draining', 'drained', 'terminating', 'gone')),
    phase_since     timestamptz NOT NULL DEFAULT now(),
    gpu_model       text NOT NULL DEFAULT '',
    gpus_total      integer NOT NULL DEFAULT 0
        CONSTRAINT nodes_gpus_total_nonnegative CHECK (gpus_total >= 0),
    gpus_allocated  integer NOT NULL DEFAULT 0
        CONSTRAINT nodes_gpus_allocated_nonnegative CHECK (gpus_allocated >= 0),
    labels          jsonb NOT NULL DEFAULT '{}',
    taints          jsonb NOT NULL DEFAULT '[]',
    utilisation     double precision NOT NULL DEFAULT -1
        CONSTRAINT nodes_utilisation_range CHECK (utilisation = -1 OR (utilisation >= 0 AND utilisation <= 1)),
    healthy         boolean NOT NULL DEFAULT true,
    health_reason   text NOT NULL DEFAULT '',
    protected       boolean NOT NULL DEFAULT false,
    underused_since timestamptz,
    work            jsonb NOT NULL DEFAULT '[]',
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX nodes_pool ON nodes (pool);

-- The latest complete observation of each source. A live demand row was
-- seen by its source's latest observation, so its last-seen time is
-- observed_at here: the ledger does not rewrite every row on every tick.
CREATE TABLE observations (
    source      text PRIMARY KEY CONSTRAINT observations_source_valid CHECK (source IN ('yarn', 'k8s')),
    observed_at timestamptz NOT NULL,
    generation  bigint NOT NULL DEFAULT 1,
    rows        integer NOT NULL DEFAULT 0
);

-- The live demand ledger: one row per pending unit of demand.
CREATE TABLE demand (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source        text NOT NULL CONSTRAINT demand_source_valid CHECK (source IN ('yarn', 'k8s')),
    key           text NOT NULL CONSTRAINT demand_key_not_empty CHECK (key <> ''),
    name          text NOT NULL DEFAULT '',
    tenant        text NOT NULL REFERENCES tenants (name) ON UPDATE CASCADE ON DELETE RESTRICT,
    queue         text NOT NULL DEFAULT '',
    priority      bigint NOT NULL DEFAULT 0,
    gpus_per_unit integer NOT NULL CONSTRAINT demand_gpus_per_unit_positive CHECK (gpus_per_unit > 0),
    units         integer NOT NULL CONSTRAINT demand_units_positive CHECK (units > 0),
    gang          boolean NOT NULL DEFAULT false,
    constraints   jsonb NOT NULL DEFAULT '{}',
    preemptible   boolean NOT NULL DEFAULT true,
    first_seen    timestamptz NOT NULL,
    wait_reason   text NOT NULL DEFAULT '',
    wait_detail   text NOT NULL DEFAULT '',
    CONSTRAINT demand_source_key_unique UNIQUE (source, key)
);
CREATE INDEX demand_first_seen ON demand (first_seen, id);
CREATE INDEX demand_tenant ON demand (tenant, first_seen, id);

-- Demand that left the ledger, why, and how long it waited.
CREATE TABLE demand_history (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source        text NOT NULL,
    key           text NOT NULL,
    name          text NOT NULL DEFAULT '',
    tenant        text NOT NULL,
    queue         text NOT NULL DEFAULT '',
    priority      bigint NOT NULL,
    gpus_per_unit integer NOT NULL,
    units         integer NOT NULL,
    gang          boolean NOT NULL,
    first_seen    timestamptz NOT NULL,
    closed_at     timestamptz NOT NULL,
    reason        text NOT NULL CONSTRAINT demand_history_reason_valid
        CHECK (reason IN ('scheduled', 'finished', 'deleted', 'preempted', 'vanished')),
    waited_ms     bigint NOT NULL CONSTRAINT demand_history_waited_nonnegative CHECK (waited_ms >= 0)
);
CREATE INDEX demand_history_closed ON demand_history (closed_at, id);
CREATE INDEX demand_history_tenant ON demand_history (tenant, closed_at);

-- The ops journal: accepted actions advanced step by step by the executor.
CREATE TABLE ops (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind         text NOT NULL CONSTRAINT ops_kind_valid
        CHECK (kind IN ('scale-up', 'scale-down', 'transfer', 'preempt', 'replace')),
    pool         text NOT NULL DEFAULT '',
    node         text NOT NULL DEFAULT '',
    target       integer NOT NULL DEFAULT 0 CONSTRAINT ops_target_nonnegative CHECK (target >= 0),
    to_owner     text NOT NULL DEFAULT '',
    serves       text[] NOT NULL DEFAULT '{}',
    reason       text NOT NULL,
    state        text NOT NULL DEFAULT 'pending'
        CONSTRAINT ops_state_valid CHECK (state IN ('pending', 'running', 'done', 'failed', 'cancelled')),
    step         text NOT NULL DEFAULT '',
    data         jsonb NOT NULL DEFAULT '{}',
    attempts     integer NOT NULL DEFAULT 0 CONSTRAINT ops_attempts_nonnegative CHECK (attempts >= 0),
    next_attempt timestamptz,
    last_error   text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
-- At most one unfinished op per node and one unfinished scale op per pool:
-- a second drain of the same node or a second concurrent resize is a conflict.
CREATE UNIQUE INDEX ops_one_open_per_node ON ops (node)
    WHERE node <> '' AND state IN ('pending', 'running');
CREATE UNIQUE INDEX ops_one_open_scale_per_pool ON ops (pool)
    WHERE kind = 'scale-up' AND state IN ('pending', 'running');
CREATE INDEX ops_open ON ops (next_attempt) WHERE state IN ('pending', 'running');

-- The audit of every decision and non-decision.
CREATE TABLE decisions (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     timestamptz NOT NULL,
    tick   bigint NOT NULL DEFAULT 0,
    kind   text NOT NULL,
    demand text NOT NULL DEFAULT '',
    tenant text NOT NULL DEFAULT '',
    pool   text NOT NULL DEFAULT '',
    node   text NOT NULL DEFAULT '',
    reason text NOT NULL,
    detail jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX decisions_at ON decisions (at DESC, id DESC);
CREATE INDEX decisions_demand ON decisions (demand, at DESC) WHERE demand <> '';

-- Capacity over time for the dashboard's charts: one row per side per sample.
CREATE TABLE capacity_samples (
    at             timestamptz NOT NULL,
    side           text NOT NULL CONSTRAINT capacity_samples_side_valid CHECK (side IN ('yarn', 'k8s', 'none')),
    gpus_busy      integer NOT NULL CONSTRAINT capacity_samples_busy_nonnegative CHECK (gpus_busy >= 0),
    gpus_idle      integer NOT NULL CONSTRAINT capacity_samples_idle_nonnegative CHECK (gpus_idle >= 0),
    gpus_in_flight integer NOT NULL CONSTRAINT capacity_samples_in_flight_nonnegative CHECK (gpus_in_flight >= 0),
    gpus_pending   integer NOT NULL CONSTRAINT capacity_samples_pending_nonnegative CHECK (gpus_pending >= 0),
    PRIMARY KEY (at, side)
);

-- API bearer tokens, stored as SHA-256 hashes; the token itself is shown once.
CREATE TABLE api_tokens (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text NOT NULL DEFAULT '',
    hash         bytea NOT NULL CONSTRAINT api_tokens_hash_unique UNIQUE
        CONSTRAINT api_tokens_hash_length CHECK (length(hash) = 32),
    role         text NOT NULL CONSTRAINT api_tokens_role_valid
        CHECK (role IN ('admin', 'tenant-admin', 'viewer', 'agent')),
    tenant       text REFERENCES tenants (name) ON UPDATE CASCADE ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz,
    CONSTRAINT api_tokens_tenant_admin_has_tenant CHECK ((role = 'tenant-admin') = (tenant IS NOT NULL))
);

-- +goose Down
DROP TABLE api_tokens;
DROP TABLE capacity_samples;
DROP TABLE decisions;
DROP TABLE ops;
DROP TABLE demand_history;
DROP TABLE demand;
DROP TABLE observations;
DROP TABLE nodes;
DROP TABLE policy;
DROP TABLE pools;
DROP TABLE tenant_namespaces;
DROP TABLE tenant_yarn_queues;
DROP TABLE tenants;
