package replay

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"path/filepath"
	"slices"
	"strings"
)

// DeriveSizes builds a derived trace from an openb pod list with a
// timeline and a list with sizes only (openb_pod_list_multigpu50.csv: the
// default list's rows, then about 900 more multi-GPU tasks, so that half
// the GPU tasks ask for several GPUs). Row i of the timeline takes the GPU
// request (num_gpu, gpu_milli) of row i of the sizes list; every sizes row
// past the timeline's end is appended as a new task with the timeline
// (arrival, run time, QoS, allowed models) of a GPU task of the timeline
// chosen by a hash of its name, so the mix of requests changes and the
// arrival and run-time distributions do not. It returns the derived list
// as CSV, for ReadTrace, and what it did, for the report.
func DeriveSizes(timelineName string, timeline io.Reader, sizesName string, sizes io.Reader) (io.Reader, string, error) {
	trows, err := readCSV(timelineName, timeline)
	if err != nil {
		return nil, "", err
	}
	srows, err := readCSV(sizesName, sizes)
	if err != nil {
		return nil, "", err
	}
	th, sh := trows[0], srows[0]
	col := func(name string, header []string, c string) (int, error) {
		j := slices.IndexFunc(header, func(h string) bool { return strings.TrimSpace(h) == c })
		if j < 0 {
			return 0, &TraceError{File: name, Line: 1, Column: c, Problem: fmt.Sprintf("missing column (the header has %s)", strings.Join(header, ","))}
		}
		return j, nil
	}
	var tc, sc [3]int // name, num_gpu, gpu_milli
	for i, c := range []string{"name", "num_gpu", "gpu_milli"} {
		if tc[i], err = col(timelineName, th, c); err != nil {
			return nil, "", err
		}
		if sc[i], err = col(sizesName, sh, c); err != nil {
			return nil, "", err
		}
	}
	var donors []int // timeline rows of GPU tasks
	for i := 1; i < len(trows); i++ {
		if g := strings.TrimSpace(trows[i][tc[1]]); g != "" && g != "0" {
			donors = append(donors, i)
		}
	}
	if len(donors) == 0 {
		return nil, "", &TraceError{File: timelineName, Line: 1, Problem: "has no GPU task to lend its timeline"}
	}
	out := [][]string{th}
	changed := 0
	for i := 1; i < len(trows); i++ {
		rec := trows[i]
		if i < len(srows) && (rec[tc[1]] != srows[i][sc[1]] || rec[tc[2]] != srows[i][sc[2]]) {
			rec[tc[1]], rec[tc[2]] = srows[i][sc[1]], srows[i][sc[2]]
			changed++
		}
		out = append(out, rec)
	}
	added := 0
	for i := len(trows); i < len(srows); i++ {
		h := fnv.New32a()
		h.Write([]byte(srows[i][sc[0]]))
		rec := slices.Clone(trows[donors[int(h.Sum32()%uint32(len(donors)))]])
		rec[tc[0]], rec[tc[1]], rec[tc[2]] = srows[i][sc[0]], srows[i][sc[1]], srows[i][sc[2]]
		out = append(out, rec)
		added++
	}
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	if err := w.WriteAll(out); err != nil {
		return nil, "", err
	}
	what := fmt.Sprintf("derived trace: %d of %s's rows take the GPU request of the same row of %s; its %d rows past them are added as tasks, each with the arrival, run time, QoS and models of a GPU task of %s chosen by a hash of its name",
		changed, filepath.Base(timelineName), filepath.Base(sizesName), added, filepath.Base(timelineName))
	return &b, what, nil
}

// readCSV reads a whole CSV file, its header first.
func readCSV(name string, r io.Reader) ([][]string, error) {
	cr := csv.NewReader(r)
	rows, err := cr.ReadAll()
	if err != nil {
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			return nil, &TraceError{File: name, Line: pe.Line, Problem: pe.Err.Error()}
		}
		return nil, &TraceError{File: name, Line: 1, Problem: err.Error()}
	}
	if len(rows) == 0 {
		return nil, &TraceError{File: name, Line: 1, Problem: "is empty: want a header"}
	}
	return rows, nil
}
