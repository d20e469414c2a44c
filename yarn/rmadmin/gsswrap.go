package rmadmin

import (
	"bytes"
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jcmturner/gokrb5/v8/crypto"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/types"
)

// RFC 4121 §4.2.6.2 Wrap tokens, which carry the SASL GSSAPI security
// layer: integrity only (auth-int, and the security-layer negotiation) or
// sealed (auth-conf). gokrb5's gssapi.WrapToken covers only unrotated
// integrity tokens, so both kinds are built here from its crypto.
const (
	wrapHeaderLen      = 16
	flagSentByAcceptor = 0x01
	flagSealed         = 0x02
	flagAcceptorSubkey = 0x04
	wrapTokenID0       = 0x05
	wrapTokenID1       = 0x04
	wrapFiller         = 0xFF
)

// gssContext is the state of an established Kerberos context as the
// initiator: the ticket's session key (no subkey is negotiated) and the
// sequence number of the next token sent.
type gssContext struct {
	key types.EncryptionKey
	seq uint64
}

func wrapHeader(flags byte, ec, rrc uint16, seq uint64) []byte {
	h := make([]byte, wrapHeaderLen)
	h[0], h[1], h[2], h[3] = wrapTokenID0, wrapTokenID1, flags, wrapFiller
	binary.BigEndian.PutUint16(h[4:6], ec)
	binary.BigEndian.PutUint16(h[6:8], rrc)
	binary.BigEndian.PutUint64(h[8:16], seq)
	return h
}

// wrap makes an initiator Wrap token of msg, sealed when conf.
func (g *gssContext) wrap(msg []byte, conf bool) ([]byte, error) {
	seq := g.seq
	g.seq++
	return wrapToken(g.key, msg, conf, false, seq)
}

// unwrap checks an acceptor Wrap token and returns its message and
// whether it was sealed.
func (g *gssContext) unwrap(tok []byte) ([]byte, bool, error) {
	return unwrapToken(g.key, tok, true)
}

// usages returns the key usage of tokens sent by the acceptor or the
// initiator.
func sealUsage(acceptor bool) uint32 {
	if acceptor {
		return keyusage.GSSAPI_ACCEPTOR_SEAL
	}
	return keyusage.GSSAPI_INITIATOR_SEAL
}

// wrapToken builds a Wrap token of msg as the acceptor or the initiator.
func wrapToken(key types.EncryptionKey, msg []byte, conf, acceptor bool, seq uint64) ([]byte, error) {
	et, err := crypto.GetEtype(key.KeyType)
	if err != nil {
		return nil, err
	}
	var flags byte
	if acceptor {
		flags |= flagSentByAcceptor
	}
	usage := sealUsage(acceptor)
	if conf {
		// E(msg | header with EC=0, RRC=0); no filler, no rotation.
		h := wrapHeader(flags|flagSealed, 0, 0, seq)
		_, ct, err := et.EncryptMessage(key.KeyValue, append(bytes.Clone(msg), h...), usage)
		if err != nil {
			return nil, fmt.Errorf("gss wrap: %w", err)
		}
		return append(h, ct...), nil
	}
	// msg | checksum(msg | header with EC=0, RRC=0); EC is the checksum's length.
	sum, err := et.GetChecksumHash(key.KeyValue, append(bytes.Clone(msg), wrapHeader(flags, 0, 0, seq)...), usage)
	if err != nil {
		return nil, fmt.Errorf("gss wrap: %w", err)
	}
	out := wrapHeader(flags, uint16(len(sum)), 0, seq)
	out = append(out, msg...)
	return append(out, sum...), nil
}

// unwrapToken checks a Wrap token sent by the acceptor (or the
// initiator) and returns its message and whether it was sealed. A
// rotated token (RRC > 0, as Windows and some Java versions send) is
// turned back first.
func unwrapToken(key types.EncryptionKey, tok []byte, fromAcceptor bool) ([]byte, bool, error) {
	if len(tok) < wrapHeaderLen || tok[0] != wrapTokenID0 || tok[1] != wrapTokenID1 || tok[3] != wrapFiller {
		return nil, false, errors.New("gss unwrap: not an RFC 4121 wrap token")
	}
	flags := tok[2]
	if (flags&flagSentByAcceptor != 0) != fromAcceptor {
		return nil, false, errors.New("gss unwrap: token sent by the wrong side (acceptor flag)")
	}
	usage := sealUsage(fromAcceptor)
	if flags&flagAcceptorSubkey != 0 {
		return nil, false, errors.New("gss unwrap: token under an acceptor subkey, which was not negotiated")
	}
	ec := int(binary.BigEndian.Uint16(tok[4:6]))
	rrc := int(binary.BigEndian.Uint16(tok[6:8]))
	seq := binary.BigEndian.Uint64(tok[8:16])
	body := bytes.Clone(tok[wrapHeaderLen:])
	if len(body) > 0 {
		// Undo the right rotation by RRC.
		r := rrc % len(body)
		body = append(body[r:], body[:r]...)
	}
	et, err := crypto.GetEtype(key.KeyType)
	if err != nil {
		return nil, false, err
	}
	if flags&flagSealed != 0 {
		pt, err := et.DecryptMessage(key.KeyValue, body, usage)
		if err != nil {
			return nil, true, fmt.Errorf("gss unwrap: %w", err)
		}
		if len(pt) < ec+wrapHeaderLen {
			return nil, true, errors.New("gss unwrap: sealed token too short")
		}
		inner := pt[len(pt)-wrapHeaderLen:]
		want := wrapHeader(flags, uint16(ec), 0, seq)
		if !bytes.Equal(inner[:6], want[:6]) || !bytes.Equal(inner[8:], want[8:]) {
			return nil, true, errors.New("gss unwrap: sealed header does not match the token's")
		}
		return pt[:len(pt)-ec-wrapHeaderLen], true, nil
	}
	if ec > len(body) {
		return nil, false, errors.New("gss unwrap: checksum longer than the token")
	}
	msg, sum := body[:len(body)-ec], body[len(body)-ec:]
	want, err := et.GetChecksumHash(key.KeyValue, append(bytes.Clone(msg), wrapHeader(flags, 0, 0, seq)...), usage)
	if err != nil {
		return nil, false, fmt.Errorf("gss unwrap: %w", err)
	}
	if !hmac.Equal(want, sum) {
		return nil, false, errors.New("gss unwrap: checksum mismatch")
	}
	return msg, false, nil
}
