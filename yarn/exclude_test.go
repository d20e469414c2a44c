package yarn_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/yarn"
)

func TestExcludeFileKeepsForeignHostsAndIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "exclude.xml")
	// An operator's file, in the form Hadoop documents.
	if err := os.WriteFile(path, []byte(`<?xml version="1.0"?>
<hosts>
  <host><name>ops-1.example</name></host>
  <host><name>ops-2.example</name><timeout>300</timeout></host>
</hosts>
`), 0o640); err != nil {
		t.Fatal(err)
	}
	f, err := yarn.NewExcludeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	changed, err := f.Add("gpu-7", 90*time.Second+400*time.Millisecond)
	if err != nil || !changed {
		t.Fatalf("Add = %v, %v; want changed", changed, err)
	}
	want := []yarn.ExcludedHost{{Name: "ops-1.example"}, {Name: "ops-2.example", Timeout: 300 * time.Second}, {Name: "gpu-7", Timeout: 90 * time.Second}}
	hs, err := f.Hosts()
	if err != nil || !slices.Equal(hs, want) {
		t.Fatalf("Hosts = %+v, %v; want %+v", hs, err, want)
	}
	raw, _ := os.ReadFile(path)
	if !strings.Contains(string(raw), "<host>\n    <name>gpu-7</name>\n    <timeout>90</timeout>\n  </host>") {
		t.Fatalf("file does not hold gpu-7 with its timeout in the XML form:\n%s", raw)
	}
	st1, _ := os.Stat(path)
	if st1.Mode().Perm() != 0o640 {
		t.Fatalf("mode = %v, want 0640 kept", st1.Mode().Perm())
	}
	// Again, with another timeout: the running entry is kept, the file
	// not rewritten.
	if changed, err := f.Add("gpu-7", time.Hour); err != nil || changed {
		t.Fatalf("second Add = %v, %v; want unchanged", changed, err)
	}
	if raw2, _ := os.ReadFile(path); string(raw2) != string(raw) {
		t.Fatalf("second Add rewrote the file")
	}
	if changed, err := f.Remove("gpu-7"); err != nil || !changed {
		t.Fatalf("Remove = %v, %v", changed, err)
	}
	if changed, err := f.Remove("gpu-7"); err != nil || changed {
		t.Fatalf("second Remove = %v, %v; want unchanged", changed, err)
	}
	hs, _ = f.Hosts()
	if !slices.Equal(hs, want[:2]) {
		t.Fatalf("after Remove: %+v, want the operator's hosts %+v", hs, want[:2])
	}
	// No temporary files are left behind: the file and its lock file.
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{".exclude.xml.lock", "exclude.xml"}) {
		t.Fatalf("directory holds %v, want only the exclude file and its lock file", names)
	}
}

func TestExcludeFilePlainFormAndErrors(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "exclude")
	if err := os.WriteFile(plain, []byte("a b # comment\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ := yarn.NewExcludeFile(plain)
	if _, err := f.Add("d", time.Minute); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(plain)
	if string(raw) != "a\nb\nc\nd\n" {
		t.Fatalf("plain file = %q", raw)
	}
	if ok, _ := f.Contains("b"); !ok {
		t.Fatal("b not excluded")
	}

	missing, _ := yarn.NewExcludeFile(filepath.Join(dir, "none.xml"))
	if hs, err := missing.Hosts(); err != nil || len(hs) != 0 {
		t.Fatalf("missing file: %v, %v", hs, err)
	}
	if _, err := missing.Add("x", 0); err != nil {
		t.Fatal(err)
	}
	if hs, _ := missing.Hosts(); !slices.Equal(hs, []yarn.ExcludedHost{{Name: "x"}}) {
		t.Fatalf("created file: %+v", hs)
	}
	if _, err := missing.Add("bad host", 0); err == nil {
		t.Fatal("a host name with a space was accepted")
	}

	broken := filepath.Join(dir, "broken.xml")
	_ = os.WriteFile(broken, []byte("<hosts><host><name>a</name><timeout>soon</timeout></host></hosts>"), 0o644)
	bf, _ := yarn.NewExcludeFile(broken)
	if _, err := bf.Add("b", 0); err == nil || !strings.Contains(err.Error(), "soon") {
		t.Fatalf("Add on a file with a bad timeout: %v, want a parse error", err)
	}
	if raw, _ := os.ReadFile(broken); !strings.Contains(string(raw), "soon") {
		t.Fatal("a file that did not parse was overwritten")
	}
}

// BenchmarkExcludeFileAddRemove measures one Add and one Remove (each a
// parse and an atomic, fsynced rewrite) on a file holding 1000 hosts of
// an operator's.
func BenchmarkExcludeFileAddRemove(b *testing.B) {
	path := filepath.Join(b.TempDir(), "exclude.xml")
	var sb strings.Builder
	sb.WriteString("<hosts>\n")
	for i := range 1000 {
		sb.WriteString("<host><name>ops-" + strconv.Itoa(i) + "</name><timeout>60</timeout></host>\n")
	}
	sb.WriteString("</hosts>\n")
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	f, _ := yarn.NewExcludeFile(path)
	for b.Loop() {
		if _, err := f.Add("gpu-1", time.Minute); err != nil {
			b.Fatal(err)
		}
		if _, err := f.Remove("gpu-1"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/add+remove")
}
