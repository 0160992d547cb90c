{{- /*
Values of the Scality driver's 1.x and 2.x charts (anchors §8.1: their values.yaml and the
values their templates read) that users carry into an upgrade and that this chart does not
take: the schema lets them through (marked deprecated) so that this fails with what to use
instead, rather than a bare "additional properties not allowed". The values it does take under
the same name (node.logLevel, node.tolerations, …) are in docs/upgrade.md's table.
*/}}
{{- define "s3csi.refuse1x" -}}
{{- if hasKey .Values "s3CredentialSecret" }}{{ fail "s3CredentialSecret is a value of the 1.x chart: use s3.credentials.secretName, with s3.credentials.accessKeyIdKey, secretAccessKeyKey and sessionTokenKey for its keys (the Secret must be in the release namespace) (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values "initContainer" }}{{ fail "initContainer is a value of the 1.x chart: install-mp uses node.resources (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values "cleanupCRDOnUninstall" }}{{ fail "cleanupCRDOnUninstall is a value of the 1.x chart: the CRD is kept on uninstall; docs/uninstall.md says how to remove it (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values "experimental" }}{{ fail "experimental is a value of the 1.x chart: pod mode is chosen with mounter.modesInUse and mounter.defaultMode (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values "supportLegacySystemDMounts" }}{{ fail "supportLegacySystemDMounts is a value of the 1.x chart: 1.x mounts are always adopted (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.node "s3EndpointUrl" }}{{ fail "node.s3EndpointUrl is a value of the 1.x chart: use s3.endpointUrl (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.node "s3Region" }}{{ fail "node.s3Region is a value of the 1.x chart: use s3.region (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.node "mountpointInstallPath" }}{{ fail "node.mountpointInstallPath is a value of the 1.x chart: use node.mountS3InstallDir (without the trailing slash) (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.node "defaultTolerations" }}{{ fail "node.defaultTolerations is a value of the 1.x chart: use node.tolerations (and node.tolerateAllTaints) (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.node "podInfoOnMountCompat" }}{{ fail "node.podInfoOnMountCompat is a value of the 1.x chart: nothing: the CSIDriver always has podInfoOnMount (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.node "mountpointVersion" }}{{ fail "node.mountpointVersion is a value of the 1.x chart: nothing: units are named by the driver (docs/upgrade.md)" }}{{ end }}
{{- if and (hasKey .Values.tls "caCertConfigMap") (hasKey .Values.tls "caCertData") }}{{ fail "tls.caCertConfigMap with tls.caCertData are values of the 1.x/2.x chart (create that ConfigMap from that data): use tls.caBundle alone, with the PEM data; the chart creates the ConfigMap s3-csi-ca-bundle (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.tls "caCertConfigMap" }}{{ fail "tls.caCertConfigMap is a value of the 1.x chart: use tls.existingConfigMap (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.tls "caCertData" }}{{ fail "tls.caCertData is a value of the 1.x chart: use tls.caBundle (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.tls "initImage" }}{{ fail "tls.initImage is a value of the 1.x chart: nothing: the CA bundle is mounted from a ConfigMap (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.tls "initResources" }}{{ fail "tls.initResources is a value of the 1.x chart: nothing: the CA bundle is mounted from a ConfigMap (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values "nameOverride" }}{{ fail "nameOverride is a value of the 1.x/2.x chart: remove it: this chart's object names and labels are fixed, and an upgraded release keeps the selectors of its live DaemonSet and Deployment (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values "fullnameOverride" }}{{ fail "fullnameOverride is a value of the 1.x/2.x chart: remove it: this chart's object names and labels are fixed, and an upgraded release keeps the selectors of its live DaemonSet and Deployment (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.node "volumes" }}{{ fail "node.volumes is a value of the 1.x/2.x chart: nothing: the node plugin mounts exactly the host paths its mode needs (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.controller "enable" }}{{ fail "controller.enable is a value of the 1.x/2.x chart: remove it: the controller Deployment is always installed (dynamic provisioning, and the Pod Reconciler in pod mode) (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.controller "seLinuxOptions" }}{{ fail "controller.seLinuxOptions is a value of the 2.x chart: nothing: the controller reaches no host socket and needs no SELinux type (docs/upgrade.md)" }}{{ end }}
{{- range $name := list "nodeDriverRegistrar" "livenessProbe" "csiProvisioner" }}
{{- $s := index $.Values.sidecars $name }}
{{- if hasKey $s "env" }}{{ fail (printf "sidecars.%s.env is a value of the 1.x/2.x chart: nothing: the chart gives each sidecar the flags and environment it needs (docs/upgrade.md)" $name) }}{{ end }}
{{- if hasKey $s "volumeMounts" }}{{ fail (printf "sidecars.%s.volumeMounts is a value of the 1.x/2.x chart: nothing: the chart mounts what each sidecar needs (docs/upgrade.md)" $name) }}{{ end }}
{{- end }}
{{- if hasKey .Values.mountpointPod "preemptingPriorityClassName" }}{{ fail "mountpointPod.preemptingPriorityClassName is a value of the 2.x chart: use mountpointPod.priorityClassName, whose class preempts (mountpointPod.preemptionPolicy; docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.mountpointPod "headroomPriorityClassName" }}{{ fail "mountpointPod.headroomPriorityClassName is a value of the 2.x chart: use mountpointPod.headroom.priorityClassName (headroom pods are per node here; docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.mountpointPod "headroomImage" }}{{ fail "mountpointPod.headroomImage is a value of the 2.x chart: nothing: headroom pods (mountpointPod.headroom) run the driver image (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.image "containerRegistry" }}{{ fail "image.containerRegistry is a value of the 2.x chart: put the registry in image.repository (registry.example.com/path/s3-csi-driver) (docs/upgrade.md)" }}{{ end }}
{{- end -}}
