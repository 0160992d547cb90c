package rig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// tokens are the static bearer tokens of the rig's users (kube-apiserver --token-auth-file).
type tokens struct {
	Admin, Kubelet, SecondKubelet string
}

// writePKI creates the cluster CA, kube-apiserver's serving certificate (for NodeIP, the
// kubernetes Service IP, loopback and the Service's DNS names), the service account signing
// key, the static token file and the kubeconfigs of the admin and of kubelet.
func writePKI() (tokens, error) {
	var tok tokens
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		return tok, err
	}
	caKey, caCert, caDER, err := newCA()
	if err != nil {
		return tok, err
	}
	if err := writePEM(filepath.Join(pkiDir, "ca.crt"), "CERTIFICATE", caDER); err != nil {
		return tok, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tok, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP(NodeIP), net.ParseIP(KubernetesServiceIP), net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return tok, err
	}
	if err := writePEM(filepath.Join(pkiDir, "apiserver.crt"), "CERTIFICATE", der); err != nil {
		return tok, err
	}
	if err := writeKey(filepath.Join(pkiDir, "apiserver.key"), key); err != nil {
		return tok, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tok, err
	}
	if err := writeKey(filepath.Join(pkiDir, "sa.key"), saKey); err != nil {
		return tok, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return tok, err
	}
	if err := writePEM(filepath.Join(pkiDir, "sa.pub"), "PUBLIC KEY", pub); err != nil {
		return tok, err
	}
	tok.Admin, tok.Kubelet, tok.SecondKubelet = randomToken(), randomToken(), randomToken()
	// The second node's kubelet identity exists from the start (the token file is read once),
	// unused until AddNode brings that node up.
	csv := fmt.Sprintf("%s,admin,admin,system:masters\n%s,system:node:%s,kubelet,system:nodes\n%s,system:node:%s,kubelet-b,system:nodes\n",
		tok.Admin, tok.Kubelet, NodeName, tok.SecondKubelet, SecondNodeName)
	if err := os.WriteFile(filepath.Join(pkiDir, "tokens.csv"), []byte(csv), 0o600); err != nil {
		return tok, err
	}
	if err := writeKubeconfig(kubeconfigPath, "admin", tok.Admin, caDER); err != nil {
		return tok, err
	}
	if err := writeKubeconfig(secondNode().kubeconfig, "kubelet-b", tok.SecondKubelet, caDER); err != nil {
		return tok, err
	}
	return tok, writeKubeconfig(kubeletKubeconfig, "kubelet", tok.Kubelet, caDER)
}

func newCA() (*ecdsa.PrivateKey, *x509.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "s3csi-e2e-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return key, cert, der, err
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func randomToken() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func writeKubeconfig(path, user, token string, caDER []byte) error {
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: s3csi-e2e
  cluster:
    server: https://%s:%d
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: s3csi-e2e
  context:
    cluster: s3csi-e2e
    user: %s
current-context: s3csi-e2e
`, NodeIP, APIPort, ca, user, token, user)
	return os.WriteFile(path, []byte(cfg), 0o600)
}
