{{- /*
Values of Scality's charts (scality-mountpoint-s3-csi-driver 1.0.0-1.2.0 and 2.0.0-2.2.0: the
keys of their values.yaml and those their templates read;
scality/mountpoint-s3-csi-driver@<tag>:charts/scality-mountpoint-s3-csi-driver/values.yaml and
templates/) that users carry into an upgrade and that this chart does not take. The schema lets
them through (marked deprecated) so that this refuses them with what to use instead, rather
than with a bare "additional properties not allowed". Values this chart takes under the same
name (node.logLevel, node.tolerations, s3.endpointUrl, nameOverride, …) are in
docs/upgrade.md's table. Each row: the value's path, the releases that have it, what to do.
*/}}
{{- define "s3csi.legacyValues" -}}
{{- list
  (list "s3CredentialSecret" "1.x and 2.x" "use s3.credentials.secretName, with s3.credentials.accessKeyIdKey, secretAccessKeyKey and sessionTokenKey for its keys (the Secret must be in the release namespace; its default name s3-secret is this chart's default too)")
  (list "initContainer" "1.x and 2.x" "install-mp uses node.resources")
  (list "cleanupCRDOnUninstall" "2.x" "the CRD is kept on uninstall; docs/uninstall.md says how to remove it")
  (list "experimental" "1.x" "pod mode is chosen with mounter.modesInUse and mounter.defaultMode")
  (list "supportLegacySystemDMounts" "1.x" "1.x mounts are always adopted")
  (list "customLabels" "1.x and 2.x" "object labels are fixed; pods take node.podLabels and controller.podLabels")
  (list "namespace" "2.x" "nothing: the release namespace is helm's -n")
  (list "fullnameOverride" "1.x and 2.x" "remove it: no object of Scality's charts that an upgrade keeps was named from it (for the selectors, nameOverride is kept)")
  (list "node.s3EndpointUrl" "1.x and 2.x" "use s3.endpointUrl")
  (list "node.s3Region" "1.x and 2.x" "use s3.region")
  (list "node.mountpointInstallPath" "1.x" "use node.mountS3InstallDir (without the trailing slash)")
  (list "node.defaultTolerations" "1.x and 2.x" "use node.tolerations (and node.tolerateAllTaints)")
  (list "node.podInfoOnMountCompat" "1.x and 2.x" "nothing: the CSIDriver always has podInfoOnMount")
  (list "node.mountpointVersion" "2.x" "nothing: units and Mountpoint Pods are named by the driver")
  (list "node.volumes" "1.x and 2.x" "nothing: the node plugin mounts exactly the host paths its mode needs")
  (list "node.serviceAccount.annotations" "1.x and 2.x" "nothing: this driver's pods use no cloud identity; annotate the account yourself with node.serviceAccount.create false")
  (list "node.serviceAccount.automountServiceAccountToken" "1.x and 2.x" "nothing: the chart mounts the token where a container uses the API")
  (list "controller.enable" "1.2.0" "remove it: the controller Deployment is always installed (dynamic provisioning, and the Pod Reconciler in pod mode)")
  (list "controller.seLinuxOptions" "1.x and 2.x" "nothing: the controller reaches no host socket and needs no SELinux type")
  (list "controller.extraVolumeTags" "1.x and 2.x" "nothing: buckets are not tagged")
  (list "controller.serviceAccount.annotations" "1.x and 2.x" "nothing: annotate the account yourself with controller.serviceAccount.create false")
  (list "sidecars.nodeDriverRegistrar.env" "1.x and 2.x" "nothing: the chart gives each sidecar the flags and environment it needs")
  (list "sidecars.nodeDriverRegistrar.volumeMounts" "1.x and 2.x" "nothing: the chart mounts what each sidecar needs")
  (list "sidecars.livenessProbe.env" "1.x and 2.x" "nothing: the chart gives each sidecar the flags and environment it needs")
  (list "sidecars.livenessProbe.volumeMounts" "1.x and 2.x" "nothing: the chart mounts what each sidecar needs")
  (list "sidecars.csiProvisioner.env" "1.x and 2.x" "nothing: the chart gives each sidecar the flags and environment it needs")
  (list "sidecars.csiProvisioner.volumeMounts" "1.x and 2.x" "nothing: the chart mounts what each sidecar needs")
  (list "mountpointPod.preemptingPriorityClassName" "2.x" "use mountpointPod.priorityClassName, whose class preempts (mountpointPod.preemptionPolicy)")
  (list "mountpointPod.headroomPriorityClassName" "2.x" "use mountpointPod.headroom.priorityClassName (headroom pods are per node here)")
  (list "mountpointPod.headroomImage" "2.x" "nothing: headroom pods (mountpointPod.headroom) run the driver image")
  (list "image.containerRegistry" "1.x and 2.x" "put the registry in image.repository (registry.example.com/path/s3-csi-driver)")
  (list "tls.caCertConfigMap" "2.2.0" "use tls.existingConfigMap (ConfigMaps you made stay as they are)")
  (list "tls.caCertData" "2.2.0" "use tls.caBundle (with tls.configMapName)")
  (list "tls.initImage" "2.2.0" "nothing: the CA bundle reaches mount-s3 with each mount")
  (list "tls.initResources" "2.2.0" "nothing: the CA bundle reaches mount-s3 with each mount")
| toJson -}}
{{- end -}}

{{/* Whether the dotted path .path is set in the map .values ("true" or empty). */}}
{{- define "s3csi.hasPath" -}}
{{- $cur := .values -}}
{{- $found := true -}}
{{- range $p := splitList "." .path -}}
{{- if and $found (kindIs "map" $cur) (hasKey $cur $p) -}}
{{- $cur = index $cur $p -}}
{{- else -}}
{{- $found = false -}}
{{- end -}}
{{- end -}}
{{- if $found }}true{{ end -}}
{{- end -}}

{{- define "s3csi.refuse1x" -}}
{{- if and (include "s3csi.hasPath" (dict "values" .Values "path" "tls.caCertConfigMap")) (include "s3csi.hasPath" (dict "values" .Values "path" "tls.caCertData")) -}}
{{- fail "tls.caCertConfigMap with tls.caCertData are values of Scality's 2.2.0 chart (the chart made that ConfigMap from that data, in the release namespace and in mount-s3): use tls.caBundle with the PEM data and tls.configMapName with the caCertConfigMap's name, so that the ConfigMaps its Mountpoint Pods read are kept (docs/upgrade.md)" -}}
{{- end -}}
{{- range $r := include "s3csi.legacyValues" . | fromJsonArray -}}
{{- if include "s3csi.hasPath" (dict "values" $.Values "path" (index $r 0)) -}}
{{- fail (printf "%s is a value of Scality's %s chart: %s (docs/upgrade.md)" (index $r 0) (index $r 1) (index $r 2)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
