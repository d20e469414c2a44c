package replay

import (
	"strings"
	"testing"
)

// TestDeriveSizes: a row of the timeline takes the request of the same
// row of the sizes list; a sizes row past the timeline's end becomes a
// task with the timeline of a GPU task of the timeline (never a CPU-only
// one), the same for the same name; a list without num_gpu is refused,
// naming the file and the column.
func TestDeriveSizes(t *testing.T) {
	timeline := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n" +
		"a,1000,1024,1,1000,,LS,Running,0,600,0\n" +
		"cpu,1000,1024,0,0,,BE,Running,10,900,10\n" +
		"b,1000,1024,1,500,V100M16,BE,Running,60,3600,60\n"
	sizes := "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" +
		"a,1000,1024,1,1000\n" +
		"cpu,1000,1024,0,0\n" +
		"b,1000,1024,2,1000\n" +
		"extra-8,88000,327680,8,1000\n"
	r, what, err := DeriveSizes("default.csv", strings.NewReader(timeline), "multi.csv", strings.NewReader(sizes))
	if err != nil {
		t.Fatal(err)
	}
	tasks, st, err := ReadTrace("derived", r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(what, "1 of default.csv's rows") || !strings.Contains(what, "1 rows past them") {
		t.Errorf("what = %q", what)
	}
	got := map[string]Task{}
	for _, tk := range tasks {
		got[tk.Name] = tk
	}
	if st.Tasks != 3 || got["b"].GPUs != 2 || got["a"].GPUs != 1 {
		t.Fatalf("tasks %+v: want a (1 GPU), b now 2 GPUs, and the extra one", tasks)
	}
	x, ok := got["extra-8"]
	if !ok || x.GPUs != 8 {
		t.Fatalf("extra task %+v: want 8 GPUs", x)
	}
	if x.Run != got["a"].Run && x.Run != got["b"].Run {
		t.Fatalf("extra task runs %s: want the run time of a GPU task of the timeline (a %s, b %s)", x.Run, got["a"].Run, got["b"].Run)
	}
	_, _, err = DeriveSizes("default.csv", strings.NewReader(timeline), "bad.csv", strings.NewReader("name,num_gpus\nx,1\n"))
	if err == nil || !strings.Contains(err.Error(), "bad.csv") || !strings.Contains(err.Error(), "num_gpu") {
		t.Fatalf("a sizes list without num_gpu: %v, want an error naming bad.csv and num_gpu", err)
	}
}
