package kdc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Realm is the test realm.
const Realm = "GPUBROKER.TEST"

// KDC is a running krb5kdc with its realm's database in Dir.
type KDC struct {
	// Realm is the realm name (Realm).
	Realm string
	// Dir holds the database, the configuration, the log and the keytabs.
	Dir string
	// Conf is the krb5.conf clients use (KRB5_CONFIG,
	// -Djava.security.krb5.conf); its KDC is Addr.
	Conf string
	// Addr is the KDC's address, 127.0.0.1:port (TCP and UDP).
	Addr string

	root string // the unpacked Debian packages
	cmd  *exec.Cmd
	done chan struct{}
}

func sourceDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Install runs test/kerberos/install.sh (cached) and returns the install
// directory.
func Install(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(sourceDir(), "..", "kerberos", "install.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("install kerberos: %w: %s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// Start creates a realm in dir and starts its KDC on a free loopback port.
// Tickets last an hour and renew for a day.
func Start(ctx context.Context, dir string) (*KDC, error) {
	home, err := Install(ctx)
	if err != nil {
		return nil, err
	}
	k := &KDC{Realm: Realm, Dir: dir, Conf: filepath.Join(dir, "krb5.conf"), root: filepath.Join(home, "root"), done: make(chan struct{})}
	// The port is free when chosen but may be taken by another test's
	// process before krb5kdc binds it (the realm's database takes a
	// moment to create): a KDC that finds it in use starts again on
	// another.
	created := false
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		if err := k.configure(port); err != nil {
			return nil, err
		}
		if !created {
			if _, err := k.run(ctx, "usr/sbin/kdb5_util", "create", "-s", "-r", k.Realm, "-P", "test-master-key"); err != nil {
				return nil, err
			}
			created = true
		}
		err = k.start(ctx)
		if err == nil {
			return k, nil
		}
		if attempt == 5 || !strings.Contains(err.Error(), "Address already in use") {
			return nil, err
		}
		k.done = make(chan struct{})
	}
}

// configure writes the realm's krb5.conf for a KDC on port.
func (k *KDC) configure(port int) error {
	k.Addr = "127.0.0.1:" + strconv.Itoa(port)
	// udp_preference_limit = 1 makes every client (gokrb5, Java) use TCP:
	// no retransmission timers in the tests.
	conf := fmt.Sprintf(`[libdefaults]
 default_realm = %[1]s
 dns_lookup_kdc = false
 dns_lookup_realm = false
 dns_canonicalize_hostname = false
 rdns = false
 udp_preference_limit = 1
 ticket_lifetime = 1h
 renew_lifetime = 1d
 forwardable = true
[realms]
 %[1]s = {
  kdc = %[2]s
  database_name = %[3]s/principal
  key_stash_file = %[3]s/stash
  acl_file = %[3]s/kadm5.acl
  max_life = 1h
  max_renewable_life = 1d
 }
[domain_realm]
 localhost = %[1]s
[dbmodules]
 db_module_dir = %[4]s/usr/lib/x86_64-linux-gnu/krb5/plugins/kdb
[kdcdefaults]
 kdc_ports = %[5]d
 kdc_tcp_ports = %[5]d
[logging]
 kdc = FILE:%[3]s/kdc.log
`, k.Realm, k.Addr, k.Dir, k.root, port)
	if err := os.WriteFile(k.Conf, []byte(conf), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(k.Dir, "kadm5.acl"), nil, 0o644)
}

// start runs krb5kdc and waits until it accepts TCP connections.
func (k *KDC) start(ctx context.Context) error {
	logf, err := os.Create(filepath.Join(k.Dir, "krb5kdc.out"))
	if err != nil {
		return err
	}
	k.cmd = k.command(context.WithoutCancel(ctx), "usr/sbin/krb5kdc", "-n", "-r", k.Realm)
	k.cmd.Stdout, k.cmd.Stderr = logf, logf
	if err := k.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start krb5kdc: %w", err)
	}
	done := k.done
	go func() {
		_ = k.cmd.Wait()
		logf.Close()
		close(done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", k.Addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("krb5kdc exited at start; log:\n%s", k.Log())
		case <-ctx.Done():
			k.Close()
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			k.Close()
			return fmt.Errorf("krb5kdc does not listen on %s after 30s; log:\n%s", k.Addr, k.Log())
		}
	}
}

// Env is the environment the MIT tools and the KDC run with.
func (k *KDC) Env() []string {
	return append(os.Environ(),
		"KRB5_CONFIG="+k.Conf,
		"KRB5_KDC_PROFILE="+k.Conf,
		"LD_LIBRARY_PATH="+filepath.Join(k.root, "usr/lib/x86_64-linux-gnu"),
		"KRB5CCNAME=FILE:"+filepath.Join(k.Dir, "krb5cc"),
	)
}

func (k *KDC) command(ctx context.Context, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(k.root, bin), args...)
	cmd.Env = k.Env()
	return cmd
}

func (k *KDC) run(ctx context.Context, bin string, args ...string) (string, error) {
	out, err := k.command(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// kadmin runs one kadmin.local query.
func (k *KDC) kadmin(ctx context.Context, query string) error {
	out, err := k.run(ctx, "usr/sbin/kadmin.local", "-r", k.Realm, "-q", query)
	if err != nil {
		return err
	}
	// kadmin.local exits 0 on a failed query; its message says so.
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "while ") || strings.Contains(l, "does not exist") {
			return fmt.Errorf("kadmin.local %q: %s", query, strings.TrimSpace(out))
		}
	}
	return nil
}

// AddPrincipal creates principal (without the realm, e.g. "HTTP/localhost")
// with a random key.
func (k *KDC) AddPrincipal(ctx context.Context, principal string) error {
	return k.kadmin(ctx, "addprinc -randkey "+principal)
}

// AddPassword creates principal with a password.
func (k *KDC) AddPassword(ctx context.Context, principal, password string) error {
	return k.kadmin(ctx, "addprinc -pw "+password+" "+principal)
}

// Keytab writes the current keys of principals into the keytab at path
// (appending when it exists). Exporting a key does not change it
// (-norandkey), so keytabs written at different times agree.
func (k *KDC) Keytab(ctx context.Context, path string, principals ...string) error {
	if len(principals) == 0 {
		return errors.New("keytab: no principals")
	}
	return k.kadmin(ctx, "ktadd -norandkey -k "+path+" "+strings.Join(principals, " "))
}

// Rekey gives principal a new random key, so keytabs written before hold
// a stale one.
func (k *KDC) Rekey(ctx context.Context, principal string) error {
	return k.kadmin(ctx, "cpw -randkey "+principal)
}

// SetMaxLife limits the lifetime of principal's tickets (kadmin
// modprinc -maxlife), e.g. to see them renewed within a test.
func (k *KDC) SetMaxLife(ctx context.Context, principal string, d time.Duration) error {
	return k.kadmin(ctx, fmt.Sprintf("modprinc -maxlife \"%d seconds\" %s", int(d.Seconds()), principal))
}

// Kinit gets a ticket for principal from keytab into the ticket cache at
// ccache (renewable for a day, as kinit -r 1d).
func (k *KDC) Kinit(ctx context.Context, ccache, keytab, principal string) error {
	return k.KinitFor(ctx, ccache, keytab, principal, time.Hour)
}

// KinitFor is Kinit with a ticket lifetime (kinit -l).
func (k *KDC) KinitFor(ctx context.Context, ccache, keytab, principal string, life time.Duration) error {
	cmd := k.command(ctx, "usr/bin/kinit", "-l", strconv.Itoa(int(life.Seconds()))+"s", "-r", "1d", "-c", ccache, "-k", "-t", keytab, principal)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kinit %s: %w: %s", principal, err, out)
	}
	return nil
}

// Principal returns name@Realm.
func (k *KDC) Principal(name string) string { return name + "@" + k.Realm }

// Log returns the KDC's log.
func (k *KDC) Log() string {
	a, _ := os.ReadFile(filepath.Join(k.Dir, "kdc.log"))
	b, _ := os.ReadFile(filepath.Join(k.Dir, "krb5kdc.out"))
	return string(a) + string(b)
}

// TGSIssued counts the service tickets the KDC issued to client (a full
// principal name) for server, e.g. renewals of its TGT
// (server krbtgt/REALM@REALM), from the KDC's log.
func (k *KDC) TGSIssued(client, server string) int {
	b, _ := os.ReadFile(filepath.Join(k.Dir, "kdc.log"))
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "TGS_REQ") && strings.Contains(l, ": ISSUE: ") && strings.HasSuffix(l, ", "+client+" for "+server) {
			n++
		}
	}
	return n
}

// Close stops the KDC.
func (k *KDC) Close() {
	if k.cmd == nil || k.cmd.Process == nil {
		return
	}
	_ = k.cmd.Process.Kill()
	<-k.done
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	// The KDC also listens on UDP at the same port.
	u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return 0, fmt.Errorf("udp port %d: %w", port, err)
	}
	u.Close()
	return port, nil
}
