package helm

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/s3csi/s3-csi-driver/pkg/podcontract"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// TestLint: helm lint --strict passes with the defaults (lint lets the chart's refusals
// through as warnings), with the values an offline render must set (harness.OfflineValues) and
// with each mode's values over them.
func TestLint(t *testing.T) {
	cases := [][]string{{"lint", harness.ChartDir(), "--strict"}, {"lint", harness.ChartDir(), "--strict", "--values", harness.OfflineValues()}}
	for _, m := range modes {
		cases = append(cases, []string{"lint", harness.ChartDir(), "--strict", "--values", harness.OfflineValues(), "--values", m.valuesFile()})
	}
	for _, args := range cases {
		if out, err := harness.Helm(t, args...); err != nil {
			t.Errorf("helm %v:\n%s\n%v", args, out, err)
		}
	}
}

// TestGolden compares the whole rendering of each mode with testdata/golden/<mode>.yaml.
// Run `cd tests && go test ./helm -run TestGolden -update` after a deliberate chart change and review
// the diff.
func TestGolden(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			out, _ := m.render(t)
			golden := filepath.Join("testdata", "golden", m.name+".yaml")
			if *update {
				if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), out); diff != "" {
				t.Errorf("rendering of %s differs from %s (-golden +rendered); if intended, rerun with -update:\n%s", m.name, golden, diff)
			}
		})
	}
}

// typed converts a rendered object into its API type.
func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &v, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return &v
}

func container(t *testing.T, spec corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	return nil
}

func containerNames(spec corev1.PodSpec) (init, main []string) {
	for _, c := range spec.InitContainers {
		init = append(init, c.Name)
	}
	for _, c := range spec.Containers {
		main = append(main, c.Name)
	}
	return init, main
}

// flagValue returns the value of --name=value in args, and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name {
			return "", true
		}
	}
	return "", false
}

func hostPaths(spec corev1.PodSpec) map[string]string {
	out := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			out[v.Name] = v.HostPath.Path
		}
	}
	return out
}

func mountFor(c *corev1.Container, volume string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == volume {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

// TestModeRendering checks what each mode renders: host access, privilege, the Mountpoint Pod
// machinery and the flags that must agree between components.
func TestModeRendering(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			_, objs := m.render(t)
			ds := typed[appsv1.DaemonSet](t, one(t, objs, "DaemonSet", "s3-csi-node"))
			dep := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "s3-csi-controller"))
			node, ctrl := ds.Spec.Template.Spec, dep.Spec.Template.Spec

			// Containers.
			wantInit := []string(nil)
			if m.systemd {
				wantInit = []string{"install-mp"}
			}
			wantCtrl := []string{"s3-csi-controller", "csi-provisioner"}
			// The Pod Reconciler: a Deployment and a service account of its own, in pod mode only.
			var recSpec corev1.PodSpec
			if recs := find(objs, "Deployment", "s3-pod-reconciler"); m.pod != (len(recs) == 1) {
				t.Errorf("Deployment s3-pod-reconciler rendered %d times, pod mode in use %v", len(recs), m.pod)
			} else if m.pod {
				rd := typed[appsv1.Deployment](t, recs[0])
				recSpec = rd.Spec.Template.Spec
				if _, got := containerNames(recSpec); !slices.Equal(got, []string{"s3-pod-reconciler"}) {
					t.Errorf("Pod Reconciler containers %v", got)
				}
				if recSpec.ServiceAccountName != "s3-pod-reconciler" || recSpec.ServiceAccountName == ctrl.ServiceAccountName {
					t.Errorf("Pod Reconciler service account %q (controller's %q): want one of its own", recSpec.ServiceAccountName, ctrl.ServiceAccountName)
				}
				if rd.Spec.Template.Labels["app"] != "s3-pod-reconciler" || len(find(objs, "ServiceAccount", "s3-pod-reconciler")) != 1 {
					t.Errorf("Pod Reconciler: label app=%q, service account rendered %d times", rd.Spec.Template.Labels["app"], len(find(objs, "ServiceAccount", "s3-pod-reconciler")))
				}
			}
			gotInit, gotNode := containerNames(node)
			_, gotCtrl := containerNames(ctrl)
			if diff := cmp.Diff(wantInit, gotInit); diff != "" {
				t.Errorf("node init containers (-want +got):\n%s", diff)
			}
			wantNode := []string{"s3-plugin"}
			if m.sidecars {
				wantNode = append(wantNode, "node-driver-registrar", "liveness-probe")
			}
			if diff := cmp.Diff(wantNode, gotNode); diff != "" {
				t.Errorf("node containers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantCtrl, gotCtrl); diff != "" {
				t.Errorf("controller containers (-want +got):\n%s", diff)
			}
			if ds.Labels["app"] != "s3-csi-node" || dep.Labels["app"] != "s3-csi-controller" || dep.Spec.Template.Labels["app"] != "s3-csi-controller" {
				t.Errorf("labels app=s3-csi-node / app=s3-csi-controller missing")
			}

			// Host access of the node plugin: exactly what the modes in use need.
			plugin := container(t, node, "s3-plugin")
			wantHost := map[string]string{
				"kubelet-dir": m.kubeletPath,
				"plugin-dir":  m.kubeletPath + "/plugins/s3.csi.scality.com/",
			}
			if m.sidecars {
				wantHost["registration-dir"] = m.kubeletPath + "/plugins_registry/"
				wantHost["socket-dir"] = m.kubeletPath + "/plugins/s3.csi.scality.com/socket/"
			}
			if m.systemd {
				wantHost["systemd-socket-dir"] = path.Dir(m.systemdSocket)
				wantHost["credentials-dir"] = "/run/s3.csi.scality.com"
				wantHost["cache-dir"] = "/var/cache/s3.csi.scality.com"
				wantHost["mount-s3-install-dir"] = map[string]string{"systemd": "/opt/mountpoint-s3-csi/bin/", "mixed": "/opt/s3-csi/bin/"}[m.name]
			}
			if diff := cmp.Diff(wantHost, hostPaths(node)); diff != "" {
				t.Errorf("node hostPath volumes (-want +got):\n%s", diff)
			}
			kubeletMount := mountFor(plugin, "kubelet-dir")
			if kubeletMount == nil || kubeletMount.MountPath != m.kubeletPath {
				t.Fatalf("s3-plugin must see the kubelet dir at %s: %+v", m.kubeletPath, kubeletMount)
			}
			wantProp := corev1.MountPropagationHostToContainer
			if m.pod {
				wantProp = corev1.MountPropagationBidirectional
			}
			if got := kubeletMount.MountPropagation; got == nil || *got != wantProp {
				t.Errorf("kubelet dir propagation = %v, want %s", got, wantProp)
			}
			if got := mountFor(plugin, "systemd-socket-dir"); (got != nil) != m.systemd {
				t.Errorf("systemd socket dir mounted: %v, want %v", got != nil, m.systemd)
			} else if m.systemd {
				// Same path in the container as on the host; no propagation needed (a file).
				if got.MountPath != path.Dir(m.systemdSocket) || got.MountPropagation != nil {
					t.Errorf("systemd socket dir mounted at %s (propagation %v), want %s without propagation", got.MountPath, got.MountPropagation, path.Dir(m.systemdSocket))
				}
				if sock, _ := flagValue(plugin.Args, "systemd-socket"); sock != m.systemdSocket {
					t.Errorf("--systemd-socket = %q, want %q", sock, m.systemdSocket)
				}
			}
			if got, ok := flagValue(plugin.Args, "systemd-mounter"); m.systemd == (ok && got == "false") {
				t.Errorf("--systemd-mounter=%q (rendered %v) with systemd mode in use %v", got, ok, m.systemd)
			}
			sc := plugin.SecurityContext
			privileged := sc != nil && sc.Privileged != nil && *sc.Privileged
			if privileged != m.pod {
				t.Errorf("s3-plugin privileged = %v, want %v (only pod mode needs it)", privileged, m.pod)
			}
			if !m.pod && (sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL")) {
				t.Errorf("systemd-only s3-plugin must drop every capability and privilege escalation: %+v", sc)
			}
			// Only what giving mount-s3's user its files takes comes back (node.mountS3User,
			// set by default).
			if !m.pod && !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"CHOWN", "DAC_OVERRIDE"}) {
				t.Errorf("systemd-only s3-plugin adds capabilities %v, want CHOWN and DAC_OVERRIDE only", sc.Capabilities.Add)
			}
			if user, _ := flagValue(plugin.Args, "mount-s3-user"); m.systemd && user != "s3csi-mount" {
				t.Errorf("--mount-s3-user=%q, want the default s3csi-mount", user)
			}
			for _, c := range append(slices.Clone(node.InitContainers), node.Containers...) {
				if c.Name != "s3-plugin" && c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
					t.Errorf("%s is privileged; only s3-plugin may be", c.Name)
				}
				if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
					t.Errorf("%s: root filesystem not read-only", c.Name)
				}
			}
			if psc := node.SecurityContext; psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("node plugin pod: seccomp profile %+v, want RuntimeDefault", psc)
			}
			if node.HostNetwork || node.HostPID {
				t.Errorf("the node plugin needs neither the host network nor the host PID namespace")
			}

			// The Mountpoint Pod machinery exists only with pod mode (the namespace always: below).
			var mpNamespaced []string
			for _, o := range objs {
				if o.GetNamespace() == m.mpNamespace {
					mpNamespaced = append(mpNamespaced, o.GetKind()+"/"+o.GetName())
				}
			}
			if m.pod {
				wantMP := []string{"PodDisruptionBudget/mountpoint-pods", "Role/scality-csi-controller", "Role/scality-s3-csi-node",
					"RoleBinding/scality-csi-controller", "RoleBinding/scality-s3-csi-node"}
				if m.caBundle {
					// The CA's copy the Mountpoint Pods Scality's 2.2.0 left read.
					wantMP = append(wantMP, "ConfigMap/s3-csi-ca-bundle")
				}
				if m.headroom {
					wantMP = append(wantMP, "DaemonSet/mountpoint-headroom")
				}
				slices.Sort(wantMP)
				slices.Sort(mpNamespaced)
				if diff := cmp.Diff(wantMP, mpNamespaced); diff != "" {
					t.Errorf("objects in the Mountpoint namespace (-want +got):\n%s", diff)
				}
				pdb := typed[policyv1.PodDisruptionBudget](t, one(t, objs, "PodDisruptionBudget", "mountpoint-pods"))
				// Every Mountpoint Pod, this driver's and those Scality's 2.x driver left (which lack
				// app.kubernetes.io/component), not the headroom pods.
				sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
				harness.Must(t, err)
				ours := labels.Set{podcontract.LabelComponent: podcontract.ComponentMountpoint, podcontract.LabelDriverVersion: "0.1.0"}
				theirs := labels.Set{"s3.csi.scality.com/mountpoint-version": "", "s3.csi.scality.com/pod-uid": "u", "s3.csi.scality.com/volume-name": "pv",
					podcontract.LabelDriverVersion: "2.1.1"}
				headroom := labels.Set{"app": "mountpoint-headroom", podcontract.LabelComponent: "headroom"}
				if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 0 || !sel.Matches(ours) || !sel.Matches(theirs) || sel.Matches(headroom) {
					t.Errorf("the Mountpoint Pods' disruption budget must refuse every eviction of this driver's and 2.x's Mountpoint Pods, not of headroom pods: %+v", pdb.Spec)
				}
				ns := typed[corev1.Namespace](t, one(t, objs, "Namespace", m.mpNamespace))
				for _, l := range []string{"enforce", "audit", "warn"} {
					if got := ns.Labels["pod-security.kubernetes.io/"+l]; got != "restricted" {
						t.Errorf("namespace %s: pod-security %s = %q, want restricted", m.mpNamespace, l, got)
					}
				}
				if len(find(objs, "ClusterRole", "scality-csi-controller")) != 1 {
					t.Errorf("pod mode needs the Pod Reconciler's ClusterRole")
				}
			} else {
				if len(mpNamespaced) != 0 {
					t.Errorf("without pod mode nothing may be rendered in or for %s: %v", m.mpNamespace, mpNamespaced)
				}
				if got := find(objs, "PriorityClass", ""); len(got) != 0 {
					t.Errorf("without pod mode no PriorityClass is needed, rendered %d", len(got))
				}
				// The Namespace is rendered whatever the modes: a release that ran pod mode
				// (this chart's, or Scality's 2.x) owns it with live Mountpoint Pods in it, and
				// Helm would delete it were it left out.
				if got := find(objs, "Namespace", m.mpNamespace); len(got) != 1 {
					t.Errorf("without pod mode the Mountpoint namespace must still be rendered, rendered %d", len(got))
				}
				for _, kind := range []string{"ClusterRole", "ClusterRoleBinding"} {
					if got := find(objs, kind, "scality-csi-controller"); len(got) != 0 {
						t.Errorf("without pod mode the Pod Reconciler's %s is not needed", kind)
					}
				}
			}
			for _, r := range find(objs, "Role", "") {
				role := typed[rbacv1.Role](t, r)
				for _, rule := range role.Rules {
					if slices.Contains(rule.Resources, "pods") && role.Namespace != m.mpNamespace {
						t.Errorf("Role %s/%s grants pods outside the Mountpoint namespace", role.Namespace, role.Name)
					}
				}
			}

			// Flags that must agree, and values that must reach the pods.
			nodeMode, _ := flagValue(plugin.Args, "default-mounter")
			if nodeMode != m.defaultMode {
				t.Errorf("node --default-mounter = %q, want %q", nodeMode, m.defaultMode)
			}
			if m.pod {
				rec := container(t, recSpec, "s3-pod-reconciler")
				if got, _ := flagValue(rec.Args, "default-mounter"); got != nodeMode {
					t.Errorf("--default-mounter: node %q, Pod Reconciler %q: they must agree", nodeMode, got)
				}
				for flag, want := range map[string]string{"mountpoint-namespace": m.mpNamespace, "mountpoint-image": plugin.Image, "mountpoint-command": "/bin/scality-csi-mounter"} {
					if got, _ := flagValue(rec.Args, flag); got != want {
						t.Errorf("Pod Reconciler --%s = %q, want %q", flag, got, want)
					}
				}
				if got, _ := flagValue(plugin.Args, "mountpoint-namespace"); got != m.mpNamespace {
					t.Errorf("node --mountpoint-namespace = %q, want %q", got, m.mpNamespace)
				}
			}
			for _, flag := range []string{"s3-endpoint-url", "s3-region", "s3-ca-bundle"} {
				nv, nok := flagValue(plugin.Args, flag)
				cv, cok := flagValue(container(t, ctrl, "s3-csi-controller").Args, flag)
				if nv != cv || nok != cok {
					t.Errorf("--%s: node %q, CSI controller %q: they must agree", flag, nv, cv)
				}
			}
			if got, _ := flagValue(plugin.Args, "kubelet-path"); got != m.kubeletPath {
				t.Errorf("--kubelet-path = %q, want %q", got, m.kubeletPath)
			}
			// The node plugin runs pod mode (its informers need the Role above) only when some
			// node may use it.
			if got, ok := flagValue(plugin.Args, "pod-mounter"); m.pod == (ok && got == "false") {
				t.Errorf("--pod-mounter=%q (rendered %v) with pod mode in use %v", got, ok, m.pod)
			}
			if _, ok := flagValue(plugin.Args, "mount-s3-path"); ok != m.systemd {
				t.Errorf("--mount-s3-path rendered: %v, want %v", ok, m.systemd)
			}
			if m.systemd {
				inst := container(t, node, "install-mp")
				dir, _ := flagValue(inst.Args, "install-dir")
				bin, _ := flagValue(plugin.Args, "mount-s3-path")
				if bin != strings.TrimSuffix(dir, "/")+"/mount-s3" || mountFor(inst, "mount-s3-install-dir").MountPath+"/" != dir {
					t.Errorf("install-mp installs into %q (mounted at %q) but the plugin runs %q", dir, mountFor(inst, "mount-s3-install-dir").MountPath, bin)
				}
			}
			// Kubelet registration and /healthz: by the plugin itself, or by the sidecars.
			registrationArgs := plugin.Args
			if m.sidecars {
				registrationArgs = container(t, node, "node-driver-registrar").Args
				if h, _ := flagValue(container(t, node, "liveness-probe").Args, "health-port"); h != "9808" {
					t.Errorf("livenessprobe --health-port = %q, want the healthz port 9808", h)
				}
			} else if h, _ := flagValue(plugin.Args, "health-address"); h != ":9808" {
				t.Errorf("s3-plugin --health-address = %q, want :9808 (the healthz port)", h)
			}
			wantSocket := m.kubeletPath + "/plugins/s3.csi.scality.com/csi.sock"
			if m.sidecars { // a directory of its own, all the sidecars mount
				wantSocket = m.kubeletPath + "/plugins/s3.csi.scality.com/socket/csi.sock"
			}
			if got, _ := flagValue(registrationArgs, "kubelet-registration-path"); got != wantSocket {
				t.Errorf("registration path %q does not match the plugin dir", got)
			}
			if _, ok := flagValue(plugin.Args, "kubelet-registration-path"); ok == m.sidecars {
				t.Errorf("s3-plugin registers itself: %v, with the sidecars %v", ok, m.sidecars)
			}
			env := map[string]corev1.EnvVar{}
			for _, e := range plugin.Env {
				env[e.Name] = e
			}
			if e := env["CSI_NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
				t.Errorf("CSI_NODE_NAME must come from spec.nodeName: %+v", e)
			}
			// Without s3.credentials.secretName: s3-secret (Scality's charts' default), optional.
			if e, ok := env["AWS_ACCESS_KEY_ID"]; !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
				(e.ValueFrom.SecretKeyRef.Name == "s3-secret") == m.hasCredential || !ptr.Deref(e.ValueFrom.SecretKeyRef.Optional, false) {
				t.Errorf("driver credentials in the node env: %+v, want the configured Secret or s3-secret, optional", e)
			}
		})
	}
}

// TestValuesReachPods checks that images, tolerations, priority classes and other values of
// the pod-mode file reach the objects.
func TestValuesReachPods(t *testing.T) {
	m := modes[1] // pod: the file that changes most defaults
	_, objs := m.render(t)
	ds := typed[appsv1.DaemonSet](t, one(t, objs, "DaemonSet", "s3-csi-node"))
	dep := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "s3-csi-controller"))
	recDep := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "s3-pod-reconciler"))
	node, ctrl, recSpec := ds.Spec.Template.Spec, dep.Spec.Template.Spec, recDep.Spec.Template.Spec

	// The pod file keeps the built-in registration; the sidecar images come from the same
	// file rendered with node.registration=sidecars.
	_, sidecarObjs := m.render(t, "--set", "node.registration=sidecars")
	sidecarNode := typed[appsv1.DaemonSet](t, one(t, sidecarObjs, "DaemonSet", "s3-csi-node")).Spec.Template.Spec
	images := map[string]string{}
	for _, c := range sidecarNode.Containers {
		if c.Name != "s3-plugin" {
			images[c.Name] = c.Image + " " + string(c.ImagePullPolicy)
		}
	}
	for _, spec := range []corev1.PodSpec{node, ctrl, recSpec} {
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			images[c.Name] = c.Image + " " + string(c.ImagePullPolicy)
		}
	}
	driver := "registry.example.com/storage/s3-csi-driver:v0.1.0-rc1 Always"
	wantImages := map[string]string{
		"s3-plugin":             driver,
		"s3-csi-controller":     driver,
		"s3-pod-reconciler":     driver,
		"node-driver-registrar": "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.18.0 IfNotPresent",
		"liveness-probe":        "registry.k8s.io/sig-storage/livenessprobe:v2.20.0 IfNotPresent",
		"csi-provisioner":       "registry.k8s.io/sig-storage/csi-provisioner:v6.3.0 IfNotPresent",
	}
	if diff := cmp.Diff(wantImages, images); diff != "" {
		t.Errorf("images (-want +got):\n%s", diff)
	}
	rec := container(t, recSpec, "s3-pod-reconciler")
	for flag, want := range map[string]string{
		"mountpoint-image":               "registry.example.com/storage/s3-csi-driver:v0.1.0-rc1",
		"mountpoint-image-pull-policy":   "Always",
		"mountpoint-priority-class-name": "s3-mountpoint",
		"mountpoint-tolerations":         `[{"key":"storage","operator":"Exists"}]`,
		"mountpoint-service-account":     "s3-mountpoint",
		"mountpoint-image-pull-secrets":  "registry-mounts,registry-backup",
		"metrics-address":                "0",
	} {
		if got, _ := flagValue(rec.Args, flag); got != want {
			t.Errorf("Pod Reconciler --%s = %q, want %q", flag, got, want)
		}
	}
	pc := typed[schedulingv1.PriorityClass](t, one(t, objs, "PriorityClass", "s3-mountpoint"))
	if pc.Value != 1_000_000_000 || pc.PreemptionPolicy == nil || *pc.PreemptionPolicy != corev1.PreemptLowerPriority {
		t.Errorf("priority class: %+v", pc)
	}
	// Headroom: the lowest priority, never preempting, on the pod-mode nodes (pod is the
	// default here: every node not labelled systemd), holding its requests, restricted.
	hc := typed[schedulingv1.PriorityClass](t, one(t, objs, "PriorityClass", "mount-s3-headroom"))
	// -10 and Never: the class of this name Scality's 2.x chart made (immutable fields).
	if hc.Value != -10 || hc.PreemptionPolicy == nil || *hc.PreemptionPolicy != corev1.PreemptNever {
		t.Errorf("headroom priority class: %+v", hc)
	}
	hr := typed[appsv1.DaemonSet](t, one(t, objs, "DaemonSet", "mountpoint-headroom")).Spec.Template.Spec
	if hr.PriorityClassName != "mount-s3-headroom" || hr.ServiceAccountName != "s3-mountpoint" || len(hr.ImagePullSecrets) != 2 ||
		len(hr.Tolerations) != 1 || hr.Tolerations[0].Key != "storage" {
		t.Errorf("headroom pods: class %q, account %q, pull secrets %v, tolerations %v", hr.PriorityClassName, hr.ServiceAccountName, hr.ImagePullSecrets, hr.Tolerations)
	}
	if mem := hr.Containers[0].Resources.Requests.Memory(); mem.String() != "256Mi" {
		t.Errorf("headroom pods hold %s of memory, want 256Mi", mem)
	}
	if expr := hr.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0]; expr.Key != "s3.csi.scality.com/mounter" ||
		expr.Operator != corev1.NodeSelectorOpNotIn || !slices.Equal(expr.Values, []string{"systemd"}) {
		t.Errorf("headroom node affinity %+v, want every node not labelled systemd", expr)
	}
	if sc := hr.Containers[0].SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem ||
		len(sc.Capabilities.Drop) != 1 || hr.SecurityContext.RunAsNonRoot == nil || !*hr.SecurityContext.RunAsNonRoot || hr.AutomountServiceAccountToken == nil || *hr.AutomountServiceAccountToken {
		t.Errorf("headroom pods are not restricted: %+v / %+v", hr.SecurityContext, sc)
	}
	wantTol := []corev1.Toleration{
		{Key: "s3.csi.scality.com/agent-not-ready", Operator: corev1.TolerationOpExists},
		{Key: "storage", Operator: corev1.TolerationOpEqual, Value: "s3", Effect: corev1.TaintEffectNoSchedule},
	}
	if diff := cmp.Diff(wantTol, node.Tolerations); diff != "" {
		t.Errorf("node tolerations (-want +got):\n%s", diff)
	}
	for _, spec := range []corev1.PodSpec{ctrl, recSpec} {
		if diff := cmp.Diff([]corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}, spec.Tolerations); diff != "" {
			t.Errorf("controller tolerations (-want +got):\n%s", diff)
		}
	}
	if node.PriorityClassName != "system-node-critical" || ctrl.PriorityClassName != "system-cluster-critical" || recSpec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priority classes: node %q, controller %q, Pod Reconciler %q", node.PriorityClassName, ctrl.PriorityClassName, recSpec.PriorityClassName)
	}
	if *dep.Spec.Replicas != 2 || *recDep.Spec.Replicas != 2 {
		t.Errorf("replicas = %d and %d, want 2", *dep.Spec.Replicas, *recDep.Spec.Replicas)
	}
	for _, spec := range []corev1.PodSpec{node, ctrl, recSpec} {
		if diff := cmp.Diff([]corev1.LocalObjectReference{{Name: "registry-example"}}, spec.ImagePullSecrets); diff != "" {
			t.Errorf("image pull secrets (-want +got):\n%s", diff)
		}
	}
	// The CA bundle from an existing ConfigMap, its key mapped to the file the flag names.
	if len(find(objs, "ConfigMap", "")) != 0 {
		t.Errorf("tls.existingConfigMap: the chart must not create a ConfigMap")
	}
	for _, spec := range []corev1.PodSpec{node, ctrl} {
		var found bool
		for _, v := range spec.Volumes {
			if v.ConfigMap != nil {
				found = v.ConfigMap.Name == "ring-ca" && len(v.ConfigMap.Items) == 1 && v.ConfigMap.Items[0].Key == "ca.pem" && v.ConfigMap.Items[0].Path == "ca-bundle.crt"
			}
		}
		if !found {
			t.Errorf("CA bundle volume missing or wrong: %+v", spec.Volumes)
		}
	}
	if got, _ := flagValue(container(t, node, "s3-plugin").Args, "s3-ca-bundle"); got != "/etc/s3-csi/ca/ca-bundle.crt" {
		t.Errorf("--s3-ca-bundle = %q", got)
	}
	// No driver credentials configured: the Secret s3-secret (the default of Scality's charts),
	// optional in both the node plugin and the CSI controller.
	for _, spec := range []corev1.PodSpec{node, ctrl} {
		for _, c := range spec.Containers {
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "AWS_") && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
					e.ValueFrom.SecretKeyRef.Name != "s3-secret" || (e.Name != "AWS_SESSION_TOKEN" && !ptr.Deref(e.ValueFrom.SecretKeyRef.Optional, false))) {
					t.Errorf("%s has %s %+v without s3.credentials.secretName, want s3-secret, optional", c.Name, e.Name, e.ValueFrom)
				}
			}
		}
	}
	// The provisioner reads Secrets only in team-a.
	for _, cr := range find(objs, "ClusterRole", "") {
		for _, r := range typed[rbacv1.ClusterRole](t, cr).Rules {
			if slices.Contains(r.Resources, "secrets") {
				t.Errorf("ClusterRole %s grants secrets although secretNamespaces is [team-a]", cr.GetName())
			}
		}
	}
	if got := find(objs, "Role", "scality-s3-csi-provisioner-secrets"); len(got) != 1 || got[0].GetNamespace() != "team-a" {
		t.Errorf("want the provisioner's secrets Role in team-a, got %d", len(got))
	}
}

// TestCSIDriver checks the one object that must suit both modes.
func TestCSIDriver(t *testing.T) {
	for _, m := range modes {
		_, objs := m.render(t)
		d := typed[storagev1.CSIDriver](t, one(t, objs, "CSIDriver", "s3.csi.scality.com"))
		want := storagev1.CSIDriverSpec{
			AttachRequired:       ptrTo(false),
			PodInfoOnMount:       ptrTo(true),
			RequiresRepublish:    ptrTo(true),
			FSGroupPolicy:        ptrTo(storagev1.NoneFSGroupPolicy),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
		}
		if diff := cmp.Diff(want, d.Spec); diff != "" {
			t.Errorf("%s: CSIDriver spec (-want +got):\n%s", m.name, diff)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestMemoryLimitFloor: a mount-s3 memory limit below 640Mi (its least memory target, 512Mi,
// and the driver's 128Mi above it) is refused at render, as the binaries refuse it, and the
// limit reaches the node plugin in every mode (it derives mount-s3's --memory-target from it).
func TestMemoryLimitFloor(t *testing.T) {
	for _, v := range []string{"256Mi", "639Mi", "600M", "671088639"} {
		_, err := harness.HelmTemplate(t, release, namespace, "--set", "mountpointPod.resources.limits.memory="+v)
		if err == nil || !strings.Contains(err.Error(), "mountpointPod.resources.limits.memory "+v+" is below the 640Mi mount-s3 needs") {
			t.Errorf("limit %s: %v, want the refusal naming it", v, err)
		}
	}
	for _, m := range modes {
		_, objs := m.render(t, "--set", "mountpointPod.resources.limits.memory=640Mi")
		ds := typed[appsv1.DaemonSet](t, one(t, objs, "DaemonSet", "s3-csi-node"))
		if got, _ := flagValue(container(t, ds.Spec.Template.Spec, "s3-plugin").Args, "mountpoint-memory-limit"); got != "640Mi" {
			t.Errorf("%s: the node plugin's --mountpoint-memory-limit %q, want 640Mi", m.name, got)
		}
	}
}
