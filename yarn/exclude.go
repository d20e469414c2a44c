package yarn

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ExcludedHost is one entry of the RM's exclude file.
type ExcludedHost struct {
	Name string
	// Timeout is the graceful decommission timeout of this host; zero when
	// the entry has none (the RM then uses the refreshNodes timeout or
	// yarn.resourcemanager.nodemanager-graceful-decommission-timeout-secs),
	// negative for an infinite one (-1 in the file: the RM waits for the
	// node's containers however long they run).
	Timeout time.Duration
}

// ExcludeFile is the RM's yarn.resourcemanager.nodes.exclude-path, on the RM
// host or a shared mount. A path ending in .xml is read and written in the
// XML form with per-host timeouts (<hosts><host><name>h</name><timeout>s
// </timeout></host></hosts>), as Hadoop's HostsFileReader decides by the
// name; any other path in the plain form, one host a line, without
// timeouts.
//
// Every host the broker does not touch is kept as it was, so operators may
// exclude hosts of their own in the same file. Writes are atomic (a
// temporary file in the same directory, fsync, rename, fsync of the
// directory), so the RM never reads half a file. Comments and unknown
// elements of the file are not preserved.
type ExcludeFile struct {
	path string
	mu   sync.Mutex // one read-modify-write at a time within this process
}

// NewExcludeFile returns the exclude file at path.
func NewExcludeFile(path string) (*ExcludeFile, error) {
	if path == "" {
		return nil, errors.New("exclude file: path must be set")
	}
	return &ExcludeFile{path: path}, nil
}

// Path returns the file's path.
func (f *ExcludeFile) Path() string { return f.path }

func (f *ExcludeFile) xmlForm() bool { return strings.HasSuffix(strings.ToLower(f.path), ".xml") }

// Hosts returns the file's entries in file order; a missing file has none.
func (f *ExcludeFile) Hosts() ([]ExcludedHost, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hs, _, err := f.read()
	return hs, err
}

// Contains reports whether host is excluded.
func (f *ExcludeFile) Contains(host string) (bool, error) {
	hs, err := f.Hosts()
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(hs, func(h ExcludedHost) bool { return h.Name == host }), nil
}

// Add excludes host with a graceful timeout (zero: none; negative:
// infinite, written as -1). An entry already there is kept as it is, so a
// repeated Add does not extend a timeout that has been running, with one
// exception: an infinite entry (a drain by attrition) is shortened to a
// finite timeout (a preemption). changed reports whether the file was
// written.
func (f *ExcludeFile) Add(host string, timeout time.Duration) (changed bool, err error) {
	if host == "" || strings.ContainsAny(host, " \t\r\n<>&,") {
		return false, fmt.Errorf("exclude file %s: bad host name %q", f.path, host)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	hs, mode, err := f.read()
	if err != nil {
		return false, err
	}
	if timeout < 0 {
		if !f.xmlForm() {
			// The plain form has no timeouts: the RM would use its default
			// (an hour unless configured) and cut the node's work off.
			return false, fmt.Errorf("exclude file %s: an infinite graceful timeout for %s needs the XML form (a path ending in .xml)", f.path, host)
		}
		timeout = -time.Second
	}
	if i := slices.IndexFunc(hs, func(h ExcludedHost) bool { return h.Name == host }); i >= 0 {
		if hs[i].Timeout >= 0 || timeout <= 0 {
			return false, nil
		}
		hs[i].Timeout = timeout.Truncate(time.Second)
		return true, f.write(hs, mode)
	}
	hs = append(hs, ExcludedHost{Name: host, Timeout: timeout.Truncate(time.Second)})
	return true, f.write(hs, mode)
}

// Remove takes host out of the file, keeping every other entry; changed
// reports whether it was there.
func (f *ExcludeFile) Remove(host string) (changed bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hs, mode, err := f.read()
	if err != nil {
		return false, err
	}
	n := len(hs)
	hs = slices.DeleteFunc(hs, func(h ExcludedHost) bool { return h.Name == host })
	if len(hs) == n {
		return false, nil
	}
	return true, f.write(hs, mode)
}

type xmlHosts struct {
	XMLName xml.Name  `xml:"hosts"`
	Hosts   []xmlHost `xml:"host"`
}

type xmlHost struct {
	Name    string `xml:"name"`
	Timeout string `xml:"timeout,omitempty"`
}

// read parses the file; a missing or empty file has no entries.
func (f *ExcludeFile) read() ([]ExcludedHost, fs.FileMode, error) {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0o644, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read exclude file %s: %w", f.path, err)
	}
	mode := fs.FileMode(0o644)
	if st, err := os.Stat(f.path); err == nil {
		mode = st.Mode().Perm()
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, mode, nil
	}
	var out []ExcludedHost
	if !f.xmlForm() {
		// HostsFileReader: whitespace-separated names, # starts a comment.
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line, _, _ := strings.Cut(sc.Text(), "#")
			for _, h := range strings.Fields(line) {
				out = append(out, ExcludedHost{Name: h})
			}
		}
		return out, mode, nil
	}
	var doc xmlHosts
	if err := xml.Unmarshal(b, &doc); err != nil {
		return nil, 0, fmt.Errorf("parse exclude file %s: %w", f.path, err)
	}
	for _, h := range doc.Hosts {
		name := strings.TrimSpace(h.Name)
		if name == "" {
			continue
		}
		e := ExcludedHost{Name: name}
		if t := strings.TrimSpace(h.Timeout); t != "" {
			secs, err := strconv.ParseInt(t, 10, 64)
			if err != nil {
				return nil, 0, fmt.Errorf("parse exclude file %s: host %q: timeout %q: %w", f.path, name, t, err)
			}
			e.Timeout = time.Duration(secs) * time.Second
		}
		out = append(out, e)
	}
	return out, mode, nil
}

func (f *ExcludeFile) encode(hs []ExcludedHost) ([]byte, error) {
	var buf bytes.Buffer
	if !f.xmlForm() {
		for _, h := range hs {
			buf.WriteString(h.Name + "\n")
		}
		return buf.Bytes(), nil
	}
	doc := xmlHosts{Hosts: []xmlHost{}}
	for _, h := range hs {
		x := xmlHost{Name: h.Name}
		switch {
		case h.Timeout < 0:
			x.Timeout = "-1"
		case h.Timeout > 0:
			x.Timeout = strconv.FormatInt(int64(h.Timeout/time.Second), 10)
		}
		doc.Hosts = append(doc.Hosts, x)
	}
	buf.WriteString(xml.Header)
	enc := xml.NewEncoder(&buf)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	buf.WriteString("\n")
	return buf.Bytes(), nil
}

// write replaces the file atomically.
func (f *ExcludeFile) write(hs []ExcludedHost, mode fs.FileMode) error {
	b, err := f.encode(hs)
	if err != nil {
		return fmt.Errorf("encode exclude file %s: %w", f.path, err)
	}
	dir := filepath.Dir(f.path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(f.path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write exclude file %s: %w", f.path, err)
	}
	// IMPORTANT: data is synced before the rename and the directory after
	// it: a crash leaves the old file or the new one, never a torn one.
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(b); err != nil {
		return fmt.Errorf("write exclude file %s: %w", f.path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("write exclude file %s: %w", f.path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("sync exclude file %s: %w", f.path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write exclude file %s: %w", f.path, err)
	}
	if err := os.Rename(tmp.Name(), f.path); err != nil {
		return fmt.Errorf("replace exclude file %s: %w", f.path, err)
	}
	done = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
