{{/*
Helpers of the scality-s3-csi-driver chart.

Mode selection: mounter.modesInUse (default [mounter.defaultMode]) lists every mode some node
may use. "s3csi.systemd" and "s3csi.pod" are "true" (or empty) and decide what is rendered:
  systemd: the install-mp init container, the install dir and /run/systemd host mounts.
  pod:     the Mountpoint Pod namespace, priority class and RBAC, the Pod Reconciler container,
           a privileged node plugin whose kubelet mount has Bidirectional propagation.
*/}}

{{/* The driver name: CSIDriver, plugin directory, labels and taints derive from it. */}}
{{- define "s3csi.driverName" -}}s3.csi.scality.com{{- end -}}

{{/* The modes in use as a JSON list, after checking them against the default mode. */}}
{{- define "s3csi.modes" -}}
{{- $default := .Values.mounter.defaultMode -}}
{{- $modes := .Values.mounter.modesInUse | default (list $default) -}}
{{- if not (has $default $modes) -}}
{{- fail (printf "mounter.defaultMode %q must be one of mounter.modesInUse %v: the default mode is used by every node without a label" $default $modes) -}}
{{- end -}}
{{- toJson $modes -}}
{{- end -}}

{{- define "s3csi.systemd" -}}
{{- if has "systemd" (include "s3csi.modes" . | fromJsonArray) }}true{{ end -}}
{{- end -}}

{{- define "s3csi.pod" -}}
{{- if has "pod" (include "s3csi.modes" . | fromJsonArray) }}true{{ end -}}
{{- end -}}

{{/* Common labels of every object. */}}
{{- define "s3csi.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
The selector of the node DaemonSet or the controller Deployment, which the API server never lets
change: the live object's when there is one (a release upgraded from the Scality 1.x/2.x chart,
whose selectors are app + app.kubernetes.io/name + app.kubernetes.io/instance, keeps them, and so
does a rollback to it), else app=<name>. Arguments: root, kind, name.
*/}}
{{- define "s3csi.selectorLabels" -}}
{{- $sel := dict "app" .name -}}
{{- $live := lookup "apps/v1" .kind .root.Release.Namespace .name -}}
{{- if $live -}}
{{- with (($live.spec).selector).matchLabels }}{{ $sel = . }}{{ end -}}
{{- end -}}
{{- toYaml $sel -}}
{{- end -}}

{{/*
Labels of the pods of the node DaemonSet or the controller Deployment: the selector's (which
win), then podLabels, then the common labels and app=<name>. Arguments: root, kind, name,
podLabels.
*/}}
{{- define "s3csi.podTemplateLabels" -}}
{{- $common := include "s3csi.labels" .root | fromYaml -}}
{{- $_ := set $common "app" .name -}}
{{- $labels := merge (include "s3csi.selectorLabels" . | fromYaml) (deepCopy (.podLabels | default dict)) $common -}}
{{- toYaml $labels -}}
{{- end -}}

{{/* The driver image reference. */}}
{{- define "s3csi.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* A sidecar image reference, from a sidecars.<name>.image value. */}}
{{- define "s3csi.sidecarImage" -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}

{{/* The CA bundle ConfigMap's name, or nothing when no CA is configured. */}}
{{- define "s3csi.caConfigMap" -}}
{{- if and .Values.tls.caBundle .Values.tls.existingConfigMap -}}
{{- fail "tls.caBundle and tls.existingConfigMap are exclusive: set the PEM bundle or name a ConfigMap holding it, not both" -}}
{{- end -}}
{{- if .Values.tls.caBundle -}}s3-csi-ca-bundle{{- else -}}{{ .Values.tls.existingConfigMap }}{{- end -}}
{{- end -}}

{{/* Where the CA bundle is mounted in the node plugin and the CSI controller. */}}
{{- define "s3csi.caDir" -}}/etc/s3-csi/ca{{- end -}}

{{/* The CA bundle volume (pod spec volumes entry), when a CA is configured. */}}
{{- define "s3csi.caVolume" -}}
{{- with include "s3csi.caConfigMap" . }}
- name: ca-bundle
  configMap:
    name: {{ . }}
    items:
      - key: {{ $.Values.tls.configMapKey }}
        path: ca-bundle.crt
{{- end }}
{{- end -}}

{{/* The S3 flags shared by the node plugin and the CSI controller. */}}
{{- define "s3csi.s3Args" -}}
{{- with .Values.s3.endpointUrl }}
- --s3-endpoint-url={{ . }}
{{- end }}
- --s3-region={{ .Values.s3.region }}
{{- if include "s3csi.caConfigMap" . }}
- --s3-ca-bundle={{ include "s3csi.caDir" . }}/ca-bundle.crt
{{- end }}
{{- with .Values.proxy }}
{{- with .httpsProxy }}
- --https-proxy={{ . }}
{{- end }}
{{- with .httpProxy }}
- --http-proxy={{ . }}
{{- end }}
{{- with .noProxy }}
- {{ printf "--no-proxy=%s" . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The driver-level credentials: s3.credentials, or, with secretName empty and keepLive, the Secret
and keys the live node plugin's s3-plugin container takes AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN from, if that Secret exists. So an upgrade from the
Scality 1.x/2.x chart, whose node plugin used s3CredentialSecret (default s3-secret) without
the user setting it, keeps its credentials; and, since this chart's node plugin takes them the
same way, so does every later upgrade.
*/}}
{{- define "s3csi.credentials" -}}
{{- $c := deepCopy .Values.s3.credentials -}}
{{- if and (not $c.secretName) $c.keepLive -}}
{{- $ds := lookup "apps/v1" "DaemonSet" .Release.Namespace "s3-csi-node" -}}
{{- $live := dict -}}
{{- if $ds -}}
{{- range (dig "spec" "template" "spec" "containers" list $ds) -}}
{{- if eq .name "s3-plugin" -}}
{{- range (.env | default list) -}}
{{- $ref := dig "valueFrom" "secretKeyRef" dict . -}}
{{- if $ref.name -}}
{{- if eq .name "AWS_ACCESS_KEY_ID" }}{{ $_ := set $live "secretName" $ref.name }}{{ $_ := set $live "accessKeyIdKey" $ref.key }}{{ end -}}
{{- if eq .name "AWS_SECRET_ACCESS_KEY" }}{{ $_ := set $live "secretAccessKeyKey" $ref.key }}{{ $_ := set $live "secretAccessKeyName" $ref.name }}{{ end -}}
{{- if eq .name "AWS_SESSION_TOKEN" }}{{ $_ := set $live "sessionTokenKey" $ref.key }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $live.secretName $live.secretAccessKeyKey (eq $live.secretName $live.secretAccessKeyName) (lookup "v1" "Secret" .Release.Namespace $live.secretName) -}}
{{- $_ := set $c "secretName" $live.secretName -}}
{{- $_ := set $c "accessKeyIdKey" $live.accessKeyIdKey -}}
{{- $_ := set $c "secretAccessKeyKey" $live.secretAccessKeyKey -}}
{{- if $live.sessionTokenKey }}{{ $_ := set $c "sessionTokenKey" $live.sessionTokenKey }}{{ end -}}
{{- end -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}

{{/*
The driver-level credential variables; "optional" is true on the node plugin (a node can serve
secret-authenticated volumes without them) and false on the CSI controller.
*/}}
{{- define "s3csi.credentialsEnv" -}}
{{- $c := include "s3csi.credentials" .root | fromYaml -}}
{{- if and .controller .root.Values.s3.credentials.controllerSecretName -}}
{{- $_ := set $c "secretName" .root.Values.s3.credentials.controllerSecretName -}}
{{- end -}}
{{- if $c.secretName }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ $c.secretName }}
      key: {{ $c.accessKeyIdKey }}
      optional: {{ .optional }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $c.secretName }}
      key: {{ $c.secretAccessKeyKey }}
      optional: {{ .optional }}
- name: AWS_SESSION_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $c.secretName }}
      key: {{ $c.sessionTokenKey }}
      optional: true
{{- end }}
{{- end -}}

{{/* Pull secrets of a pod spec. */}}
{{- define "s3csi.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The objects of a generated RBAC file (files/<name>), one YAML document each, as a list of maps.
The files are controller-gen output (make generate): the chart never edits them, it only
renames the namespace of their Roles.
*/}}
{{- define "s3csi.rbacFile" -}}
{{- $objs := list -}}
{{- range $doc := regexSplit "(?m)^---\\s*$" (.root.Files.Get .file) -1 -}}
{{- $o := fromYaml $doc -}}
{{- if $o.kind -}}{{- $objs = append $objs $o -}}{{- end -}}
{{- end -}}
{{- if not $objs -}}{{- fail (printf "%s holds no RBAC objects: run make generate" .file) -}}{{- end -}}
{{- toJson $objs -}}
{{- end -}}

{{/*
With access to a cluster (helm install/upgrade; not helm template), refuse modes that nodes use
but mounter.modesInUse leaves out: a node labelled s3.csi.scality.com/mounter with such a mode,
or one whose plugin reports it in the annotation s3.csi.scality.com/effective-mounter (it may
hold live mounts of that mode, which need that mode's host access to be unmounted).
*/}}
{{- define "s3csi.checkNodes" -}}
{{- $modes := include "s3csi.modes" . | fromJsonArray -}}
{{- $known := list "systemd" "pod" -}}
{{- $nodes := lookup "v1" "Node" "" "" -}}
{{- range $n := ($nodes.items | default list) -}}
{{- $name := $n.metadata.name -}}
{{- $label := get ($n.metadata.labels | default dict) "s3.csi.scality.com/mounter" -}}
{{- if and (has $label $known) (not (has $label $modes)) -}}
{{- fail (printf "node %s is labelled s3.csi.scality.com/mounter=%s but mounter.modesInUse is %v: add %s to mounter.modesInUse or relabel the node" $name $label $modes $label) -}}
{{- end -}}
{{- $effective := get ($n.metadata.annotations | default dict) "s3.csi.scality.com/effective-mounter" -}}
{{- if and (has $effective $known) (not (has $effective $modes)) -}}
{{- fail (printf "node %s currently mounts in %s mode (annotation s3.csi.scality.com/effective-mounter) but mounter.modesInUse is %v: keep %s in mounter.modesInUse until the node has moved and its %s mounts are gone (docs/migration.md)" $name $effective $modes $effective $effective) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Where a node-publish Secret may live (--node-publish-secret-scope): node.publishSecretScope
when set; else claim on a new install, and on an upgrade what the release's node DaemonSet had,
"any" when it predates the flag (earlier releases, Scality's 1.x and 2.x charts): an upgrade
never starts refusing volumes that mounted before it (docs/security.md, tenant isolation).
*/}}
{{- define "s3csi.secretScope" -}}
{{- if .Values.node.publishSecretScope -}}
{{- .Values.node.publishSecretScope -}}
{{- else if .Release.IsUpgrade -}}
{{- $ds := lookup "apps/v1" "DaemonSet" .Release.Namespace "s3-csi-node" -}}
{{- $had := regexFind "--node-publish-secret-scope=(claim|any)" (toJson (dig "spec" "template" "spec" "containers" list $ds)) -}}
{{- if $had -}}{{ trimPrefix "--node-publish-secret-scope=" $had }}{{- else -}}any{{- end -}}
{{- else -}}
claim
{{- end -}}
{{- end -}}

{{/*
Namespaces whose Secrets the provisioner may read, as a JSON list:
controller.provisioner.secretNamespaces when set; else none on a new install and, on an upgrade,
every namespace when the release's ClusterRole granted Secrets or the release has none of this
chart (earlier releases defaulted to every namespace, Scality's charts too): an upgrade never
takes away what provisioning and deletion of existing volumes read.
*/}}
{{- define "s3csi.secretNamespaces" -}}
{{- $set := .Values.controller.provisioner.secretNamespaces -}}
{{- if kindIs "slice" $set -}}
{{- toJson $set -}}
{{- else if .Release.IsUpgrade -}}
{{- $cr := lookup "rbac.authorization.k8s.io/v1" "ClusterRole" "" "scality-s3-csi-provisioner" -}}
{{- if or (not $cr) (contains "\"secrets\"" (toJson (dig "rules" list $cr))) -}}
["*"]
{{- else -}}
[]
{{- end -}}
{{- else -}}
[]
{{- end -}}
{{- end -}}

{{/*
mount-s3's requests and limits (mountpointPod.resources) as the --mountpoint-* flags both the
Pod Reconciler (Mountpoint Pods) and the node plugin (systemd units) take: one resource model.
*/}}
{{- define "s3csi.mountS3ResourceArgs" -}}
{{- with .Values.mountpointPod.resources }}
{{- with (.requests | default dict).cpu }}
- --mountpoint-cpu-request={{ . }}
{{- end }}
{{- with (.requests | default dict).memory }}
- --mountpoint-memory-request={{ . }}
{{- end }}
{{- with (.limits | default dict).cpu }}
- --mountpoint-cpu-limit={{ . }}
{{- end }}
{{- with (.limits | default dict).memory }}
- --mountpoint-memory-limit={{ . }}
{{- end }}
{{- end }}
{{- end -}}
