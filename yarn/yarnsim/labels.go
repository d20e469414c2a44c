package yarnsim

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Node labels, as Hadoop's CommonNodeLabelsManager and the
// CapacityScheduler keep them: a cluster holds a set of labels, each
// exclusive or not; a node carries at most one; an exclusive label's nodes
// serve only asks that name it, a non-exclusive label's nodes also serve
// default-partition asks. The labels are the RM's label store: they survive
// an RM failover or restart (Sim.RestartRM).

// Hadoop's label messages (CommonNodeLabelsManager, AdminService).
const (
	errLabelsDisabled = "Node-label-based scheduling is disabled. Please check yarn.node-labels.enabled"
	classIOException  = "java.io.IOException: "
)

// labelName is CommonNodeLabelsManager's LABEL_PATTERN.
var labelName = regexp.MustCompile(`^[0-9a-zA-Z][0-9a-zA-Z-_]*$`)

// ClusterLabel is a cluster node label as the RM lists it.
type ClusterLabel struct {
	Name      string
	Exclusive bool
}

// ClusterLabels returns the cluster's node labels in name order.
func (s *Sim) ClusterLabels() []ClusterLabel {
	s.mu.lockRead()
	defer s.mu.Unlock()
	out := make([]ClusterLabel, 0, len(s.clusterLabels))
	for n, ex := range s.clusterLabels {
		out = append(out, ClusterLabel{Name: n, Exclusive: ex})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// NodeLabels returns the labels the RM holds for host (nil: the default
// partition).
func (s *Sim) NodeLabels(host string) []string {
	s.mu.lockRead()
	defer s.mu.Unlock()
	if n, ok := s.nodes[host]; ok {
		return slices.Clone(n.spec.Labels)
	}
	return nil
}

// AddClusterLabels adds cluster node labels, as addToClusterNodeLabels
// does: a label that exists with the same exclusivity is left as it is,
// with another exclusivity it is refused.
func (s *Sim) AddClusterLabels(labels []ClusterLabel) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.NodeLabelsDisabled {
		return fmt.Errorf("%s%s", classIOException, errLabelsDisabled)
	}
	for _, l := range labels {
		if err := checkLabelName(l.Name); err != nil {
			return err
		}
		if ex, ok := s.clusterLabels[l.Name]; ok && ex != l.Exclusive {
			return fmt.Errorf("%sExclusivity cannot be modified for an existing label with : %s", classIOException, l.Name)
		}
	}
	for _, l := range labels {
		s.clusterLabels[l.Name] = l.Exclusive
	}
	s.live = nil
	return nil
}

// RemoveClusterLabels deletes cluster node labels, as
// removeFromClusterNodeLabels does: each must exist, be on no node and be
// accessible to no queue that names it.
func (s *Sim) RemoveClusterLabels(names []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.NodeLabelsDisabled {
		return fmt.Errorf("%s%s", classIOException, errLabelsDisabled)
	}
	for _, name := range names {
		if _, ok := s.clusterLabels[name]; !ok {
			//lint:ignore ST1005 the real RM's message, word for word
			return fmt.Errorf("%sNode label=%s to be removed doesn't existed in cluster node labels collection.", classIOException, name)
		}
		for _, q := range s.cfg.Queues {
			if slices.Contains(q.AccessibleLabels, name) {
				return fmt.Errorf("%sCannot remove label=%s, because queue=%s is using this label. Please remove label on queue before remove the label",
					classIOException, name, q.Path[strings.LastIndexByte(q.Path, '.')+1:])
			}
		}
	}
	for _, name := range names {
		delete(s.clusterLabels, name)
		for _, n := range s.nodes {
			// CommonNodeLabelsManager.internalRemoveFromClusterNodeLabels
			// takes a removed label off every node.
			if label(n.spec.Labels) == name {
				s.moveToPartition(n, nil)
			}
		}
	}
	s.scheduleAll()
	return nil
}

// ReplaceNodeLabels sets nodes' labels, as replaceLabelsOnNode does. Keys
// are "host" or "host:port" (port 0 stands for every NodeManager of the
// host); with failOnUnknown a host the RM does not list is refused. The
// containers running on a node stay; what is placed next follows its new
// partition.
func (s *Sim) ReplaceNodeLabels(nodeToLabels map[string][]string, failOnUnknown bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.NodeLabelsDisabled {
		return fmt.Errorf("%s%s", classIOException, errLabelsDisabled)
	}
	keys := make([]string, 0, len(nodeToLabels))
	for k := range nodeToLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var unknown []string
	targets := map[string]*node{}
	for _, k := range keys {
		host, port := k, 0
		if h, p, ok := strings.Cut(k, ":"); ok {
			pn, err := strconv.Atoi(p)
			if err != nil {
				return fmt.Errorf("%sInvalid NodeId [%s]. Expected host:port", classIOException, k)
			}
			host, port = h, pn
		}
		n := s.nodes[host]
		if n == nil || (port != 0 && port != n.port) {
			unknown = append(unknown, host+":"+strconv.Itoa(port))
			continue
		}
		targets[k] = n
	}
	if failOnUnknown && len(unknown) > 0 {
		return fmt.Errorf("%sFailed to replace labels as there are unknown nodes:[%s]", classIOException, strings.Join(unknown, ", "))
	}
	for _, k := range keys {
		ls := nodeToLabels[k]
		if len(ls) > 1 {
			host, _, _ := strings.Cut(k, ":")
			//lint:ignore ST1005 the real RM's message, word for word
			return fmt.Errorf("%s%d labels specified on host=%s, please note that we do not support specifying multiple labels on a single host for now.",
				classIOException, len(ls), host)
		}
		for _, l := range ls {
			if _, ok := s.clusterLabels[l]; !ok {
				return fmt.Errorf("%sNot all labels being replaced contained by known label collections, please check, new labels=[%s]",
					classIOException, strings.Join(ls, ","))
			}
		}
	}
	for _, k := range keys {
		if n := targets[k]; n != nil {
			s.moveToPartition(n, nodeToLabels[k])
		}
	}
	s.scheduleAll()
	return nil
}

// moveToPartition gives n the labels ls, moving its free GPUs between the
// partitions' books. Callers hold s.mu and schedule afterwards.
func (s *Sim) moveToPartition(n *node, ls []string) {
	if n.state == "RUNNING" {
		s.freeByLabel[label(n.spec.Labels)] -= n.freeGPUs()
		s.freeByLabel[label(ls)] += n.freeGPUs()
	}
	n.spec.Labels = slices.Clone(ls)
	s.live = nil
}

// checkLabelName refuses a name Hadoop refuses.
func checkLabelName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%slabel added is empty", classIOException)
	case len(name) > 255:
		return fmt.Errorf("%slabel added = %s, is too long", classIOException, name)
	case !labelName.MatchString(name):
		//lint:ignore ST1005 the real RM's message, word for word
		return fmt.Errorf("%slabel added = %s, is not valid.", classIOException, name)
	}
	return nil
}

// serves reports whether node n may take a container asked in partition
// lbl: its own partition, or the default partition's asks on a node whose
// label is not exclusive. Callers hold s.mu.
func (s *Sim) serves(n *node, lbl string) bool {
	nl := label(n.spec.Labels)
	if nl == lbl {
		return true
	}
	return lbl == "" && !s.exclusive(nl)
}

// exclusive reports whether label l is exclusive; a label the cluster does
// not know (a node added with it) counts as exclusive, Hadoop's default.
func (s *Sim) exclusive(l string) bool {
	ex, ok := s.clusterLabels[l]
	return !ok || ex
}

// freeFor is the free GPUs asks in partition lbl may use. Callers hold
// s.mu.
func (s *Sim) freeFor(lbl string) int {
	f := s.freeByLabel[lbl]
	if lbl == "" {
		for l, g := range s.freeByLabel {
			if l != "" && !s.exclusive(l) {
				f += g
			}
		}
	}
	return f
}

// accessible reports whether queue q may ask in partition lbl: the
// default partition always, a label when the queue lists it or lists
// nothing (CapacityScheduler: a queue without accessible-node-labels
// inherits root's "*").
func accessible(q *queue, lbl string) bool {
	return lbl == "" || q.labels == nil || slices.Contains(q.labels, lbl) || slices.Contains(q.labels, "*")
}
