package k8s

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/test/k8senv"
)

// TestAgentReviewerNamesThePodsNode: on a real API server, the projected
// service-account token of an agent pod on gpu-rev-1 (audience gpubroker,
// bound to the pod) authenticates as that node and no other; a token of
// another service account, of another audience, or bound to no pod
// authenticates nobody.
func TestAgentReviewerNamesThePodsNode(t *testing.T) {
	env := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "agent-review"
	createNamespace(t, ctx, env, ns)
	for _, sa := range []string{"gpubroker-agent", "other"} {
		if _, err := env.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.AddNode(ctx, k8senv.NodeSpec{Name: "gpu-rev-1", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	pod := func(name, sa string) *corev1.Pod {
		p, err := env.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: "gpu-rev-1", ServiceAccountName: sa,
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				Containers:  []corev1.Container{{Name: "agent", Image: "gpubroker-agent"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	token := func(sa string, p *corev1.Pod, audience string) string {
		req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}}}
		if p != nil {
			req.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: types.UID(p.UID)}
		}
		tr, err := env.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	agentPod, otherPod := pod("agent", "gpubroker-agent"), pod("other", "other")

	rv, err := NewAgentReviewer(env.Client, []string{ns + "/gpubroker-agent"})
	if err != nil {
		t.Fatal(err)
	}
	node, who, err := rv.ReviewAgent(ctx, token("gpubroker-agent", agentPod, AgentAudience))
	if err != nil || node != "gpu-rev-1" || !strings.Contains(who, "system:serviceaccount:"+ns+":gpubroker-agent") {
		t.Fatalf("the agent pod's token: node %q who %q err %v, want node gpu-rev-1", node, who, err)
	}
	for _, c := range []struct {
		what, token, why string
	}{
		{"another service account", token("other", otherPod, AgentAudience), "not an agent service account"},
		{"another audience", token("gpubroker-agent", agentPod, "https://kubernetes.default.svc"), "not authenticated"},
		{"bound to no pod", token("gpubroker-agent", nil, AgentAudience), "bound to no node"},
		{"not a token", "gpb_forged", "not authenticated"},
	} {
		if node, _, err := rv.ReviewAgent(ctx, c.token); !errors.Is(err, broker.ErrNotFound) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: node %q err %v, want ErrNotFound saying %q", c.what, node, err, c.why)
		}
	}
}
