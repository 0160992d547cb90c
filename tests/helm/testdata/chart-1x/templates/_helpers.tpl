{{/*
Selector labels of the 1.x DaemonSet and Deployment (issue 23): app, app.kubernetes.io/name
(nameOverride or the chart name) and app.kubernetes.io/instance, plus .Values.selectorLabels
(a null value removes a label). Arguments: root, app.
*/}}
{{- define "chart1x.selector" -}}
{{- $l := dict "app" .app "app.kubernetes.io/name" (.root.Values.nameOverride | default .root.Chart.Name) "app.kubernetes.io/instance" .root.Release.Name -}}
{{- range $k, $v := .root.Values.selectorLabels }}{{ if $v }}{{ $_ := set $l $k $v }}{{ else }}{{ $_ := unset $l $k }}{{ end }}{{ end -}}
{{- toYaml $l -}}
{{- end -}}
