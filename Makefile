# gpubroker — build, test and run.
#
#   make test    everything CI runs: formatting, go.mod tidiness, vet,
#                staticcheck, and all tests
#   make lint    the checks alone, without the tests
#   make build   the gpubroker binary in bin/
#   make fuzz    fuzz every target for FUZZTIME (10s) each
#   make bench   benchmarks and harnesses at production size (they print
#                figures; they never fail on time)
#   make replay  replay the openb GPU trace against gpubroker and the baselines
#   make replay-migrate  the same with checkpoint-aligned migration on

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
# Tests that need real components (PostgreSQL, Kubernetes, Hadoop, moto)
# build or install them on first use, cached outside the repository in
# $(GPUBROKER_CACHE) (default ~/.cache/gpubroker).
export GPUBROKER_CACHE ?= $(HOME)/.cache/gpubroker

.PHONY: test lint vet fmt-check tidy-check staticcheck build bench test-deps demo demo-fleet replay replay-fleet replay-migrate

test: lint test-deps
	$(GO) test -count=1 -timeout 75m ./...
	FUZZTIME=$(CI_FUZZTIME) GO=$(GO) test/fuzz.sh

lint: fmt-check tidy-check vet staticcheck

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# go.mod and go.sum are exactly what the imports need (direct dependencies
# not marked // indirect); prints the diff and fails otherwise.
tidy-check:
	$(GO) mod tidy -diff

vet:
	$(GO) vet ./...

# staticcheck (honnef.co/go/tools), built from its module into
# $(GPUBROKER_CACHE)/bin on first use by scripts/install-staticcheck.sh, which
# pins the version; its analysis cache lives in $(GPUBROKER_CACHE)/staticcheck
# (a cold one costs minutes: it analyses every dependency once).
staticcheck:
	@sc="$$(GO=$(GO) scripts/install-staticcheck.sh)" && echo "$$sc ./..." && \
	STATICCHECK_CACHE="$(abspath $(GPUBROKER_CACHE))/staticcheck" "$$sc" ./...

# Warm the caches of the real test components before the tests run, so the
# per-package test timeouts measure tests rather than cold builds.
# scripts/test-deps.sh runs the installers in two lanes side by side (those
# that may take apt's lock in one).
test-deps:
	@scripts/test-deps.sh

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/gpubroker ./cmd/gpubroker

# The whole product on this machine, with simulated clusters.
demo:
	$(GO) run -ldflags "$(LDFLAGS)" ./cmd/gpubroker demo

# The same on a fleet of 40 owned hosts and no cloud (fleet pools).
demo-fleet:
	$(GO) run -ldflags "$(LDFLAGS)" ./cmd/gpubroker demo --fleet 40

# Mutation fuzzing of every go test -fuzz target, FUZZTIME each (make
# test runs CI_FUZZTIME each); crashers land in <pkg>/testdata/fuzz/.
FUZZTIME    ?= 10s
CI_FUZZTIME ?= 3s
.PHONY: fuzz
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) test/fuzz.sh

# The tick at 5,000 nodes × 50,000 demands runs 10 ticks after building
# its world once (minutes); the read API harness drives gpubroker serve
# with wrk at 200 clients; the headline latency runs on 1,000 KWOK nodes
# and 10,000 running pods.
bench:
	$(GO) test -run '^$$' -bench . -benchmem $$($(GO) list ./... | grep -v '/test/bench$$')
	$(GO) test -run '^$$' -bench . -benchtime 10x -timeout 60m ./test/bench
	$(GO) test -count=1 -run '^TestReadAPIUnderWrk$$' -v -timeout 20m ./test/wrk -wrk.full
	$(GO) test -count=1 -run '^TestHeadlineLatency$$' -v -timeout 30m ./test/e2e -latency.nodes 1000 -latency.pods 10000

# Replay the openb trace (../shared/data/openb, or $(GPUBROKER_OPENB)) at
# several loads and seeds under gpubroker and the baselines; the report and
# plots go to $(REPLAY_OUT), the tables (and a reduced check run that
# TestReplayTablesMatchAFreshRun repeats) to docs/replay-tables.md, spliced
# into the README between its replay-tables markers, and the capacity plot
# to docs/replay-capacity.svg.
GPUBROKER_OPENB ?= $(abspath ../shared/data/openb/openb_pod_list_default.csv)
REPLAY_OUT      ?= bin/replay
REPLAY_LOADS    ?= 10,100,1000
REPLAY_SEEDS    ?= 5
replay:
	$(GO) run -ldflags "$(LDFLAGS)" ./cmd/gpubroker replay --trace $(GPUBROKER_OPENB) --load $(REPLAY_LOADS) --seeds $(REPLAY_SEEDS) --rule-off=false --out $(REPLAY_OUT) --tables docs/replay-tables.md --readme README.md
	cp $(REPLAY_OUT)/capacity.svg docs/replay-capacity.svg

# The same with checkpoint-aligned migration on (docs/replay-migrate.yaml)
# against the two per-side autoscalers, and with 1- and 2-GPU nodes offered
# too: tables to docs/replay-migrate.md and the README
# (TestReplayMigrateTablesMatchAFreshRun).
REPLAY_MIGRATE_SHAPES ?= 1,2
replay-migrate:
	$(GO) run -ldflags "$(LDFLAGS)" ./cmd/gpubroker replay --config docs/replay-migrate.yaml --trace $(GPUBROKER_OPENB) --policies gpubroker,per-side-autoscaler,safe-per-side-autoscaler --load $(REPLAY_LOADS) --seeds $(REPLAY_SEEDS) --rule-off=false --what-if-shapes $(REPLAY_MIGRATE_SHAPES) --tables docs/replay-migrate.md --readme README.md

# The same trace on a fleet of $(REPLAY_FLEET) owned nodes: gpubroker's
# hand-overs against a static split of the same nodes; the tables go to
# docs/replay-fleet.md and the README (TestReplayFleetTablesMatchAFreshRun).
REPLAY_FLEET       ?= 40
REPLAY_FLEET_LOADS ?= 1,10,100,1000
replay-fleet:
	$(GO) run -ldflags "$(LDFLAGS)" ./cmd/gpubroker replay --trace $(GPUBROKER_OPENB) --fleet $(REPLAY_FLEET) --load $(REPLAY_FLEET_LOADS) --seeds $(REPLAY_SEEDS) --tables docs/replay-fleet.md --readme README.md
