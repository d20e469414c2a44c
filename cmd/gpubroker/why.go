package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// whyUsage is the one-line synopsis of `gpubroker why`.
const whyUsage = "why [--server URL] [--token T] [--json] (application_… | pod NAMESPACE/NAME | k8s/UID | yarn/APP[/PRIORITY])"

// runWhy prints a demand's history of decisions from the API: why a YARN
// application or a pod waits, and what the broker did about it.
func runWhy(ctx context.Context, e env, args []string) error {
	fs := newFlags("why", e)
	server := fs.String("server", e.getenv("GPUBROKER_SERVER"), "broker API address, e.g. https://gpubroker.example:8080 (default $GPUBROKER_SERVER)")
	token := fs.String("token", "", "API bearer token, any role (default $GPUBROKER_TOKEN)")
	asJSON := fs.Bool("json", false, "print the API's JSON answer instead of the summary")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the API")
	fs.Usage = func() { fmt.Fprintln(e.stderr, "usage: gpubroker "+whyUsage); fs.PrintDefaults() }
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *token == "" {
		*token = e.getenv("GPUBROKER_TOKEN")
	}
	id, err := whyID(fs.Args())
	if err != nil {
		return err
	}
	switch {
	case *server == "":
		return usagef("--server is required (or set GPUBROKER_SERVER): the broker's API address, e.g. http://127.0.0.1:8080")
	case *token == "":
		return usagef("--token is required (or set GPUBROKER_TOKEN): create one with 'gpubroker token create --role viewer'")
	case *timeout <= 0:
		return usagef("--timeout must be positive, got %s", *timeout)
	}
	base, err := url.Parse(strings.TrimRight(*server, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return usagef("--server must be an http:// or https:// address, got %q", *server)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	body, err := fetchWhy(ctx, base.String(), *token, id)
	if err != nil {
		return err
	}
	if *asJSON {
		_, err := e.stdout.Write(body)
		return err
	}
	var w whyAnswer
	if err := json.Unmarshal(body, &w); err != nil {
		return fmt.Errorf("decode the answer of %s: %w", base, err)
	}
	printWhy(e.stdout, w)
	return nil
}

// whyID turns the command's arguments into the API's demand id.
func whyID(args []string) (string, error) {
	switch {
	case len(args) == 2 && args[0] == "pod":
		ns, name, ok := strings.Cut(args[1], "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return "", usagef("pod needs NAMESPACE/NAME, got %q", args[1])
		}
		return "k8s/" + ns + "/" + name, nil
	case len(args) == 1 && strings.HasPrefix(args[0], "application_"):
		return "yarn/" + args[0], nil
	case len(args) == 1 && (strings.HasPrefix(args[0], "k8s/") || strings.HasPrefix(args[0], "yarn/")):
		return args[0], nil
	case len(args) == 0:
		return "", usagef("name the demand: gpubroker %s", whyUsage)
	}
	return "", usagef("cannot tell which demand %q names: gpubroker %s", strings.Join(args, " "), whyUsage)
}

// fetchWhy GETs /api/v1/demand/{id}/why and returns the body of a 200;
// any other answer becomes an error with the API's message.
func fetchWhy(ctx context.Context, base, token, id string) ([]byte, error) {
	u := base + "/api/v1/demand/" + url.PathEscape(id) + "/why"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("ask %s: %w", base, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask %s: %w", base, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read the answer of %s: %w", base, err)
	}
	if res.StatusCode == http.StatusOK {
		return body, nil
	}
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		msg = e.Error.Message
	}
	return nil, fmt.Errorf("%s answered %s: %s", base, res.Status, msg)
}

// whyAnswer is the part of the API's answer the summary prints.
type whyAnswer struct {
	Query   string `json:"query"`
	Demands []struct {
		ID            string    `json:"id"`
		Name          string    `json:"name"`
		Tenant        string    `json:"tenant"`
		Priority      int64     `json:"priority"`
		GPUsPerUnit   int       `json:"gpus_per_unit"`
		Units         int       `json:"units"`
		State         string    `json:"state"`
		FirstSeen     time.Time `json:"first_seen"`
		WaitReason    string    `json:"wait_reason"`
		WaitDetail    string    `json:"wait_detail"`
		WaitSeconds   float64   `json:"wait_seconds"`
		ClosedAt      time.Time `json:"closed_at"`
		CloseReason   string    `json:"close_reason"`
		WaitedSeconds float64   `json:"waited_seconds"`
		Decisions     []struct {
			At     time.Time `json:"at"`
			Kind   string    `json:"kind"`
			Pool   string    `json:"pool"`
			Node   string    `json:"node"`
			Reason string    `json:"reason"`
		} `json:"decisions"`
	} `json:"demands"`
}

func printWhy(w io.Writer, a whyAnswer) {
	for i, d := range a.Demands {
		if i > 0 {
			fmt.Fprintln(w)
		}
		name := d.Name
		if name == "" {
			name = d.ID
		}
		fmt.Fprintf(w, "%s (%s): tenant %s, priority %d, %d×%d GPUs, first seen %s\n",
			name, d.ID, d.Tenant, d.Priority, d.Units, d.GPUsPerUnit, d.FirstSeen.UTC().Format(time.RFC3339))
		if d.State == "closed" {
			fmt.Fprintf(w, "  closed %s (%s) after waiting %s\n", d.ClosedAt.UTC().Format(time.RFC3339), d.CloseReason, secondsText(d.WaitedSeconds))
		} else {
			why := d.WaitReason
			if why == "" {
				why = "not planned yet"
			}
			if d.WaitDetail != "" {
				why += ": " + d.WaitDetail
			}
			fmt.Fprintf(w, "  pending for %s; waits because %s\n", secondsText(d.WaitSeconds), why)
		}
		if len(d.Decisions) == 0 {
			fmt.Fprintln(w, "  no decisions recorded yet")
			continue
		}
		for _, x := range d.Decisions {
			where := ""
			switch {
			case x.Node != "":
				where = "node " + x.Node + ": "
			case x.Pool != "":
				where = "pool " + x.Pool + ": "
			}
			fmt.Fprintf(w, "  %s  %-9s %s%s\n", x.At.UTC().Format("2006-01-02 15:04:05"), x.Kind, where, x.Reason)
		}
	}
}

// secondsText formats a wait for people: "45s", "12m30s", "3h05m".
func secondsText(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	switch {
	case d < time.Minute:
		return d.String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
