package helm

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/s3csi/s3-csi-driver/pkg/mountmode"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// csiDriver1x is the CSIDriver object of the Scality driver 1.x chart, reproduced field by field
// from ../shared/reference/anchors.md §8.3 (charts/scality-mountpoint-s3-csi-driver,
// templates/csidriver.yaml): attachRequired false, podInfoOnMount true, requiresRepublish true,
// and neither fsGroupPolicy nor volumeLifecycleModes (the API server defaults them to
// ReadWriteOnceWithFSType and [Persistent]).
const csiDriver1x = `
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: s3.csi.scality.com
  labels:
    app.kubernetes.io/managed-by: Helm
  annotations:
    meta.helm.sh/release-name: scality-mountpoint-s3-csi-driver
    meta.helm.sh/release-namespace: kube-system
spec:
  attachRequired: false
  podInfoOnMount: true
  requiresRepublish: true
`

// TestCSIDriverFrom1x: on a real API server (v1.33), this chart's CSIDriver replaces the 1.x one
// in place, fsGroupPolicy included (mutable since Kubernetes 1.29), and the result is this
// chart's object field for field: `helm upgrade <1.x release> charts/scality-s3-csi-driver` needs
// no step for it (docs/upgrade.md). Running mounts do not depend on the CSIDriver object.
func TestCSIDriverFrom1x(t *testing.T) {
	k := apiServer(t)
	a := newApplier(t, k)
	var old unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(csiDriver1x), &old.Object); err != nil {
		t.Fatal(err)
	}
	if err := a.apply(&old, false); err != nil {
		t.Fatalf("1.x CSIDriver: %v", err)
	}
	t.Cleanup(func() { _ = a.delete(&old) })
	var before storagev1.CSIDriver
	harness.Must(t, k.Client.Get(context.Background(), client.ObjectKey{Name: "s3.csi.scality.com"}, &before))
	if p := before.Spec.FSGroupPolicy; p == nil || *p != storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy {
		t.Fatalf("the 1.x CSIDriver's fsGroupPolicy defaulted to %v, want ReadWriteOnceWithFSType: the fixture does not stand for 1.x", p)
	}
	_, objs := modes[0].render(t)
	ours := one(t, objs, "CSIDriver", "s3.csi.scality.com")
	if err := a.apply(ours, false); err != nil {
		t.Fatalf("applying this chart's CSIDriver over 1.x's: %v", err)
	}
	var after storagev1.CSIDriver
	harness.Must(t, k.Client.Get(context.Background(), client.ObjectKey{Name: "s3.csi.scality.com"}, &after))
	var want storagev1.CSIDriver
	harness.Must(t, runtime.DefaultUnstructuredConverter.FromUnstructured(ours.Object, &want))
	if p := after.Spec.FSGroupPolicy; p == nil || *p != *want.Spec.FSGroupPolicy || after.Spec.RequiresRepublish == nil || !*after.Spec.RequiresRepublish || !*after.Spec.PodInfoOnMount ||
		fmt.Sprint(after.Spec.VolumeLifecycleModes) != fmt.Sprint(want.Spec.VolumeLifecycleModes) {
		t.Errorf("after the upgrade the CSIDriver is %+v, want this chart's %+v", after.Spec, want.Spec)
	}
}

// TestValuesOf1xRefused: values users set in the 1.x chart are refused with what to use instead.
func TestValuesOf1xRefused(t *testing.T) {
	for set, want := range map[string]string{
		"s3CredentialSecret.name=s3-secret":                         "use s3.credentials.secretName",
		"node.s3EndpointUrl=http://s3.example.com":                  "use s3.endpointUrl",
		"node.s3Region=us-east-1":                                   "use s3.region",
		"node.mountpointInstallPath=/opt/x/":                        "use node.mountS3InstallDir",
		"node.defaultTolerations=true":                              "use node.tolerations",
		"node.podInfoOnMountCompat.enable=true":                     "podInfoOnMount",
		"tls.caCertConfigMap=ca":                                    "use tls.existingConfigMap",
		"tls.caCertData=x":                                          "use tls.caBundle",
		"initContainer.installMountpoint.resources.requests.cpu=1m": "node.resources",
		"experimental.podMounter=true":                              "mounter.modesInUse",
	} {
		_, err := harness.HelmTemplate(t, release, namespace, "--set", set)
		if err == nil || !strings.Contains(err.Error(), "is a value of the 1.x chart: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: %v; want a refusal naming %q", set, err, want)
		}
	}
}

// TestOneDefaultMode: the chart's mounter.defaultMode, the node plugin's and the controller's
// --default-mounter defaults are one value, mountmode.Default.
func TestOneDefaultMode(t *testing.T) {
	out, err := harness.Helm(t, "show", "values", harness.ChartDir())
	harness.Must(t, err)
	var v struct {
		Mounter struct {
			DefaultMode string `json:"defaultMode"`
		} `json:"mounter"`
	}
	harness.Must(t, yaml.Unmarshal([]byte(out), &v))
	if v.Mounter.DefaultMode != string(mountmode.Default) {
		t.Errorf("chart mounter.defaultMode = %q, code default %q", v.Mounter.DefaultMode, mountmode.Default)
	}
	for _, bin := range []string{"scality-s3-csi-driver", "scality-csi-controller"} {
		help, _ := exec.Command(harness.Bin(t, bin), "-h").CombinedOutput()
		want := fmt.Sprintf("(default %q)", string(mountmode.Default))
		i := strings.Index(string(help), "-default-mounter")
		if i < 0 || !strings.Contains(string(help[i:min(len(help), i+400)]), want) {
			t.Errorf("%s --default-mounter: want the default %s in its help", bin, want)
		}
	}
}
