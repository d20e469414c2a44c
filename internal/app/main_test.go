package app

import (
	"testing"

	"github.com/gpubroker/gpubroker/test/pgtest"
)

var pg *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &pg) }
