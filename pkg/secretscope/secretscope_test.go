package secretscope

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/s3csi/s3-csi-driver/mounter"
	"github.com/s3csi/s3-csi-driver/pkg/version"
)

// pvs is a PVGetter over a map, or failing with err.
type pvs struct {
	m   map[string]*corev1.PersistentVolume
	err error
}

func (p pvs) Get(_ context.Context, name string, _ metav1.GetOptions) (*corev1.PersistentVolume, error) {
	if p.err != nil {
		return nil, p.err
	}
	if pv, ok := p.m[name]; ok {
		return pv.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumes"}, name)
}

// pv is a PV of this driver, volume handle "vol", secret in secretNS, bound to claimNS/data.
func pv(secretNS, claimNS string, attrs map[string]string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: version.DriverName, VolumeHandle: "vol", VolumeAttributes: attrs,
				NodePublishSecretRef: &corev1.SecretReference{Name: "s3-creds", Namespace: secretNS},
			}},
			ClaimRef: &corev1.ObjectReference{Namespace: claimNS, Name: "data"},
		},
	}
}

func TestCheck(t *testing.T) {
	ok := Publish{PVName: "pv-1", VolumeID: "vol", PodNamespace: "team-b"}
	cases := []struct {
		name string
		pv   *corev1.PersistentVolume
		pub  Publish
		err  error
		want []string // substrings of the error; nil: allowed
	}{
		{"same namespace", pv("team-b", "team-b", nil), ok, nil, nil},
		{"same namespace, scope claim", pv("team-b", "team-b", map[string]string{Attribute: Claim}), ok, nil, nil},
		{"no pod namespace from kubelet", pv("team-b", "team-b", nil), Publish{PVName: "pv-1", VolumeID: "vol"}, nil, nil},
		{"another namespace's secret", pv("team-a", "team-b", nil), ok, ErrRefused,
			[]string{"node-publish secret team-a/s3-creds, in namespace team-a", "claim team-b/data is in namespace team-b", "${pvc.namespace}", Attribute + ": " + Any}},
		{"another namespace's secret, allowed by the PV", pv("team-a", "team-b", map[string]string{Attribute: Any}), ok, nil, nil},
		{"bad scope attribute", pv("team-a", "team-b", map[string]string{Attribute: "anywhere"}), ok, ErrRefused, []string{`is "anywhere": use claim or any`}},
		{"claim of another namespace than the pod's", pv("team-b", "team-b", nil), Publish{PVName: "pv-1", VolumeID: "vol", PodNamespace: "team-c"}, ErrRefused,
			[]string{"bound to claim team-b/data, not to a claim of the workload's namespace team-c"}},
		{"volume id is not the PV's", pv("team-b", "team-b", nil), Publish{PVName: "pv-1", VolumeID: "other"}, ErrRefused, []string{`is not volume "other"`}},
		{"no PV name in the target path", pv("team-b", "team-b", nil), Publish{VolumeID: "vol"}, ErrRefused, []string{"does not name the PersistentVolume"}},
		{"PV gone", nil, ok, ErrRefused, []string{"PersistentVolume pv-1 does not exist"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := map[string]*corev1.PersistentVolume{}
			if c.pv != nil {
				m[c.pv.Name] = c.pv
			}
			err := NewWithGetter(pvs{m: m}).Check(context.Background(), c.pub)
			if c.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, c.err) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestCheckShapes(t *testing.T) {
	noRef := pv("team-b", "team-b", nil)
	noRef.Spec.CSI.NodePublishSecretRef = nil
	unbound := pv("team-b", "team-b", nil)
	unbound.Spec.ClaimRef = nil
	otherDriver := pv("team-b", "team-b", nil)
	otherDriver.Spec.CSI.Driver = "ebs.csi.aws.com"
	for name, p := range map[string]*corev1.PersistentVolume{"no secret ref": noRef, "unbound": unbound, "another driver": otherDriver} {
		err := NewWithGetter(pvs{m: map[string]*corev1.PersistentVolume{"pv-1": p}}).Check(context.Background(), Publish{PVName: "pv-1", VolumeID: "vol"})
		if !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
	// The API server not answering is not a refusal: kubelet retries.
	err := NewWithGetter(pvs{err: errors.New("connection refused")}).Check(context.Background(), Publish{PVName: "pv-1", VolumeID: "vol"})
	if !errors.Is(err, mounter.ErrUnavailable) || errors.Is(err, ErrRefused) {
		t.Errorf("API error: %v, want unavailable", err)
	}
	if err := (NoAPI{}).Check(context.Background(), Publish{}); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "--node-publish-secret-scope=any") {
		t.Errorf("NoAPI: %v", err)
	}
}
