package yarn

import (
	"errors"
	"fmt"
	"time"

	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/iana/nametype"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"
)

// A keytab login's TGT is renewed by gokrb5 itself (at 5/6 of its life,
// then a new login once renewal runs out). A client made from a ticket
// cache is not: its TGT would lapse with the cache's. renewCache does it:
// at 2/3 of the TGT's life it first reads the cache file again (an
// external renewer such as `kinit -R` or k5start may have renewed it),
// else renews the TGT with the KDC while renewable, and swaps in a client
// made from the fresher TGT.

// renewRetry is the wait after a failed renewal.
const renewRetry = 30 * time.Second

// cacheTGT returns the cache's TGT for its principal's realm.
func cacheTGT(cc *credentials.CCache) (*credentials.Credential, error) {
	spn := types.PrincipalName{NameType: nametype.KRB_NT_SRV_INST, NameString: []string{"krbtgt", cc.DefaultPrincipal.Realm}}
	c, ok := cc.GetEntry(spn)
	if !ok {
		return nil, errors.New("no TGT in the cache")
	}
	return c, nil
}

// renewCache keeps the ticket cache client's TGT valid until Close.
func (k *Kerberos) renewCache(cc *credentials.CCache, tgt *credentials.Credential) {
	for {
		life := tgt.EndTime.Sub(tgt.StartTime)
		if tgt.StartTime.IsZero() {
			life = tgt.EndTime.Sub(tgt.AuthTime)
		}
		if !k.sleep(time.Until(tgt.EndTime.Add(-life / 3))) {
			return
		}
		next, cred, err := k.fresherTGT(cc, tgt)
		var cl *client.Client
		if err == nil {
			cl, err = client.NewFromCCache(next, k.krb5conf, client.DisablePAFXFAST(true))
		}
		if err != nil {
			k.cfg.Logger.Error("kerberos ticket cache renewal", "principal", k.principal, "ticket_cache", k.cfg.TicketCache, "expires", tgt.EndTime, "err", err)
			k.Record("", "", "", err)
			if !time.Now().Before(tgt.EndTime) {
				return // expired: nothing left to renew
			}
			if !k.sleep(renewRetry) {
				return
			}
			continue
		}
		k.mu.Lock()
		select {
		case <-k.stop:
			k.mu.Unlock()
			return
		default:
		}
		old := k.cl
		k.cl = cl
		k.mu.Unlock()
		old.Destroy()
		cc, tgt = next, cred
		k.cfg.Logger.Info("kerberos TGT renewed", "principal", k.principal, "expires", tgt.EndTime)
	}
}

// sleep waits d; false when Close came first.
func (k *Kerberos) sleep(d time.Duration) bool {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-k.stop:
		return false
	case <-t.C:
		return true
	}
}

// fresherTGT returns a cache whose TGT lasts longer than tgt: the file's,
// if something renewed it, else one renewed with the KDC now.
func (k *Kerberos) fresherTGT(cc *credentials.CCache, tgt *credentials.Credential) (*credentials.CCache, *credentials.Credential, error) {
	if f, err := credentials.LoadCCache(k.cfg.TicketCache); err == nil {
		if c, err := cacheTGT(f); err == nil && c.EndTime.After(tgt.EndTime) && f.DefaultPrincipal.Realm == cc.DefaultPrincipal.Realm &&
			f.DefaultPrincipal.PrincipalName.Equal(cc.DefaultPrincipal.PrincipalName) {
			return f, c, nil
		}
	}
	if !time.Now().Before(tgt.RenewTill) {
		return nil, nil, fmt.Errorf("the TGT of %s can no longer be renewed (renewable until %s): run kinit %s", k.principal, tgt.RenewTill.Format(time.RFC3339), k.principal)
	}
	var t messages.Ticket
	if err := t.Unmarshal(tgt.Ticket); err != nil {
		return nil, nil, fmt.Errorf("ticket cache TGT: %w", err)
	}
	realm := cc.DefaultPrincipal.Realm
	spn := types.PrincipalName{NameType: nametype.KRB_NT_SRV_INST, NameString: []string{"krbtgt", realm}}
	_, rep, err := k.Client().TGSREQGenerateAndExchange(spn, realm, t, tgt.Key, true)
	if err != nil {
		return nil, nil, fmt.Errorf("renew the TGT of %s: %w", k.principal, err)
	}
	b, err := rep.Ticket.Marshal()
	if err != nil {
		return nil, nil, err
	}
	ep := rep.DecryptedEncPart
	cred := *tgt
	cred.Ticket, cred.Key = b, ep.Key
	cred.AuthTime, cred.StartTime, cred.EndTime, cred.RenewTill = ep.AuthTime, ep.StartTime, ep.EndTime, ep.RenewTill
	next := *cc
	// Only the TGT: service tickets come again from the new client.
	next.Credentials = []*credentials.Credential{&cred}
	return &next, &cred, nil
}
