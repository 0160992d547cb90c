{{- /*
Values of the Scality driver 1.x chart (anchors: its values.yaml) that users carry into an
upgrade: the schema lets them through (marked deprecated) so that this fails with what to use
instead, rather than a bare "additional properties not allowed".
*/}}
{{- define "s3csi.refuse1x" -}}
{{- if hasKey .Values "s3CredentialSecret" }}{{ fail "s3CredentialSecret is a value of the 1.x chart: use s3.credentials.secretName, with s3.credentials.accessKeyIdKey, secretAccessKeyKey and sessionTokenKey for its keys (the Secret must be in the release namespace) (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values "initContainer" }}{{ fail "initContainer is a value of the 1.x chart: install-mp uses node.resources (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values "cleanupCRDOnUninstall" }}{{ fail "cleanupCRDOnUninstall is a value of the 1.x chart: the CRD is kept on uninstall; docs/uninstall.md says how to remove it (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values "experimental" }}{{ fail "experimental is a value of the 1.x chart: pod mode is chosen with mounter.modesInUse and mounter.defaultMode (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values "supportLegacySystemDMounts" }}{{ fail "supportLegacySystemDMounts is a value of the 1.x chart: 1.x mounts are always adopted (docs/upgrade.md) (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.node "s3EndpointUrl" }}{{ fail "node.s3EndpointUrl is a value of the 1.x chart: use s3.endpointUrl (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.node "s3Region" }}{{ fail "node.s3Region is a value of the 1.x chart: use s3.region (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.node "mountpointInstallPath" }}{{ fail "node.mountpointInstallPath is a value of the 1.x chart: use node.mountS3InstallDir (without the trailing slash) (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.node "defaultTolerations" }}{{ fail "node.defaultTolerations is a value of the 1.x chart: use node.tolerations (and node.tolerateAllTaints) (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.node "podInfoOnMountCompat" }}{{ fail "node.podInfoOnMountCompat is a value of the 1.x chart: nothing: the CSIDriver always has podInfoOnMount (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.node "mountpointVersion" }}{{ fail "node.mountpointVersion is a value of the 1.x chart: nothing: units are named by the driver (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.tls "caCertConfigMap" }}{{ fail "tls.caCertConfigMap is a value of the 1.x chart: use tls.existingConfigMap (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.tls "caCertData" }}{{ fail "tls.caCertData is a value of the 1.x chart: use tls.caBundle (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.tls "initImage" }}{{ fail "tls.initImage is a value of the 1.x chart: nothing: the CA bundle is mounted from a ConfigMap (docs/upgrade.md)" }}{{ end }}
{{- if hasKey .Values.tls "initResources" }}{{ fail "tls.initResources is a value of the 1.x chart: nothing: the CA bundle is mounted from a ConfigMap (docs/upgrade.md)" }}{{ end }}
{{- end -}}
