-- The audit trail of writes through the API and the CLI: who (a token's
-- name and role, a client certificate's subject, or the CLI's user), when,
-- what (method, route pattern, target) and the values before and after.
-- No foreign keys: the history outlives the tenants and tokens it names.
-- API tokens get an optional expiry.

-- +goose Up
CREATE TABLE audit_log (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    actor      text NOT NULL CONSTRAINT audit_log_actor_not_empty CHECK (actor <> ''),
    actor_kind text NOT NULL CONSTRAINT audit_log_actor_kind_valid
        CHECK (actor_kind IN ('token', 'certificate', 'cli')),
    role       text NOT NULL DEFAULT '',
    token_id   bigint,
    method     text NOT NULL,
    route      text NOT NULL,
    target     text NOT NULL DEFAULT '',
    tenant     text NOT NULL DEFAULT '',
    status     integer NOT NULL,
    before     jsonb,
    after      jsonb
);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_tenant_id ON audit_log (tenant, id);
CREATE INDEX audit_log_target_id ON audit_log (target, id);

ALTER TABLE api_tokens ADD COLUMN expires_at timestamptz;

-- +goose Down
ALTER TABLE api_tokens DROP COLUMN expires_at;
DROP TABLE audit_log;
