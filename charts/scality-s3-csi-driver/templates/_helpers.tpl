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
{{- $default := include "s3csi.defaultMode" . -}}
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
The selector of the node DaemonSet and of the controller and Pod Reconciler Deployments, which
the API server never lets change: always the one Scality's releases used (app=<name>,
app.kubernetes.io/name: its chart's name or nameOverride, app.kubernetes.io/instance: the
release, left out for a release named "kustomize";
scality/mountpoint-s3-csi-driver@1.0.0..2.2.0:charts/scality-mountpoint-s3-csi-driver/templates/
node.yaml and _helpers.tpl "selectorLabels"), so that an upgrade over a Scality release, a rollback
to it and an offline render (helm template, GitOps) all give the same selector without reading
the cluster. Arguments: root, name.
*/}}
{{- define "s3csi.selectorLabels" -}}
app: {{ .name }}
app.kubernetes.io/name: {{ .root.Values.nameOverride | default "scality-mountpoint-s3-csi-driver" | trunc 63 | trimSuffix "-" }}
{{- if ne .root.Release.Name "kustomize" }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}
{{- end -}}

{{/*
Labels of the pods of the node DaemonSet or a Deployment: the selector's (which win), then
podLabels, then the common labels. Arguments: root, name, podLabels.
*/}}
{{- define "s3csi.podTemplateLabels" -}}
{{- $common := include "s3csi.labels" .root | fromYaml -}}
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
{{- if .Values.tls.caBundle -}}{{ .Values.tls.configMapName }}{{- else -}}{{ .Values.tls.existingConfigMap }}{{- end -}}
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
The driver-level credential variables, from s3.credentials.secretName: "optional" is true on the
node plugin (a node can serve secret-authenticated volumes without them) and false on the CSI
controller. An empty secretName is the Secret Scality's 1.x and 2.x charts defaulted to
(s3CredentialSecret.name s3-secret; scality/mountpoint-s3-csi-driver@1.0.0..2.2.0:charts/
scality-mountpoint-s3-csi-driver/values.yaml), optional in both: a release upgraded from them
keeps its credentials without the chart reading the cluster, and an install without that Secret
has none.
*/}}
{{- define "s3csi.credentialsEnv" -}}
{{- $c := deepCopy .root.Values.s3.credentials -}}
{{- $optional := .optional -}}
{{- if not $c.secretName -}}
{{- $_ := set $c "secretName" "s3-secret" -}}
{{- $optional = true -}}
{{- end -}}
{{- if and .controller .root.Values.s3.credentials.controllerSecretName -}}
{{- $_ := set $c "secretName" .root.Values.s3.credentials.controllerSecretName -}}
{{- $optional = .optional -}}
{{- end -}}
{{- if $c.secretName }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ $c.secretName }}
      key: {{ $c.accessKeyIdKey }}
      optional: {{ $optional }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $c.secretName }}
      key: {{ $c.secretAccessKeyKey }}
      optional: {{ $optional }}
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
"true" when the chart is rendered with access to a cluster (helm install and upgrade), empty
when rendered offline (helm template, helm install --dry-run=client, Argo CD, a Flux
post-renderer's input): lookup then returns nothing, and kube-system exists in every cluster.
*/}}
{{- define "s3csi.online" -}}
{{- if lookup "v1" "Namespace" "" "kube-system" }}true{{ end -}}
{{- end -}}

{{/*
The live node DaemonSet s3-csi-node of the release namespace as JSON ({} offline or when there
is none): this chart's, or one of Scality's releases when this is the upgrade over it.
*/}}
{{- define "s3csi.liveNodePlugin" -}}
{{- toJson (lookup "apps/v1" "DaemonSet" .Release.Namespace "s3-csi-node" | default dict) -}}
{{- end -}}

{{/*
Values whose right setting depends on what ran before (a new install, Scality's 1.x or 2.x
driver, an earlier release of this chart). helm install and upgrade derive each unset one from
the cluster; an offline render cannot, so it fails here, naming each one to set, rather than
render something that differs from what helm upgrade would.
*/}}
{{- define "s3csi.requireOffline" -}}
{{- if not (include "s3csi.online" .) -}}
{{- $missing := list -}}
{{- if not .Values.mounter.defaultMode -}}
{{- $missing = append $missing "mounter.defaultMode (systemd for a new install or an upgrade over Scality's 1.x driver, pod over Scality's 2.x driver)" -}}
{{- end -}}
{{- if not .Values.node.publishSecretScope -}}
{{- $missing = append $missing "node.publishSecretScope (claim for a new install; any over Scality's driver or a release that predates it, whose volumes may name a Secret of any namespace)" -}}
{{- end -}}
{{- if not (kindIs "slice" .Values.controller.provisioner.secretNamespaces) -}}
{{- $missing = append $missing "controller.provisioner.secretNamespaces ([] for none on a new install; the namespaces of your StorageClasses' provisioner secrets, or [\"*\"] as Scality's driver allowed)" -}}
{{- end -}}
{{- with $missing -}}
{{- fail (printf "the chart is rendered without access to a cluster (helm template or a GitOps tool), so it cannot tell a new install from an upgrade: set %s (docs/upgrade.md#gitops)" (join "; " .)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The cluster default mode: mounter.defaultMode when set; else, with a cluster, the live node
plugin's: this chart's --default-mounter, or pod where a Scality release ran pod mode (2.x,
whose node plugin has no systemd socket, or 1.x with MOUNTER_KIND=pod;
scality/mountpoint-s3-csi-driver@1.0.0..2.2.0:charts/scality-mountpoint-s3-csi-driver/templates/
node.yaml), systemd for a Scality release in systemd mode and for a new install
(mountmode.Default). Offline and unset: refused (s3csi.requireOffline).
*/}}
{{- define "s3csi.defaultMode" -}}
{{- if .Values.mounter.defaultMode -}}
{{- .Values.mounter.defaultMode -}}
{{- else -}}
{{- include "s3csi.requireOffline" . -}}
{{- $ds := include "s3csi.liveNodePlugin" . | fromJson -}}
{{- $mode := "systemd" -}}
{{- if $ds -}}
{{- $spec := dig "spec" "template" "spec" dict $ds -}}
{{- $flag := regexFind "--default-mounter=(systemd|pod)" (toJson (dig "containers" list $spec)) -}}
{{- if $flag -}}
{{- $mode = trimPrefix "--default-mounter=" $flag -}}
{{- else -}}
{{- $systemdBus := false -}}
{{- range (dig "volumes" list $spec) }}{{ if eq .name "systemd-bus" }}{{ $systemdBus = true }}{{ end }}{{ end -}}
{{- if or (not $systemdBus) (contains "\"MOUNTER_KIND\",\"value\":\"pod\"" (toJson (dig "containers" list $spec))) -}}
{{- $mode = "pod" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $mode -}}
{{- end -}}
{{- end -}}

{{/*
With access to a cluster (helm install/upgrade; not helm template), refuse modes that nodes use
but mounter.modesInUse leaves out: a node labelled s3.csi.scality.com/mounter with such a mode,
or one whose plugin reports it in the annotation s3.csi.scality.com/effective-mounter (it may
hold live mounts of that mode, which need that mode's host access to be unmounted); and pod
mode left out while Mountpoint Pods run (this chart's or those Scality's 2.x driver left, which
carry the same driver-version label): their mounts need pod mode to be kept and retired.
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
{{- if not (has "pod" $modes) -}}
{{- range $p := ((lookup "v1" "Pod" .Values.mountpointPod.namespace "").items | default list) -}}
{{- if hasKey ($p.metadata.labels | default dict) "s3.csi.scality.com/mounted-by-csi-driver-version" -}}
{{- fail (printf "Mountpoint Pod %s/%s serves mounts on node %s but mounter.modesInUse is %v: add pod to mounter.modesInUse (after Scality's 2.x driver: mounter.defaultMode pod) until those mounts are gone (docs/upgrade.md)" $p.metadata.namespace $p.metadata.name ($p.spec.nodeName | default "?") $modes) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Where a node-publish Secret may live (--node-publish-secret-scope): node.publishSecretScope
when set; else, with a cluster, claim on a new install, and over a live node plugin what it had:
"any" when it predates the flag (earlier releases, Scality's 1.x and 2.x charts), so an upgrade
never starts refusing volumes that mounted before it (docs/security.md, tenant isolation).
Offline and unset: refused (s3csi.requireOffline).
*/}}
{{- define "s3csi.secretScope" -}}
{{- if .Values.node.publishSecretScope -}}
{{- .Values.node.publishSecretScope -}}
{{- else -}}
{{- include "s3csi.requireOffline" . -}}
{{- $ds := include "s3csi.liveNodePlugin" . | fromJson -}}
{{- if $ds -}}
{{- $had := regexFind "--node-publish-secret-scope=(claim|any)" (toJson (dig "spec" "template" "spec" "containers" list $ds)) -}}
{{- if $had -}}{{ trimPrefix "--node-publish-secret-scope=" $had }}{{- else -}}any{{- end -}}
{{- else -}}
claim
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Namespaces whose Secrets the provisioner may read, as a JSON list:
controller.provisioner.secretNamespaces when set; else, with a cluster, none on a new install
and, over a live node plugin, every namespace when the release's provisioner ClusterRole
granted Secrets or the release has none of this chart (earlier releases defaulted to every
namespace, Scality's charts too: scality/mountpoint-s3-csi-driver@1.2.0..2.2.0:charts/
scality-mountpoint-s3-csi-driver/templates/serviceaccount-csi-controller.yaml): an upgrade never
takes away what provisioning and deletion of existing volumes read. Offline and unset: refused
(s3csi.requireOffline).
*/}}
{{- define "s3csi.secretNamespaces" -}}
{{- $set := .Values.controller.provisioner.secretNamespaces -}}
{{- if kindIs "slice" $set -}}
{{- toJson $set -}}
{{- else -}}
{{- include "s3csi.requireOffline" . -}}
{{- if include "s3csi.liveNodePlugin" . | fromJson -}}
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
{{- end -}}

{{/*
The service accounts of the node plugin and the controller: node.serviceAccount.name and
controller.serviceAccount.name when set; else this chart's names when it creates the accounts
(create: true), and the names Scality's charts defaulted to when it does not (create: false:
the account exists already, and a user who carried create: false from Scality's chart made it
under that name; scality/mountpoint-s3-csi-driver@1.0.0..2.2.0:charts/
scality-mountpoint-s3-csi-driver/values.yaml node.serviceAccount.name,
controller.serviceAccount.name).
*/}}
{{- define "s3csi.nodeServiceAccount" -}}
{{- .Values.node.serviceAccount.name | default (ternary "s3-csi-node" "s3-csi-driver-sa" .Values.node.serviceAccount.create) -}}
{{- end -}}

{{- define "s3csi.controllerServiceAccount" -}}
{{- .Values.controller.serviceAccount.name | default (ternary "s3-csi-controller" "s3-csi-driver-controller-sa" .Values.controller.serviceAccount.create) -}}
{{- end -}}

{{/* The digest of this chart's values.yaml (its chartDefaults; tests/helm keeps them equal). */}}
{{- define "s3csi.chartDefaults" -}}f5460c4e74f4b465{{- end -}}

{{/*
Checks every template runs first (each template starts with include "s3csi.guard"), before it
reads a value: that the values are this chart's (helm upgrade --reuse-values replaces a chart's
defaults with the previous chart's, Scality's or an earlier version of this one, and values
this chart would misread or never see went unnoticed), that no value of Scality's charts is
carried, and what an offline render needs (s3csi.requireOffline). A refusal happens at render,
before any object changes. (The node DaemonSet's template also checks the nodes' modes,
s3csi.checkNodes, once.)
*/}}
{{- define "s3csi.guard" -}}
{{- if ne (toString .Values.chartDefaults) (include "s3csi.chartDefaults" .) -}}
{{- if or (hasKey .Values "s3CredentialSecret") (hasKey .Values "experimental") (hasKey .Values "initContainer") (not (hasKey .Values "mounter")) -}}
{{- fail (printf "these values are those of Scality's chart (scality-mountpoint-s3-csi-driver), not this chart's: helm upgrade --reuse-values replaces a chart's defaults with the previous release's. Nothing was changed. Run helm upgrade %s <this chart> -n %s -f values.yaml without --reuse-values (with --take-ownership over Scality's 2.x), your values translated as docs/upgrade.md says" .Release.Name .Release.Namespace) -}}
{{- end -}}
{{- fail (printf "these values are the defaults of another version of this chart, not of this one: helm upgrade --reuse-values replaces a chart's defaults with the previous release's. Nothing was changed. Run helm upgrade %s <this chart> -n %s --reset-then-reuse-values (Helm 3.14 or later: your values over this chart's defaults), or with -f values.yaml" .Release.Name .Release.Namespace) -}}
{{- end -}}
{{- include "s3csi.refuse1x" . -}}
{{- include "s3csi.requireOffline" . -}}
{{- include "s3csi.checkValues" . -}}
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
{{- if lt (include "s3csi.bytes" (toString .) | float64) (mul 640 1048576 | float64) }}
{{- fail (printf "mountpointPod.resources.limits.memory %s is below the 640Mi mount-s3 needs (its memory target is at least 512Mi, with 128Mi above it for its overhead; docs/sizing.md): set 640Mi or more, or null for no limit" (toString .)) }}
{{- end }}
- --mountpoint-memory-limit={{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
A Kubernetes quantity's value in its base unit (bytes; cores for cpu), as a float, or "invalid"
for what resource.ParseQuantity refuses. Its grammar, as the binaries and Kubernetes read it
(k8s.io/apimachinery pkg/api/resource/quantity.go): an optional sign, digits with an optional
fraction (1, 1.5, 1., .5), then nothing, a decimal exponent (e3, E-3), a binary suffix (Ki, Mi,
Gi, Ti, Pi, Ei) or a decimal one (n, u, m, k, M, G, T, P, E).
*/}}
{{- define "s3csi.bytes" -}}
{{- $s := toString . -}}
{{- $re := "^([+-]?(?:[0-9]+(?:\\.[0-9]*)?|\\.[0-9]+))([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$" -}}
{{- if not (regexMatch $re $s) -}}invalid
{{- else if regexMatch "[eE][+-]?[0-9]+$" $s -}}{{- float64 $s -}}
{{- else -}}
{{- $num := regexReplaceAll $re $s "${1}" -}}
{{- $unit := regexReplaceAll $re $s "${2}" -}}
{{- $mult := get (dict "" 1.0 "n" 0.000000001 "u" 0.000001 "m" 0.001 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "P" 1000000000000000.0 "E" 1000000000000000000.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0) $unit -}}
{{- mulf (float64 $num) $mult -}}
{{- end -}}
{{- end -}}

{{/*
Fails unless .value (when set) is a Kubernetes quantity, naming .name and giving .example.
*/}}
{{- define "s3csi.checkQuantity" -}}
{{- if and (not (kindIs "invalid" .value)) (eq (include "s3csi.bytes" .value) "invalid") -}}
{{- fail (printf "%s %q is not a Kubernetes quantity: use a number with an optional suffix, e.g. %s (binary suffixes Ki, Mi, Gi; decimal k, M, G; m for thousandths)" .name (toString .value) .example) -}}
{{- end -}}
{{- end -}}

{{/*
A Go duration (time.ParseDuration's grammar: an optional sign, then one or more of a number with
an optional fraction and a unit ns, us, µs, ms, s, m or h; or "0") in nanoseconds, as an integer,
or "invalid".
*/}}
{{- define "s3csi.durationNs" -}}
{{- $s := toString . -}}
{{- $part := "(?:[0-9]+(?:\\.[0-9]*)?|\\.[0-9]+)(?:ns|us|\u00b5s|\u03bcs|ms|s|m|h)" -}}
{{- if eq $s "0" -}}0
{{- else if not (regexMatch (printf "^[+-]?(?:%s)+$" $part) $s) -}}invalid
{{- else -}}
{{- $total := 0.0 -}}
{{- range $p := regexFindAll $part $s -1 -}}
{{- $num := regexFind "^(?:[0-9]+(?:\\.[0-9]*)?|\\.[0-9]+)" $p -}}
{{- $unit := trimPrefix $num $p -}}
{{- $mult := get (dict "ns" 1.0 "us" 1000.0 "\u00b5s" 1000.0 "\u03bcs" 1000.0 "ms" 1000000.0 "s" 1000000000.0 "m" 60000000000.0 "h" 3600000000000.0) $unit -}}
{{- $total = addf $total (mulf (float64 $num) $mult) -}}
{{- end -}}
{{- if hasPrefix "-" $s -}}-{{- end -}}{{- $total | int64 -}}
{{- end -}}
{{- end -}}

{{/*
Fails unless .value (when set) is a Go duration of more than zero, naming .name.
*/}}
{{- define "s3csi.checkDuration" -}}
{{- with .value -}}
{{- $ns := include "s3csi.durationNs" . -}}
{{- if eq $ns "invalid" -}}
{{- fail (printf "%s %q is not a duration: write a number with a unit, e.g. 30s, 1m or 1m30s (units ns, us, ms, s, m, h)" $.name (toString .)) -}}
{{- else if le (int64 $ns) 0 -}}
{{- fail (printf "%s %q must be more than zero (the node plugin and the controller refuse a zero or negative duration at start-up): set a duration such as 30s or 1m" $.name (toString .)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
