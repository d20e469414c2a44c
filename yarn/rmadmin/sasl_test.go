package rmadmin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/gssapi"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/service"
	"github.com/jcmturner/gokrb5/v8/spnego"
	"github.com/jcmturner/gokrb5/v8/types"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gpubroker/gpubroker/test/kdc"
)

// testKrb implements Kerberos with a gokrb5 client (the yarn package's
// implementation cannot be imported here: yarn imports rmadmin).
type testKrb struct {
	cl        *client.Client
	principal string
	records   []string
}

func (k *testKrb) Principal() string      { return k.principal }
func (k *testKrb) Client() *client.Client { return k.cl }
func (k *testKrb) ServiceTicket(spn, host string) (messages.Ticket, types.EncryptionKey, string, error) {
	spn = strings.Replace(spn, "_HOST", host, 1)
	tkt, key, err := k.cl.GetServiceTicket(spn)
	return tkt, key, spn, err
}
func (k *testKrb) Record(server, via, _ string, err error) {
	if err != nil {
		k.records = append(k.records, "error "+err.Error())
		return
	}
	k.records = append(k.records, server+" "+via)
}

type saslRealm struct {
	kdc      *kdc.KDC
	rmKeytab *keytab.Keytab
	krb      *testKrb
}

func startSaslRealm(t *testing.T) *saslRealm {
	t.Helper()
	ctx := context.Background()
	k, err := kdc.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	for _, p := range []string{"gpubroker", "rm/localhost"} {
		if err := k.AddPrincipal(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	bk, rk := filepath.Join(k.Dir, "broker.keytab"), filepath.Join(k.Dir, "rm.keytab")
	if err := k.Keytab(ctx, bk, "gpubroker"); err != nil {
		t.Fatal(err)
	}
	if err := k.Keytab(ctx, rk, "rm/localhost"); err != nil {
		t.Fatal(err)
	}
	conf, err := config.Load(k.Conf)
	if err != nil {
		t.Fatal(err)
	}
	bkt, err := keytab.Load(bk)
	if err != nil {
		t.Fatal(err)
	}
	rkt, err := keytab.Load(rk)
	if err != nil {
		t.Fatal(err)
	}
	cl := client.NewWithKeytab("gpubroker", k.Realm, bkt, conf, client.DisablePAFXFAST(true))
	if err := cl.Login(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Destroy)
	return &saslRealm{kdc: k, rmKeytab: rkt, krb: &testKrb{cl: cl, principal: "gpubroker@" + k.Realm}}
}

// fakeSecureRM is a Hadoop IPC server end of SASL GSSAPI, as
// org.apache.hadoop.ipc.Server and GssKrb5Server speak it: it checks the
// preamble's auth byte, offers TOKEN and KERBEROS, accepts the AP-REQ
// with the rm/localhost keytab, offers the layers in qop, checks the
// client's choice, and then answers one admin call, wrapped as agreed.
type fakeSecureRM struct {
	keytab    *keytab.Keytab
	qop       byte   // layers offered
	serverID  string // the host in the principal the server names
	mutual    bool   // send an AP-REP-like token first
	gotUser   string
	gotMethod string
	chosen    byte
	errs      chan error
}

func (f *fakeSecureRM) serve(conn net.Conn) error {
	defer conn.Close()
	r := bufio.NewReader(conn)
	pre := make([]byte, 7)
	if _, err := io.ReadFull(r, pre); err != nil {
		return err
	}
	if !bytes.Equal(pre, []byte{'h', 'r', 'p', 'c', 9, 0, 0xDF}) {
		return fmt.Errorf("preamble % x", pre)
	}
	readSaslReq := func() (saslMessage, error) {
		b, err := readFrame(r)
		if err != nil {
			return saslMessage{}, err
		}
		hb, rest, err := delimited(b)
		if err != nil {
			return saslMessage{}, err
		}
		var callID int64
		_ = eachField(hb, func(num protowire.Number, _ protowire.Type, v uint64, _ []byte) {
			if num == 3 {
				callID = protowire.DecodeZigZag(v)
			}
		})
		if callID != saslCallID {
			return saslMessage{}, fmt.Errorf("sasl request with call id %d", callID)
		}
		mb, _, err := delimited(rest)
		if err != nil {
			return saslMessage{}, err
		}
		return parseSaslMessage(mb)
	}
	send := func(m saslMessage) error {
		_, err := conn.Write(frame(responseHeaderBytes(uint32(0xFFFFFFDF), statusSuccess), m.marshal()))
		return err
	}
	neg, err := readSaslReq()
	if err != nil || neg.state != saslNegotiate {
		return fmt.Errorf("negotiate: %v %+v", err, neg)
	}
	if err := send(saslMessage{state: saslNegotiate, auths: []saslAuth{
		{method: "TOKEN", mechanism: "DIGEST-MD5", protocol: "", serverID: "default", challenge: []byte(`realm="default",nonce="x",qop="auth",charset=utf-8,algorithm=md5-sess`)},
		{method: "KERBEROS", mechanism: "GSSAPI", protocol: "rm", serverID: f.serverID},
	}}); err != nil {
		return err
	}
	ini, err := readSaslReq()
	if err != nil || ini.state != saslInitiate || len(ini.auths) != 1 || ini.auths[0].method != "KERBEROS" {
		return fmt.Errorf("initiate: %v %+v", err, ini)
	}
	var tok spnego.KRB5Token
	if err := tok.Unmarshal(ini.token); err != nil {
		return fmt.Errorf("AP-REQ token: %w", err)
	}
	ok, _, err := service.VerifyAPREQ(&tok.APReq, service.NewSettings(f.keytab, service.DecodePAC(false)))
	if err != nil || !ok {
		return fmt.Errorf("AP-REQ refused: %v", err)
	}
	key := tok.APReq.Ticket.DecryptedEncPart.Key
	if f.mutual {
		if err := send(saslMessage{state: saslChallenge, token: []byte{0x60, 0x01, 0x00}}); err != nil {
			return err
		}
		if m, err := readSaslReq(); err != nil || m.state != saslResponse || len(m.token) != 0 {
			return fmt.Errorf("after AP-REP: %v %+v", err, m)
		}
	}
	offer, err := wrapToken(key, []byte{f.qop, 0x01, 0x00, 0x00}, false, true, 0)
	if err != nil {
		return err
	}
	if err := send(saslMessage{state: saslChallenge, token: offer}); err != nil {
		return err
	}
	resp, err := readSaslReq()
	if err != nil || resp.state != saslResponse {
		return fmt.Errorf("response: %v %+v", err, resp)
	}
	choice, sealed, err := unwrapToken(key, resp.token, false)
	if err != nil || sealed || len(choice) != 4 {
		return fmt.Errorf("choice: %v sealed=%v %x", err, sealed, choice)
	}
	f.chosen = choice[0]
	if f.chosen&f.qop == 0 {
		return fmt.Errorf("client chose %#x of %#x", f.chosen, f.qop)
	}
	if err := send(saslMessage{state: saslSuccess}); err != nil {
		return err
	}
	// The connection context and the call, wrapped when agreed.
	var plain io.Reader = r
	if f.chosen != qopAuth {
		m, err := readSaslReq()
		if err != nil || m.state != saslWrap {
			return fmt.Errorf("wrap: %v %+v", err, m)
		}
		b, sealed, err := unwrapToken(key, m.token, false)
		if err != nil || sealed != (f.chosen == qopAuthConf) {
			return fmt.Errorf("unwrap the call: %v sealed=%v", err, sealed)
		}
		plain = bytes.NewReader(b)
	}
	cc, err := readFrame(plain)
	if err != nil {
		return err
	}
	_, rest, _ := delimited(cc)
	ctxMsg, _, _ := delimited(rest)
	_ = eachField(ctxMsg, func(num protowire.Number, _ protowire.Type, _ uint64, s []byte) {
		if num == 2 {
			_ = eachField(s, func(num protowire.Number, _ protowire.Type, _ uint64, s []byte) {
				if num == 1 {
					f.gotUser = string(s)
				}
			})
		}
	})
	call, err := readFrame(plain)
	if err != nil {
		return err
	}
	_, rest, _ = delimited(call)
	rh, _, _ := delimited(rest)
	_ = eachField(rh, func(num protowire.Number, _ protowire.Type, _ uint64, s []byte) {
		if num == 1 {
			f.gotMethod = string(s)
		}
	})
	answer := frame(responseHeaderBytes(0, statusSuccess), nil)
	if f.chosen != qopAuth {
		// The answer in two WRAP messages, the first rotated (RRC),
		// as a reader must join tokens into frames.
		half := len(answer) / 2
		for i, part := range [][]byte{answer[:half], answer[half:]} {
			tok, err := wrapToken(key, part, f.chosen == qopAuthConf, true, uint64(i+1))
			if err != nil {
				return err
			}
			if i == 0 {
				tok = rotate(tok, 5)
			}
			if err := send(saslMessage{state: saslWrap, token: tok}); err != nil {
				return err
			}
		}
	} else if _, err := conn.Write(answer); err != nil {
		return err
	}
	return nil
}

// rotate sets RRC to n and rotates the body right by n (RFC 4121 §4.2.5).
func rotate(tok []byte, n int) []byte {
	h, body := bytes.Clone(tok[:wrapHeaderLen]), tok[wrapHeaderLen:]
	binary.BigEndian.PutUint16(h[6:8], uint16(n))
	k := len(body) - n%len(body)
	return append(h, append(bytes.Clone(body[k:]), body[:k]...)...)
}

// responseHeaderBytes encodes an RpcResponseHeaderProto.
func responseHeaderBytes(callID uint32, status uint64) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(callID))
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	return protowire.AppendVarint(b, status)
}

func (f *fakeSecureRM) start(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	f.errs = make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			f.errs <- err
			return
		}
		f.errs <- f.serve(c)
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return "localhost:" + port
}

// TestSASLHandshake: refreshNodes over SASL GSSAPI with a ticket from a
// real KDC, for each layer the server offers; the strongest offered is
// chosen, the calls are wrapped (signed or sealed) when it is above auth,
// the effective user is the principal, and the success is recorded.
func TestSASLHandshake(t *testing.T) {
	realm := startSaslRealm(t)
	for _, c := range []struct {
		name   string
		offer  byte
		want   byte
		mutual bool
	}{
		{"auth", qopAuth, qopAuth, false},
		{"auth-int", qopAuthInt, qopAuthInt, false},
		{"auth-conf", qopAuthConf, qopAuthConf, false},
		{"all offered", qopAuth | qopAuthInt | qopAuthConf, qopAuthConf, false},
		{"mutual then auth-int", qopAuth | qopAuthInt, qopAuthInt, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeSecureRM{keytab: realm.rmKeytab, qop: c.offer, serverID: "localhost", mutual: c.mutual}
			addr := f.start(t)
			cl, err := New(Config{Addrs: []string{addr}, Kerberos: realm.krb, CallTimeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			callErr := cl.RefreshNodes(context.Background(), Graceful, 0)
			if err := <-f.errs; err != nil {
				t.Fatalf("server: %v (client: %v)", err, callErr)
			}
			if callErr != nil {
				t.Fatal(callErr)
			}
			if f.chosen != c.want || f.gotUser != "gpubroker@"+kdc.Realm || f.gotMethod != "refreshNodes" {
				t.Fatalf("chose %#x (want %#x), user %q, method %q", f.chosen, c.want, f.gotUser, f.gotMethod)
			}
			if last := realm.krb.records[len(realm.krb.records)-1]; last != addr+" sasl "+qopName(c.want) {
				t.Fatalf("recorded %q", last)
			}
		})
	}
}

// TestSASLWrongServerPrincipal: an RM naming another principal than
// yarn.kerberos.rm_principal says is refused before any ticket is sent,
// with both names in the error.
func TestSASLWrongServerPrincipal(t *testing.T) {
	realm := startSaslRealm(t)
	f := &fakeSecureRM{keytab: realm.rmKeytab, qop: qopAuth, serverID: "rm1.example"}
	addr := f.start(t)
	cl, err := New(Config{Addrs: []string{addr}, Kerberos: realm.krb, CallTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = cl.RefreshNodes(context.Background(), Normal, 0)
	if err == nil || !strings.Contains(err.Error(), "is rm/rm1.example, not rm/localhost") || !strings.Contains(err.Error(), "as gpubroker@"+kdc.Realm) {
		t.Fatalf("err = %v", err)
	}
	<-f.errs
}

// TestSASLSimpleServer: an RM without Kerberos answers NEGOTIATE with
// SUCCESS; the error says so.
func TestSASLSimpleServer(t *testing.T) {
	realm := startSaslRealm(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		_, _ = io.ReadFull(r, make([]byte, 7))
		_, _ = readFrame(r)
		_, _ = c.Write(frame(responseHeaderBytes(uint32(0xFFFFFFDF), statusSuccess), saslMessage{state: saslSuccess}.marshal()))
	}()
	cl, err := New(Config{Addrs: []string{l.Addr().String()}, Kerberos: realm.krb})
	if err != nil {
		t.Fatal(err)
	}
	err = cl.RefreshNodes(context.Background(), Normal, 0)
	if err == nil || !strings.Contains(err.Error(), "hadoop.security.authentication=simple") {
		t.Fatalf("err = %v", err)
	}
}

// TestWrapTokensAgreeWithGokrb5: integrity tokens made here verify with
// gokrb5's own WrapToken, and gokrb5's acceptor tokens unwrap here; a
// flipped bit fails either kind.
func TestWrapTokensAgreeWithGokrb5(t *testing.T) {
	key := types.EncryptionKey{KeyType: 18, KeyValue: bytes.Repeat([]byte{7}, 32)}
	msg := []byte("hello, resource manager")
	mine, err := wrapToken(key, msg, false, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	var theirs gssapi.WrapToken
	if err := theirs.Unmarshal(mine, false); err != nil {
		t.Fatal(err)
	}
	if ok, err := theirs.Verify(key, keyusage.GSSAPI_INITIATOR_SEAL); !ok || !bytes.Equal(theirs.Payload, msg) {
		t.Fatalf("gokrb5 rejects our token: %v", err)
	}
	acc := gssapi.WrapToken{Flags: flagSentByAcceptor, EC: 12, SndSeqNum: 9, Payload: msg}
	if err := acc.SetCheckSum(key, keyusage.GSSAPI_ACCEPTOR_SEAL); err != nil {
		t.Fatal(err)
	}
	b, err := acc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, sealed, err := unwrapToken(key, b, true)
	if err != nil || sealed || !bytes.Equal(got, msg) {
		t.Fatalf("unwrap gokrb5's token: %q %v %v", got, sealed, err)
	}
	if _, _, err := unwrapToken(key, rotate(b, 7), true); err != nil {
		t.Fatalf("rotated: %v", err)
	}
	for _, conf := range []bool{false, true} {
		tok, err := wrapToken(key, msg, conf, true, 3)
		if err != nil {
			t.Fatal(err)
		}
		if conf && bytes.Contains(tok, msg) {
			t.Fatal("sealed token carries the message in clear")
		}
		got, sealed, err := unwrapToken(key, tok, true)
		if err != nil || sealed != conf || !bytes.Equal(got, msg) {
			t.Fatalf("conf=%v: %q %v %v", conf, got, sealed, err)
		}
		tok[len(tok)-3] ^= 1
		if _, _, err := unwrapToken(key, tok, true); err == nil {
			t.Fatalf("conf=%v: a flipped bit unwrapped", conf)
		}
		if _, _, err := unwrapToken(key, tok, false); err == nil || errors.Is(err, io.EOF) {
			t.Fatalf("conf=%v: an acceptor token taken as the initiator's", conf)
		}
	}
}
