package rmadmin

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/gssapi"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/spnego"
	"github.com/jcmturner/gokrb5/v8/types"
	"google.golang.org/protobuf/encoding/protowire"
)

// Kerberos is the broker's Kerberos login as the admin client needs it;
// *yarn.Kerberos implements it.
type Kerberos interface {
	// Principal is the broker's principal, user[/host]@REALM.
	Principal() string
	// Client is the logged-in gokrb5 client.
	Client() *client.Client
	// ServiceTicket returns a ticket for spn (with _HOST replaced by
	// host), its session key and the principal asked for.
	ServiceTicket(spn, host string) (messages.Ticket, types.EncryptionKey, string, error)
	// Record notes an authentication to server (err nil for a success).
	Record(server, via, as string, err error)
}

// Hadoop IPC SASL (org.apache.hadoop.security.SaslRpcClient): the
// preamble's auth byte, the call id of SASL messages, and the states of
// RpcSaslProto.
const (
	authProtocolSASL = 0xDF // AuthProtocol.SASL, -33 as a byte
	saslCallID       = -33

	saslSuccess   = 0
	saslNegotiate = 1
	saslInitiate  = 2
	saslChallenge = 3
	saslResponse  = 4
	saslWrap      = 5
)

// SASL GSSAPI security layers (RFC 4752 §3.3), as the QOP names
// hadoop.rpc.protection maps to: authentication, integrity, privacy.
const (
	qopAuth     = 0x01
	qopAuthInt  = 0x02
	qopAuthConf = 0x04
)

func qopName(q byte) string {
	switch q {
	case qopAuthConf:
		return "auth-conf"
	case qopAuthInt:
		return "auth-int"
	}
	return "auth"
}

// saslAuth is one RpcSaslProto.SaslAuth.
type saslAuth struct {
	method, mechanism, protocol, serverID string
	challenge                             []byte
}

// saslMessage is an RpcSaslProto.
type saslMessage struct {
	state uint64
	token []byte
	auths []saslAuth
}

func (m saslMessage) marshal() []byte {
	var b []byte
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, m.state)
	if m.token != nil {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, m.token)
	}
	for _, a := range m.auths {
		var ab []byte
		for i, s := range []string{a.method, a.mechanism, a.protocol, a.serverID} {
			if s != "" || i < 2 {
				ab = protowire.AppendTag(ab, protowire.Number(i+1), protowire.BytesType)
				ab = protowire.AppendString(ab, s)
			}
		}
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, ab)
	}
	return b
}

func parseSaslMessage(b []byte) (saslMessage, error) {
	var m saslMessage
	var errs []error
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, s []byte) {
		switch {
		case num == 2 && typ == protowire.VarintType:
			m.state = v
		case num == 3 && typ == protowire.BytesType:
			m.token = s
		case num == 4 && typ == protowire.BytesType:
			var a saslAuth
			errs = append(errs, eachField(s, func(num protowire.Number, typ protowire.Type, _ uint64, s []byte) {
				if typ != protowire.BytesType {
					return
				}
				switch num {
				case 1:
					a.method = string(s)
				case 2:
					a.mechanism = string(s)
				case 3:
					a.protocol = string(s)
				case 4:
					a.serverID = string(s)
				case 5:
					a.challenge = s
				}
			}))
			m.auths = append(m.auths, a)
		}
	})
	errs = append(errs, err)
	return m, errors.Join(errs...)
}

// saslFrame is a client SASL message in its frame.
func saslFrame(m saslMessage) []byte {
	return frame(rpcRequestHeader(saslCallID, nil), m.marshal())
}

// readSasl reads one SASL answer; a FATAL or ERROR answer (the server
// refusing the ticket or the user) is a *RemoteError.
func readSasl(r io.Reader, addr string) (saslMessage, error) {
	b, err := readFrame(r)
	if err != nil {
		return saslMessage{}, fmt.Errorf("sasl: read: %w", err)
	}
	hb, rest, err := delimited(b)
	if err != nil {
		return saslMessage{}, fmt.Errorf("sasl: answer header: %w", err)
	}
	h, err := parseResponseHeader(hb)
	if err != nil {
		return saslMessage{}, fmt.Errorf("sasl: answer header: %w", err)
	}
	if h.status != statusSuccess {
		return saslMessage{}, &RemoteError{Addr: addr, Method: "sasl", Class: h.exceptionClass, Message: h.errorMsg, Fatal: h.status == statusFatal}
	}
	if int32(h.callID) != saslCallID {
		return saslMessage{}, fmt.Errorf("sasl: answer to call %d, not to SASL", int32(h.callID))
	}
	mb, _, err := delimited(rest)
	if err != nil {
		return saslMessage{}, fmt.Errorf("sasl: answer: %w", err)
	}
	return parseSaslMessage(mb)
}

// saslSession is an authenticated connection's security layer.
type saslSession struct {
	qop byte
	gss gssContext
}

// wrapped reports whether the connection's traffic is wrapped.
func (s *saslSession) wrapped() bool { return s != nil && s.qop != qopAuth }

// handshake authenticates the connection with Kerberos (SASL GSSAPI):
// NEGOTIATE, INITIATE with the AP-REQ, the server's security-layer offer
// in a CHALLENGE, our choice in a RESPONSE, SUCCESS. The strongest layer
// the server offers is taken (its hadoop.rpc.protection).
func (c *Client) handshake(conn net.Conn, r *bufio.Reader, addr string) (*saslSession, error) {
	k := c.cfg.Kerberos
	host, _, _ := net.SplitHostPort(addr)
	out := []byte{'h', 'r', 'p', 'c', rpcVersion, serviceClassDefault, authProtocolSASL}
	out = append(out, saslFrame(saslMessage{state: saslNegotiate})...)
	if _, err := conn.Write(out); err != nil {
		return nil, fmt.Errorf("sasl: write: %w", err)
	}
	neg, err := readSasl(r, addr)
	if err != nil {
		return nil, err
	}
	if neg.state == saslSuccess {
		return nil, fmt.Errorf("sasl: the RM at %s runs with simple authentication (hadoop.security.authentication=simple): drop yarn.kerberos or kerberize the RM", addr)
	}
	if neg.state != saslNegotiate {
		return nil, fmt.Errorf("sasl: answer in state %d to NEGOTIATE", neg.state)
	}
	var krb *saslAuth
	var offered []string
	for i, a := range neg.auths {
		offered = append(offered, a.method+"/"+a.mechanism)
		if a.method == "KERBEROS" && a.mechanism == "GSSAPI" {
			krb = &neg.auths[i]
		}
	}
	if krb == nil {
		return nil, fmt.Errorf("sasl: the RM at %s offers %s, not KERBEROS/GSSAPI", addr, strings.Join(offered, ", "))
	}
	tkt, key, spn, err := k.ServiceTicket(c.cfg.ServerPrincipal, host)
	if err != nil {
		return nil, err
	}
	if served := krb.protocol + "/" + krb.serverID; served != spn {
		return nil, fmt.Errorf("sasl: the RM at %s is %s, not %s: set yarn.kerberos.rm_principal to the RM's yarn.resourcemanager.principal, or name the admin address by the host in it", addr, served, spn)
	}
	tok, err := spnego.NewKRB5TokenAPREQ(k.Client(), tkt, key, []int{gssapi.ContextFlagInteg, gssapi.ContextFlagConf}, nil)
	if err != nil {
		return nil, fmt.Errorf("sasl: AP-REQ for %s: %w", spn, err)
	}
	apreq, err := tok.Marshal()
	if err != nil {
		return nil, fmt.Errorf("sasl: AP-REQ for %s: %w", spn, err)
	}
	if _, err := conn.Write(saslFrame(saslMessage{state: saslInitiate, token: apreq, auths: []saslAuth{{
		method: krb.method, mechanism: krb.mechanism, protocol: krb.protocol, serverID: krb.serverID}}})); err != nil {
		return nil, fmt.Errorf("sasl: write: %w", err)
	}
	s := &saslSession{gss: gssContext{key: key}}
	for {
		m, err := readSasl(r, addr)
		if err != nil {
			return nil, err
		}
		switch m.state {
		case saslChallenge:
		case saslSuccess:
			if s.qop == 0 {
				return nil, errors.New("sasl: SUCCESS before the security layer was agreed")
			}
			return s, nil
		default:
			return nil, fmt.Errorf("sasl: unexpected state %d", m.state)
		}
		if len(m.token) > 0 && m.token[0] == 0x60 {
			// An AP-REP (mutual authentication): the context is
			// established; an empty RESPONSE asks for the layer offer.
			if _, err := conn.Write(saslFrame(saslMessage{state: saslResponse, token: []byte{}})); err != nil {
				return nil, fmt.Errorf("sasl: write: %w", err)
			}
			continue
		}
		offer, _, err := s.gss.unwrap(m.token)
		if err != nil {
			return nil, fmt.Errorf("sasl: security layer offer of %s: %w", spn, err)
		}
		reply, err := s.choose(offer)
		if err != nil {
			return nil, fmt.Errorf("sasl: %s: %w", addr, err)
		}
		if _, err := conn.Write(saslFrame(saslMessage{state: saslResponse, token: reply})); err != nil {
			return nil, fmt.Errorf("sasl: write: %w", err)
		}
	}
}

// maxRecv is the largest wrapped message we take, as told to the server.
const maxRecv = maxFrame

// choose answers the server's 4-byte offer (a QOP bit mask and its
// largest message) with the strongest layer in it and our largest
// message, integrity-wrapped (RFC 4752 §3.1).
func (s *saslSession) choose(offer []byte) ([]byte, error) {
	if len(offer) != 4 {
		return nil, fmt.Errorf("security layer offer of %d bytes, want 4", len(offer))
	}
	for _, q := range []byte{qopAuthConf, qopAuthInt, qopAuth} {
		if offer[0]&q != 0 {
			s.qop = q
			break
		}
	}
	if s.qop == 0 {
		return nil, fmt.Errorf("the server offers no security layer (mask %#x)", offer[0])
	}
	reply := binary.BigEndian.AppendUint32(nil, maxRecv)
	reply[0] = s.qop
	return s.gss.wrap(reply, false)
}

// wrapOut wraps client bytes (whole frames) in one SASL WRAP frame.
func (s *saslSession) wrapOut(b []byte) ([]byte, error) {
	tok, err := s.gss.wrap(b, s.qop == qopAuthConf)
	if err != nil {
		return nil, err
	}
	return saslFrame(saslMessage{state: saslWrap, token: tok}), nil
}

// wrappedReader yields the frames the server sends inside SASL WRAP
// messages once a layer above auth was agreed.
type wrappedReader struct {
	r    io.Reader
	s    *saslSession
	addr string
	buf  bytes.Buffer
}

func (w *wrappedReader) next() ([]byte, error) {
	for w.buf.Len() < 4 || w.buf.Len() < 4+int(binary.BigEndian.Uint32(w.buf.Bytes()[:4])) {
		m, err := readSasl(w.r, w.addr)
		if err != nil {
			return nil, err
		}
		if m.state != saslWrap {
			return nil, fmt.Errorf("sasl: answer in state %d, want WRAP", m.state)
		}
		plain, sealed, err := w.s.gss.unwrap(m.token)
		if err != nil {
			return nil, fmt.Errorf("sasl: %w", err)
		}
		if sealed != (w.s.qop == qopAuthConf) {
			return nil, fmt.Errorf("sasl: the RM sent a token of another protection than the agreed %s", qopName(w.s.qop))
		}
		w.buf.Write(plain)
	}
	return readFrame(&w.buf)
}
