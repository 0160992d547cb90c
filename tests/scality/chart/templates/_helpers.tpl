{{- /*
What differs between the releases, by the packaged chart's version (= the tag):
  s3fixture.v2           2.x: pod mode only (no systemd), Mountpoint Pod namespace, priority
                         classes, the CRD in crds/, the Pod Reconciler in the controller.
  s3fixture.socketDir    1.1.1-1.2.0: /run/systemd mounted as a directory (1.0.0 and 1.1.0
                         mount the socket file /run/systemd/private).
  s3fixture.controller   1.2.0 (controller.enable) and 2.x: the controller Deployment with
                         csi-provisioner.
  s3fixture.s3Values     1.2.0 and 2.x: s3.endpointUrl/s3.region, behind node.s3EndpointUrl/
                         node.s3Region (coalesce).
  s3fixture.v220         2.2.0: the startup-taint toleration, node RBAC on nodes and csinodes,
                         tls.* (CA ConfigMaps, the controller's CA volume and the reconciler's
                         TLS variables).
*/}}
{{- define "s3fixture.v2" -}}{{ if semverCompare ">=2.0.0-0" .Chart.Version }}true{{ end }}{{- end -}}
{{- define "s3fixture.v220" -}}{{ if semverCompare ">=2.2.0-0" .Chart.Version }}true{{ end }}{{- end -}}
{{- define "s3fixture.socketDir" -}}{{ if semverCompare ">=1.1.1-0, <2.0.0-0" .Chart.Version }}true{{ end }}{{- end -}}
{{- define "s3fixture.s3Values" -}}{{ if semverCompare ">=1.2.0-0" .Chart.Version }}true{{ end }}{{- end -}}
{{- define "s3fixture.controller" -}}
{{- if include "s3fixture.v2" . }}true{{ else if and (semverCompare ">=1.2.0-0" .Chart.Version) .Values.controller.enable }}true{{ end -}}
{{- end -}}

{{- /*
The release's names (scality/mountpoint-s3-csi-driver@1.0.0..2.2.0:charts/
scality-mountpoint-s3-csi-driver/templates/_helpers.tpl): "name" is nameOverride or the chart
name, cut at 63 characters without a trailing dash; the selector labels are it and the release
name, the latter left out for a release named "kustomize"; the common labels add the chart
(name-version, "+" as "_"), the appVersion, component csi-driver and managed-by (all but the
selector ones left out for "kustomize"), then customLabels.
*/}}
{{- define "s3fixture.name" -}}{{ .Values.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- define "s3fixture.selector" -}}
app.kubernetes.io/name: {{ include "s3fixture.name" . }}
{{- if ne .Release.Name "kustomize" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- end -}}
{{- define "s3fixture.labels" -}}
{{ include "s3fixture.selector" . }}
{{- if ne .Release.Name "kustomize" }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .Chart.AppVersion }}
app.kubernetes.io/version: {{ . | quote }}
{{- end }}
app.kubernetes.io/component: csi-driver
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
{{- with .Values.customLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- /*
The driver image of every container: image.containerRegistry (a prefix, default empty), the
repository, and image.tag, or "v" + appVersion when the tag is empty
(scality/mountpoint-s3-csi-driver@1.0.0..2.2.0:charts/.../templates/node.yaml, controller.yaml).
*/}}
{{- define "s3fixture.image" -}}
{{- printf "%s%s:%s" (.Values.image.containerRegistry | default "") .Values.image.repository ((toString .Values.image.tag) | default (printf "v%s" .Chart.AppVersion)) -}}
{{- end -}}

{{- /* node.seLinuxOptions as the containers' seLinuxOptions (four fields, in this order). */}}
{{- define "s3fixture.seLinux" -}}
{{- with . }}
seLinuxOptions:
  user: {{ .user }}
  type: {{ .type }}
  role: {{ .role }}
  level: {{ .level }}
{{- end }}
{{- end -}}

{{- /* imagePullSecrets, as names. */}}
{{- define "s3fixture.pullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{- /*
What the reproduction does not cover fails instead of rendering something else: 1.x's
experimental pod mounter (its Pod Reconciler runs /bin/scality-s3-csi-controller, which the
1.0.0-1.1.1 images do not ship, and 1.2.0 no longer deploys it;
scality/mountpoint-s3-csi-driver@1.0.0..1.2.0:Dockerfile, templates/controller.yaml), and 2.x's
CRD clean-up hook, which the real chart cannot render either (it includes templates
_helpers.tpl does not define: s3-csi.labels, s3-csi.fullname;
scality/mountpoint-s3-csi-driver@2.0.0..2.2.0:templates/crd-cleanup-hook.yaml).
*/}}
{{- define "s3fixture.refuse" -}}
{{- if and (not (include "s3fixture.v2" .)) ((.Values.experimental | default dict).podMounter) -}}
{{- fail "fixture: experimental.podMounter of the 1.x charts is not reproduced" -}}
{{- end -}}
{{- if and (include "s3fixture.v2" .) .Values.cleanupCRDOnUninstall -}}
{{- fail "fixture: cleanupCRDOnUninstall: the 2.x chart's hook includes template \"s3-csi.serviceAccountName.controller\", which it does not define" -}}
{{- end -}}
{{- end -}}
