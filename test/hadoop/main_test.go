package hadoop_test

import (
	"testing"

	"github.com/gpubroker/gpubroker/test/pgtest"
)

// pg is the package's PostgreSQL server, for the broker suite's ledgers.
var pg *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &pg) }
