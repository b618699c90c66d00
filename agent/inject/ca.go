package inject

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// ca is a call's own certificate authority: its key lives in this process only, its
// certificate goes into the call's trust store, and it signs a certificate for each of the
// call's credential hosts the tool reaches. It ends with the call (Close drops the key).
type ca struct {
	mu     sync.Mutex
	key    *ecdsa.PrivateKey
	cert   *x509.Certificate
	pem    []byte
	leaves map[string]*tls.Certificate
}

func newCA(callKey string, life time.Duration) (*ca, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("call ca key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "berm call " + callKey, Organization: []string{"berm injecting egress"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(life),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("call ca certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &ca{key: key, cert: cert, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), leaves: map[string]*tls.Certificate{}}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}

// leaf is the certificate the call sees for host, made once per call and host.
func (c *ca) leaf(host string) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.key == nil {
		return nil, fmt.Errorf("the call's ca is revoked")
	}
	if l := c.leaves[host]; l != nil {
		return l, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    c.cert.NotBefore,
		NotAfter:     c.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key}
	if len(c.leaves) >= maxLeaves {
		// a tool naming ever new servers (a wildcard certificate upstream verifies them all)
		// makes berm mint one per name, but keeps at most maxLeaves: one is let go
		for h := range c.leaves {
			delete(c.leaves, h)
			break
		}
	}
	c.leaves[host] = l
	return l, nil
}

// maxLeaves bounds the certificates a call's CA keeps (one per server name the call reached).
const maxLeaves = 256

// revoke forgets the keys: no certificate of the call's is made or served again.
func (c *ca) revoke() {
	c.mu.Lock()
	c.key, c.leaves = nil, map[string]*tls.Certificate{}
	c.mu.Unlock()
}
