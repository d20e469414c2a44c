package e2e

import (
	"log/slog"
	"os"

	"github.com/gpubroker/gpubroker/store"
)

func storeDecisions(kind string) store.DecisionFilter {
	return store.DecisionFilter{Kind: kind, Limit: 10}
}

// testLogLevel is info, or debug with GPUBROKER_TEST_DEBUG=1 (per-tick timings).
func testLogLevel() slog.Level {
	if os.Getenv("GPUBROKER_TEST_DEBUG") == "1" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}
