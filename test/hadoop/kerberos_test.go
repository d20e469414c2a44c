package hadoop_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/test/hadoop"
	"github.com/gpubroker/gpubroker/test/kdc"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/rmadmin"
)

// brokerHost is what _HOST in the broker's principal becomes.
const brokerHost = "broker.gpubroker.test"

// secureRealm is a KDC with the cluster's principals, the broker's
// gpubroker/brokerHost and an intruder the RM's ACLs do not admit.
type secureRealm struct {
	kdc                                     *kdc.KDC
	services, broker, intruder, staleKeytab string
}

func startSecureRealm(t *testing.T, ctx context.Context) *secureRealm {
	t.Helper()
	k, err := kdc.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	r := &secureRealm{kdc: k, services: filepath.Join(k.Dir, "services.keytab"), broker: filepath.Join(k.Dir, "broker.keytab"),
		intruder: filepath.Join(k.Dir, "intruder.keytab"), staleKeytab: filepath.Join(k.Dir, "stale.keytab")}
	if err := hadoop.AddServicePrincipals(ctx, k, r.services); err != nil {
		t.Fatal(err)
	}
	for p, kt := range map[string]string{"gpubroker/" + brokerHost: r.broker, "intruder": r.intruder, "gpubroker/stale": r.staleKeytab} {
		if err := k.AddPrincipal(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := k.Keytab(ctx, kt, p); err != nil {
			t.Fatal(err)
		}
	}
	// The stale keytab's key is replaced in the KDC, as after a key
	// rotation the broker's host missed.
	if err := k.Rekey(ctx, "gpubroker/stale"); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *secureRealm) login(t *testing.T, principal, keytab string) *yarn.Kerberos {
	t.Helper()
	krb, err := yarn.NewKerberos(yarn.KerberosConfig{Principal: principal, Keytab: keytab, Krb5Conf: r.kdc.Conf, Hostname: brokerHost})
	if err != nil {
		t.Fatalf("login as %s: %v\nkdc log:\n%s", principal, err, r.kdc.Log())
	}
	t.Cleanup(krb.Close)
	return krb
}

// rmProtection is the RM's hadoop.rpc.protection per Hadoop version, so
// both the plain and the sealed SASL layer meet a real server (and the
// signed one in "rm integrity").
func rmProtection(v string) string {
	if v == "3.3.6" {
		return "privacy"
	}
	return "authentication"
}

// TestKerberos runs the broker's Kerberos clients against a kerberized RM
// of each Hadoop version and a kerberized NameNode, all with tickets from
// a real MIT KDC: the RM's REST API read through SPNEGO (then through the
// hadoop.auth cookie), refreshNodes through SASL GSSAPI with the RM's
// protection (privacy, authentication, and integrity on one more RM), an
// HDFS checkpoint age read with Kerberos, and the failures
// named: a stale keytab, no Kerberos at all, a principal the RM's ACLs do
// not admit.
func TestKerberos(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	realm := startSecureRealm(t, ctx)
	krb := realm.login(t, "gpubroker/_HOST", realm.broker)
	if want := "gpubroker/" + brokerHost + "@" + kdc.Realm; krb.Principal() != want {
		t.Fatalf("principal %q, want %q", krb.Principal(), want)
	}

	t.Run("stale keytab", func(t *testing.T) {
		_, err := yarn.NewKerberos(yarn.KerberosConfig{Principal: "gpubroker/stale", Keytab: realm.staleKeytab, Krb5Conf: realm.kdc.Conf})
		if err == nil || !strings.Contains(err.Error(), "kerberos login as gpubroker/stale@"+kdc.Realm+" with keytab "+realm.staleKeytab) {
			t.Fatalf("err = %v", err)
		}
		t.Logf("stale keytab: %v", err)
	})

	for _, v := range hadoop.Versions() {
		t.Run("rm "+v, func(t *testing.T) {
			start := time.Now()
			rm, err := hadoop.StartSecureRM(ctx, hadoop.SecureConfig{Version: v, Dir: t.TempDir(), KDC: realm.kdc, Keytab: realm.services, Protection: rmProtection(v)})
			if err != nil {
				t.Fatal(err)
			}
			defer rm.Close()
			t.Logf("kerberized RM %s (%s) up in %s", rm.HadoopVersion, rmProtection(v), time.Since(start).Round(100*time.Millisecond))
			if !strings.HasPrefix(rm.HadoopVersion, v) {
				t.Fatalf("RM is Hadoop %s, want %s", rm.HadoopVersion, v)
			}
			testSecureREST(t, ctx, rm, krb)
			testSecureAdmin(t, ctx, rm, krb, realm, rmProtection(v))
		})
	}

	// The third protection, integrity (signed calls), on one version.
	t.Run("rm integrity", func(t *testing.T) {
		v := hadoop.Versions()[0]
		rm, err := hadoop.StartSecureRM(ctx, hadoop.SecureConfig{Version: v, Dir: t.TempDir(), KDC: realm.kdc, Keytab: realm.services, Protection: "integrity"})
		if err != nil {
			t.Fatal(err)
		}
		defer rm.Close()
		testSecureAdmin(t, ctx, rm, krb, realm, "integrity")
	})

	t.Run("hdfs", func(t *testing.T) {
		newest := time.Date(2026, 11, 30, 11, 53, 0, 0, time.UTC)
		nn, err := hadoop.StartSecureNN(ctx, hadoop.SecureConfig{Version: hadoop.HDFSVersion, Dir: t.TempDir(), KDC: realm.kdc, Keytab: realm.services,
			Mkdirs: map[string]time.Time{"/ckpt/job1": newest.Add(-2 * time.Hour), "/ckpt/job1/step-100": newest.Add(-time.Hour), "/ckpt/job1/step-200": newest}})
		if err != nil {
			t.Fatal(err)
		}
		defer nn.Close()
		dir := "hdfs://" + nn.NameNode + "/ckpt/job1"
		cr, err := yarn.NewCheckpointReader(yarn.CheckpointConfig{Kerberos: krb, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got, ok := cr.Newest(ctx, dir)
		if !ok || !got.Equal(newest) {
			t.Fatalf("newest checkpoint under %s: %s %v, want %s\nnamenode log:\n%s", dir, got, ok, newest, nn.LogTail(6000))
		}
		// Without Kerberos the NameNode refuses the client: the age is
		// unknown rather than wrong.
		plain, err := yarn.NewCheckpointReader(yarn.CheckpointConfig{Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := plain.Newest(ctx, dir); ok {
			t.Fatal("a simple-auth client read a kerberized NameNode")
		}
	})
}

func testSecureREST(t *testing.T, ctx context.Context, rm *hadoop.SecureRM, krb *yarn.Kerberos) {
	t.Helper()
	web := strings.Replace(rm.RMWeb, "127.0.0.1", "localhost", 1)
	c, err := yarn.NewClient(yarn.Config{RMs: []string{web}, User: "-", Transport: yarn.NewSPNEGOTransport(krb, nil)})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := c.Observe(ctx)
	if err != nil {
		t.Fatalf("observe through SPNEGO: %v\nrm log:\n%s", err, rm.LogTail(6000))
	}
	if obs.Scheduler == "" || len(obs.Queues) == 0 {
		t.Fatalf("observation without scheduler or queues: %+v", obs)
	}
	st := krb.Status()
	if st.Via != "spnego" && st.Via != "hadoop.auth cookie" {
		t.Fatalf("status after the first observation: %+v", st)
	}
	// The three parallel reads of one observation may each negotiate;
	// the next ones ride on the hadoop.auth cookie the RM set.
	if _, err := c.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	st = krb.Status()
	if st.Via != "hadoop.auth cookie" || st.AuthenticatedAs != "gpubroker" || st.Server != web {
		t.Fatalf("status after the second observation: %+v", st)
	}
	// Without Kerberos the RM's web endpoint refuses: SPNEGO is on.
	plain, err := yarn.NewClient(yarn.Config{RMs: []string{web}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = plain.Observe(ctx)
	if err == nil || !strings.Contains(err.Error(), "answered 401 asking for Kerberos (WWW-Authenticate: Negotiate): the RM is kerberized; set yarn.kerberos") {
		t.Fatalf("a simple-auth observation of the kerberized RM: err = %v", err)
	}
	t.Logf("simple REST refused: %v", err)
}

func testSecureAdmin(t *testing.T, ctx context.Context, rm *hadoop.SecureRM, krb *yarn.Kerberos, realm *secureRealm, protection string) {
	t.Helper()
	admin, err := rmadmin.New(rmadmin.Config{Addrs: []string{rm.RMAdmin}, Kerberos: krb, ServerPrincipal: krb.RMPrincipal()})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.RefreshNodes(ctx, rmadmin.Graceful, 0); err != nil {
		t.Fatalf("refreshNodes through SASL: %v\nrm log:\n%s", err, rm.LogTail(6000))
	}
	wantVia := map[string]string{"privacy": "sasl auth-conf", "integrity": "sasl auth-int", "authentication": "sasl auth"}[protection]
	if st := krb.Status(); st.Via != wantVia || st.Server != rm.RMAdmin {
		t.Fatalf("status after refreshNodes: %+v, want via %q", st, wantVia)
	}
	// Simple authentication is refused by a kerberized RM.
	plain, err := rmadmin.New(rmadmin.Config{Addrs: []string{rm.RMAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	err = plain.RefreshNodes(ctx, rmadmin.Normal, 0)
	if err == nil || !strings.Contains(err.Error(), "SIMPLE authentication is not enabled") {
		t.Fatalf("simple refreshNodes: err = %v", err)
	}
	t.Logf("simple refreshNodes refused: %v", err)
	// An authenticated principal outside the service ACL is refused by
	// name.
	intruder := realm.login(t, "intruder", realm.intruder)
	other, err := rmadmin.New(rmadmin.Config{Addrs: []string{rm.RMAdmin}, Kerberos: intruder})
	if err != nil {
		t.Fatal(err)
	}
	err = other.RefreshNodes(ctx, rmadmin.Normal, 0)
	if err == nil || !strings.Contains(err.Error(), "intruder") || !strings.Contains(err.Error(), "AuthorizationException") {
		t.Fatalf("refreshNodes as intruder: err = %v", err)
	}
	t.Logf("intruder refused: %v", err)
}
