package k8ssim

import (
	"errors"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// ErrUnavailable is what a client of FaultyClient gets while the API
// server is unavailable to it: the error client-go reports when nothing
// answers at the server's address.
var ErrUnavailable = errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")

// FaultyClient is one client's view of the cluster whose API server can
// be made unavailable (SetUnavailable), as for a broker cut off from the
// control plane: the cluster itself (its scheduler and kubelets, Client)
// keeps working. Reads, writes, evictions and watches go to the same
// objects as Client's.
type FaultyClient struct {
	c      *Cluster
	client *fake.Clientset

	mu       sync.Mutex
	down     bool
	refused  int
	watchers map[watch.Interface]struct{}
}

// NewFaultyClient returns a client of the cluster that SetUnavailable can
// cut off.
func (c *Cluster) NewFaultyClient() *FaultyClient {
	f := &FaultyClient{c: c, client: fake.NewClientset(), watchers: map[watch.Interface]struct{}{}}
	f.client.PrependReactor("*", "*", k8stesting.ObjectReaction(c.api))
	f.client.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		if err := f.refuse(); err != nil {
			return true, nil, err
		}
		var opts metav1.ListOptions
		if wa, ok := action.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := c.api.Watch(action.GetResource(), action.GetNamespace(), opts)
		if err == nil {
			f.mu.Lock()
			f.watchers[w] = struct{}{}
			f.mu.Unlock()
		}
		return true, w, err
	})
	f.client.PrependReactor("create", "pods", c.onEviction)
	f.client.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		if err := f.refuse(); err != nil {
			return true, nil, err
		}
		return false, nil, nil
	})
	c.mu.Lock()
	c.faulty = append(c.faulty, f.client)
	c.mu.Unlock()
	return f
}

// Client is the client the API server can be made unavailable to.
func (f *FaultyClient) Client() kubernetes.Interface { return f.client }

// SetUnavailable makes every request of this client fail with
// ErrUnavailable until SetUnavailable(false); its open watches end, as
// when the API server goes away, so its informers relist (and fail) until
// the server is back.
func (f *FaultyClient) SetUnavailable(down bool) {
	f.mu.Lock()
	f.down = down
	var stop []watch.Interface
	if down {
		for w := range f.watchers {
			stop = append(stop, w)
		}
		f.watchers = map[watch.Interface]struct{}{}
	}
	f.mu.Unlock()
	for _, w := range stop {
		w.Stop()
	}
}

// Refused counts the requests refused while unavailable.
func (f *FaultyClient) Refused() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refused
}

func (f *FaultyClient) refuse() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.down {
		return nil
	}
	f.refused++
	return ErrUnavailable
}

// EvictedPod is a pod the Eviction API removed.
type EvictedPod struct {
	Namespace, Name string
	UID             types.UID
	// Node is where it ran ("" if it was not bound yet).
	Node string
	GPUs int
}

// EvictedPods returns the pods evicted so far, from the from-th on (0 for
// all), in the order of their evictions, so a caller can follow them.
func (c *Cluster) EvictedPods(from int) []EvictedPod {
	c.mu.Lock()
	defer c.mu.Unlock()
	if from >= len(c.evictions) {
		return nil
	}
	return append([]EvictedPod(nil), c.evictions[from:]...)
}
