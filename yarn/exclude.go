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
// The file is shared property: operators, Ambari or a second broker may
// edit it too. So:
//   - every read-modify-write holds an advisory lock (flock) on a lock file
//     next to it (.<name>.lock: the file itself is replaced by a rename, so
//     a lock on it would not be shared with the next writer), and changes
//     only the host it is about: every other entry is kept as it is;
//   - writes are atomic (a temporary file in the same directory, fsync,
//     rename, fsync of the directory), with the file's mode kept, so the RM
//     never reads half a file;
//   - the broker refuses to have the RM re-read the file while it holds
//     entries that nobody has refreshed yet (Unrefreshed): a refresh would
//     apply another writer's edit (hosts without a timeout get the RM's
//     default, an hour, then a kill) that its writer has not applied;
//   - with several RMs that each read their own disk, the same change is
//     made in every copy (NewExcludeFile's copies), each under its lock.
//
// Comments and unknown elements of the file are not preserved.
type ExcludeFile struct {
	paths []string // the file, then its copies
	mu    sync.Mutex
	// refreshed is what the file held (host → timeout) when this process
	// last had the RM re-read it; nil before the first refresh.
	refreshed map[string]time.Duration
	// mine are the hosts this process changed since that refresh.
	mine map[string]bool
	// lockWait bounds the wait for another writer's lock.
	lockWait time.Duration
}

// ErrExcludeLocked is returned when another writer holds the exclude
// file's lock for longer than the broker waits.
var ErrExcludeLocked = errors.New("the exclude file is locked by another writer")

// NewExcludeFile returns the exclude file at path, and copies: the same
// file on other RM hosts' paths or mounts, which every change is made to
// as well (an RM reads the file from its own disk).
func NewExcludeFile(path string, copies ...string) (*ExcludeFile, error) {
	if path == "" {
		return nil, errors.New("exclude file: path must be set")
	}
	paths := []string{path}
	for i, c := range copies {
		if c == "" {
			return nil, fmt.Errorf("exclude file: copy %d: path must be set", i)
		}
		if slices.Contains(paths, c) {
			return nil, fmt.Errorf("exclude file: %s is listed twice", c)
		}
		if strings.HasSuffix(strings.ToLower(c), ".xml") != strings.HasSuffix(strings.ToLower(path), ".xml") {
			return nil, fmt.Errorf("exclude file: copy %s must have the same form (.xml or plain) as %s", c, path)
		}
		paths = append(paths, c)
	}
	return &ExcludeFile{paths: paths, mine: map[string]bool{}, lockWait: 10 * time.Second}, nil
}

// Path returns the file's path.
func (f *ExcludeFile) Path() string { return f.paths[0] }

// Paths returns the file's path and its copies'.
func (f *ExcludeFile) Paths() []string { return slices.Clone(f.paths) }

func (f *ExcludeFile) xmlForm() bool { return strings.HasSuffix(strings.ToLower(f.paths[0]), ".xml") }

// Hosts returns the file's entries in file order; a missing file has none.
func (f *ExcludeFile) Hosts() ([]ExcludedHost, error) {
	hs, _, err := f.read(f.paths[0])
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
// finite timeout (a preemption). changed reports whether a file was
// written.
func (f *ExcludeFile) Add(host string, timeout time.Duration) (changed bool, err error) {
	if host == "" || strings.ContainsAny(host, " \t\r\n<>&,") {
		return false, fmt.Errorf("exclude file %s: bad host name %q", f.paths[0], host)
	}
	if timeout < 0 {
		if !f.xmlForm() {
			// The plain form has no timeouts: the RM would use its default
			// (an hour unless configured) and cut the node's work off.
			return false, fmt.Errorf("exclude file %s: an infinite graceful timeout for %s needs the XML form (a path ending in .xml)", f.paths[0], host)
		}
		timeout = -time.Second
	}
	timeout = timeout.Truncate(time.Second)
	return f.update(host, func(hs []ExcludedHost) ([]ExcludedHost, bool) {
		if i := slices.IndexFunc(hs, func(h ExcludedHost) bool { return h.Name == host }); i >= 0 {
			if hs[i].Timeout >= 0 || timeout <= 0 {
				return hs, false
			}
			hs[i].Timeout = timeout
			return hs, true
		}
		return append(hs, ExcludedHost{Name: host, Timeout: timeout}), true
	})
}

// Remove takes host out of the file, keeping every other entry; changed
// reports whether it was there.
func (f *ExcludeFile) Remove(host string) (changed bool, err error) {
	return f.update(host, func(hs []ExcludedHost) ([]ExcludedHost, bool) {
		n := len(hs)
		hs = slices.DeleteFunc(hs, func(h ExcludedHost) bool { return h.Name == host })
		return hs, len(hs) != n
	})
}

// update applies change to host's entry in the file and in every copy,
// each read and written under its lock, and remembers host as the
// broker's own until the next refresh.
func (f *ExcludeFile) update(host string, change func([]ExcludedHost) ([]ExcludedHost, bool)) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// The host's entry is the broker's own from now on, also when the
	// file held it already: a broker that crashed between its write and
	// the refresh finds its entry there on the next attempt.
	f.mine[host] = true
	any := false
	for _, p := range f.paths {
		changed, err := f.updateOne(p, change)
		if err != nil {
			return any, err
		}
		any = any || changed
	}
	return any, nil
}

func (f *ExcludeFile) updateOne(path string, change func([]ExcludedHost) ([]ExcludedHost, bool)) (bool, error) {
	unlock, err := f.lock(path)
	if err != nil {
		return false, err
	}
	defer unlock()
	// IMPORTANT: read under the lock, write before releasing it: another
	// writer's change made meanwhile is read, kept, and not overwritten.
	hs, mode, err := f.read(path)
	if err != nil {
		return false, err
	}
	hs, changed := change(hs)
	if !changed {
		return false, nil
	}
	return true, f.write(path, hs, mode)
}

// LockPath returns the lock file that writers of the exclude file at
// path share.
func LockPath(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".lock")
}

// lock takes the advisory lock of the file at path, waiting for another
// holder at most f.lockWait.
func (f *ExcludeFile) lock(path string) (unlock func(), err error) {
	lf, err := os.OpenFile(LockPath(path), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock exclude file %s: %w", path, err)
	}
	deadline := time.Now().Add(f.lockWait)
	for {
		err = flock(lf)
		if err == nil {
			return func() { _ = funlock(lf); lf.Close() }, nil
		}
		if !errors.Is(err, errWouldBlock) || time.Now().After(deadline) {
			lf.Close()
			if errors.Is(err, errWouldBlock) {
				return nil, fmt.Errorf("lock exclude file %s (lock file %s) after %s: %w", path, LockPath(path), f.lockWait, ErrExcludeLocked)
			}
			return nil, fmt.Errorf("lock exclude file %s: %w", path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Unrefreshed returns the entries of the file (or of a copy) that nobody
// has had the RM apply yet, by host: entries this process did not write
// since its last refresh, that were not in the file then (with the same
// timeout), and whose host the RM does not list as leaving
// (DECOMMISSIONING or DECOMMISSIONED) — an operator's or another writer's
// edit. state returns the RM's state of a host ("" when it does not list
// it); a host the RM does not list has no NodeManager a refresh could
// stop, so it does not count. A refresh now would apply these entries too,
// so the broker refuses it (Decommissioner.refreshNodes).
func (f *ExcludeFile) Unrefreshed(state func(host string) string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, p := range f.paths {
		hs, _, err := f.read(p)
		if err != nil {
			return nil, err
		}
		for _, h := range hs {
			if f.mine[h.Name] || slices.Contains(out, h.Name) {
				continue
			}
			if t, ok := f.refreshed[h.Name]; ok {
				if t != h.Timeout {
					// Another writer changed the timeout of a host the
					// broker refreshed: a shorter one applied now could
					// kill its work.
					out = append(out, h.Name)
				}
				continue
			}
			switch state(h.Name) {
			case "", "DECOMMISSIONING", "DECOMMISSIONED":
				// No NodeManager a refresh could stop, or one the RM
				// already took out.
				continue
			}
			out = append(out, h.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// MarkRefreshed records that the RM has just re-read the file: what it
// holds now counts as refreshed, and the broker's own changes are applied.
func (f *ExcludeFile) MarkRefreshed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	hs, _, err := f.read(f.paths[0])
	if err != nil {
		return err
	}
	f.refreshed = make(map[string]time.Duration, len(hs))
	for _, h := range hs {
		f.refreshed[h.Name] = h.Timeout
	}
	f.mine = map[string]bool{}
	return nil
}

type xmlHosts struct {
	XMLName xml.Name  `xml:"hosts"`
	Hosts   []xmlHost `xml:"host"`
}

type xmlHost struct {
	Name    string `xml:"name"`
	Timeout string `xml:"timeout,omitempty"`
}

// read parses the file at path; a missing or empty file has no entries.
func (f *ExcludeFile) read(path string) ([]ExcludedHost, fs.FileMode, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0o644, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read exclude file %s: %w", path, err)
	}
	mode := fs.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
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
		return nil, 0, fmt.Errorf("parse exclude file %s: %w", path, err)
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
				return nil, 0, fmt.Errorf("parse exclude file %s: host %q: timeout %q: %w", path, name, t, err)
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

// write replaces the file at path atomically.
func (f *ExcludeFile) write(path string, hs []ExcludedHost, mode fs.FileMode) error {
	b, err := f.encode(hs)
	if err != nil {
		return fmt.Errorf("encode exclude file %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write exclude file %s: %w", path, err)
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
		return fmt.Errorf("write exclude file %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("write exclude file %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("sync exclude file %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write exclude file %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace exclude file %s: %w", path, err)
	}
	done = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
