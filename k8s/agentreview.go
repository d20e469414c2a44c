package k8s

import (
	"context"
	"fmt"
	"slices"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpubroker/gpubroker/broker"
)

// AgentAudience is the audience of the service-account tokens node agents
// present to the broker (a projected token volume with this audience): a
// token minted for another service cannot be replayed here.
const AgentAudience = "gpubroker"

// nodeNameExtra is the TokenReview extra key that names the node of the
// pod a service-account token is bound to (Kubernetes 1.32 and later, or
// earlier with ServiceAccountTokenPodNodeInfo).
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// AgentReviewer authenticates node agents by the projected
// service-account token of their pod, through the API server's
// TokenReview: the token is bound to the pod, and so to the node the pod
// runs on, which the review names. That gives every agent of a DaemonSet
// a credential of its own node, issued and rotated by Kubernetes, with no
// Secret to distribute.
type AgentReviewer struct {
	client kubernetes.Interface
	// accounts are the service accounts ("namespace/name") whose tokens
	// authenticate agents.
	accounts []string
}

// NewAgentReviewer returns a reviewer for tokens of the given service
// accounts ("namespace/name", at least one).
func NewAgentReviewer(client kubernetes.Interface, accounts []string) (*AgentReviewer, error) {
	if client == nil {
		return nil, broker.Invalid("kubernetes", "agent service accounts need a Kubernetes client")
	}
	if len(accounts) == 0 {
		return nil, broker.Invalid("api.agent_service_accounts", "must name at least one service account (namespace/name)")
	}
	return &AgentReviewer{client: client, accounts: slices.Clone(accounts)}, nil
}

// ReviewAgent returns the node the token's pod runs on and who the token
// is. A token that is invalid, expired, of another audience, of another
// service account or not bound to a pod on a node is broker.ErrNotFound
// (it authenticates nobody).
func (a *AgentReviewer) ReviewAgent(ctx context.Context, token string) (node, who string, err error) {
	tr, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{AgentAudience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("review agent token: %w", err)
	}
	st := tr.Status
	if !st.Authenticated || st.Error != "" {
		return "", "", fmt.Errorf("agent token not authenticated (%s): %w", st.Error, broker.ErrNotFound)
	}
	if !slices.Contains(st.Audiences, AgentAudience) {
		return "", "", fmt.Errorf("agent token of audiences %v, not %s: %w", st.Audiences, AgentAudience, broker.ErrNotFound)
	}
	ok := false
	for _, acc := range a.accounts {
		if st.User.Username == "system:serviceaccount:"+strings.Replace(acc, "/", ":", 1) {
			ok = true
		}
	}
	if !ok {
		return "", "", fmt.Errorf("token of %s, not an agent service account %v: %w", st.User.Username, a.accounts, broker.ErrNotFound)
	}
	names := st.User.Extra[nodeNameExtra]
	if len(names) != 1 || names[0] == "" {
		return "", "", fmt.Errorf("token of %s is bound to no node (mount it as a projected service-account token of the agent's pod): %w",
			st.User.Username, broker.ErrNotFound)
	}
	return names[0], st.User.Username + " on node " + names[0], nil
}
