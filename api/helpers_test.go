package api_test

import (
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/store"
)

func obs(src broker.Source, at time.Time, ds ...broker.Demand) store.Observation {
	return store.Observation{Source: src, At: at, Demand: ds}
}
