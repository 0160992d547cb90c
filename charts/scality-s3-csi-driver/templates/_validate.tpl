{{/*
Checks of values whose refusal needs more than a schema can say: each names the value, what is
wrong and what to use instead. They mirror the binaries' own start-up checks
(pkg/pluginoptions, pkg/reconcileroptions; tests/helm TestValuesAgreeWithBinaries keeps them
equal), so that no value that renders makes the node plugin exit at start-up on every node.
Called by s3csi.guard, before any template reads a value.
*/}}
{{- define "s3csi.checkValues" -}}
{{- $v := .Values -}}
{{- include "s3csi.checkProxy" (dict "name" "proxy.httpsProxy" "value" $v.proxy.httpsProxy) -}}
{{- include "s3csi.checkProxy" (dict "name" "proxy.httpProxy" "value" $v.proxy.httpProxy) -}}
{{- include "s3csi.checkNoProxy" $v.proxy.noProxy -}}
{{- with $v.node.mountS3User -}}
{{- if eq . "root" -}}
{{- fail "node.mountS3User root is what an empty value means (mount-s3 as root, without capabilities): name a dedicated system user such as s3csi-mount, or set \"\" to run mount-s3 as root" -}}
{{- else if not (regexMatch "^[a-z_][a-z0-9_-]{0,30}$" .) -}}
{{- fail (printf "node.mountS3User %q is not a portable user name (a uid such as 0 is not one; the node plugin creates the user by name): use 1 to 31 of lowercase letters, digits, '_' and '-', starting with a letter or '_', e.g. s3csi-mount" .) -}}
{{- end -}}
{{- end -}}
{{- if $v.node.mountS3ProtectSystem -}}
{{- range $name, $path := dict "node.kubeletPath" ($v.node.kubeletPath | trimSuffix "/") "node.mountS3InstallDir" ($v.node.mountS3InstallDir | trimSuffix "/") -}}
{{- range $hidden := list "/tmp" "/var/tmp" "/home" "/root" "/run/user" -}}
{{- if or (eq $path $hidden) (hasPrefix (printf "%s/" $hidden) $path) -}}
{{- fail (printf "%s %q is below %s, which a mount-s3 unit with node.mountS3ProtectSystem sees empty (PrivateTmp, ProtectHome): move it elsewhere on the host, or set node.mountS3ProtectSystem to false" $name $path $hidden) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- with $v.mounter.systemdFallbackAfter -}}
{{- $ns := include "s3csi.durationNs" . -}}
{{- if or (eq $ns "invalid") (lt (int64 $ns) 0) (gt (int64 $ns) 90000000000) -}}
{{- fail (printf "mounter.systemdFallbackAfter %q must be a duration from 0s (off, as empty is) to 90s, e.g. 45s or 1m (kubelet ends a publish after 2 minutes, and the systemd mount that follows the wait needs the rest)" (toString .)) -}}
{{- end -}}
{{- end -}}
{{- range $name, $d := dict "node.mountTimeout" $v.node.mountTimeout "node.podSweepInterval" $v.node.podSweepInterval "node.apiTimeout" $v.node.apiTimeout "controller.emptyBucketBudget" $v.controller.emptyBucketBudget "controller.provisioner.timeout" $v.controller.provisioner.timeout -}}
{{- include "s3csi.checkDuration" (dict "name" $name "value" $d) -}}
{{- end -}}
{{- /* Every quantity, before any is read as a number: Kubernetes' grammar, with a message. */ -}}
{{- include "s3csi.checkQuantity" (dict "name" "mountpointPod.cacheSizeLimit" "value" $v.mountpointPod.cacheSizeLimit "example" "5Gi or 128Mi") -}}
{{- range $name, $r := dict "node.resources" $v.node.resources "controller.resources" $v.controller.resources "sidecars.nodeDriverRegistrar.resources" $v.sidecars.nodeDriverRegistrar.resources "sidecars.livenessProbe.resources" $v.sidecars.livenessProbe.resources "sidecars.csiProvisioner.resources" $v.sidecars.csiProvisioner.resources "mountpointPod.resources" $v.mountpointPod.resources "mountpointPod.headroom.resources" $v.mountpointPod.headroom.resources -}}
{{- range $kind := list "requests" "limits" -}}
{{- range $res, $q := (get ($r | default dict) $kind) | default dict -}}
{{- include "s3csi.checkQuantity" (dict "name" (printf "%s.%s.%s" $name $kind $res) "value" $q "example" (ternary "50m or 1" "128Mi or 1Gi" (eq $res "cpu"))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $res, $q := $v.node.systemdSliceLimits | default dict -}}
{{- include "s3csi.checkQuantity" (dict "name" (printf "node.systemdSliceLimits.%s" $res) "value" $q "example" (ternary "2 or 1500m" "8Gi" (eq $res "cpu"))) -}}
{{- end -}}
{{- with $v.mountpointPod.cacheSizeLimit -}}
{{- if lt (include "s3csi.bytes" (toString .) | float64) (mul 128 1048576 | float64) -}}
{{- fail (printf "mountpointPod.cacheSizeLimit %s is below the 128Mi a volume's cache needs (mount-s3's --max-cache-size is kept a tenth, at least 64Mi, below it; docs/sizing.md): set 128Mi or more, or null for no limit" (toString .)) -}}
{{- end -}}
{{- end -}}
{{- $res := $v.mountpointPod.resources | default dict -}}
{{- $req := $res.requests | default dict -}}
{{- $lim := $res.limits | default dict -}}
{{- range $r := list "cpu" "memory" -}}
{{- /* unset, null (which removes the key) or 0: no flag is rendered (s3csi.mountS3ResourceArgs) */ -}}
{{- $q := dict "requests" (get $req $r) "limits" (get $lim $r) -}}
{{- range $kind, $val := $q -}}
{{- if and $val (le (include "s3csi.quantity" (dict "resource" $r "value" $val) | float64) 0.0) -}}
{{- fail (printf "mountpointPod.resources.%s.%s %v must be more than zero: set a quantity such as %s, or null for none" $kind $r $val (ternary "50m" "128Mi" (eq $r "cpu"))) -}}
{{- end -}}
{{- end -}}
{{- if and $q.requests $q.limits -}}
{{- if gt (include "s3csi.quantity" (dict "resource" $r "value" $q.requests) | float64) (include "s3csi.quantity" (dict "resource" $r "value" $q.limits) | float64) -}}
{{- fail (printf "mountpointPod.resources.requests.%s %v is above mountpointPod.resources.limits.%s %v: a request cannot exceed its limit (the node plugin refuses it at start-up, and Kubernetes such a Mountpoint Pod): lower the request or raise the limit" $r $q.requests $r $q.limits) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $r, $val := $v.node.systemdSliceLimits | default dict -}}
{{- if and $val (le (include "s3csi.quantity" (dict "resource" $r "value" $val) | float64) 0.0) -}}
{{- fail (printf "node.systemdSliceLimits.%s %v must be more than zero: set a quantity such as %s, or null for no cap" $r $val (ternary "2" "8Gi" (eq $r "cpu"))) -}}
{{- end -}}
{{- end -}}
{{- range $name, $m := dict "node.affinity" (list $v.node.affinity (list "nodeAffinity" "podAffinity" "podAntiAffinity") "a pod's affinity") "controller.affinity" (list $v.controller.affinity (list "nodeAffinity" "podAffinity" "podAntiAffinity") "a pod's affinity") "node.seLinuxOptions" (list $v.node.seLinuxOptions (list "user" "role" "type" "level") "a container's SELinux options") -}}
{{- range $k, $_ := (index $m 0 | default dict) -}}
{{- if not (has $k (index $m 1)) -}}
{{- fail (printf "%s has an unknown key %s (Kubernetes would drop it without a word): use %s, the keys of %s" $name $k (join ", " (index $m 1)) (index $m 2)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $_ := include "s3csi.caConfigMap" . -}}
{{- include "s3csi.checkCABundle" $v.tls.caBundle -}}
{{- end -}}

{{/*
A proxy URL (proxy.httpsProxy, proxy.httpProxy) as the binaries take it (pkg/proxyenv Parse):
http(s)://host:port, nothing else. Arguments: name, value.
*/}}
{{- define "s3csi.checkProxy" -}}
{{- with .value -}}
{{- include "s3csi.checkText" (dict "name" $.name "value" .) -}}
{{- if not (regexMatch "^https?://" .) -}}
{{- fail (printf "%s %q has no scheme: write it http://host:port (or https://host:port for a proxy reached over TLS)" $.name .) -}}
{{- else if regexMatch "^https?://[^/?#]*@" . -}}
{{- fail (printf "%s must not carry credentials (user:password@): they would show in every mount unit's properties and mount-s3's environment on the nodes; let the proxy authorise the nodes by address, and write it http://host:port" $.name) -}}
{{- else if not (regexMatch "^https?://[^/?#@\\s]+/?$" .) -}}
{{- fail (printf "%s %q is not http://host:port: it has no host, a space, or a path, query or fragment" $.name .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* proxy.noProxy as the binaries take it: comma-separated hosts, domains, IPs and CIDRs. */}}
{{- define "s3csi.checkNoProxy" -}}
{{- with . -}}
{{- include "s3csi.checkText" (dict "name" "proxy.noProxy" "value" .) -}}
{{- range $raw := splitList "," . -}}
{{- $e := trim $raw -}}
{{- $v4 := "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])" -}}
{{- $cidr4 := printf "^%s(\\.%s){3}/0*(3[0-2]|[12]?[0-9])$" $v4 $v4 -}}
{{- /* IPv6 as net.ParseCIDR reads it: eight groups, or fewer around one "::"; with an IPv4 tail
after six groups, ::ffff: or :: (the other shortened forms with one are refused here, which net.ParseCIDR
would take) */ -}}
{{- $v6 := "([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,7}:|([0-9a-fA-F]{1,4}:){1,6}:[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,5}(:[0-9a-fA-F]{1,4}){1,2}|([0-9a-fA-F]{1,4}:){1,4}(:[0-9a-fA-F]{1,4}){1,3}|([0-9a-fA-F]{1,4}:){1,3}(:[0-9a-fA-F]{1,4}){1,4}|([0-9a-fA-F]{1,4}:){1,2}(:[0-9a-fA-F]{1,4}){1,5}|[0-9a-fA-F]{1,4}:(:[0-9a-fA-F]{1,4}){1,6}|:((:[0-9a-fA-F]{1,4}){1,7}|:)" -}}
{{- $cidr6 := printf "^(%s|(::(ffff:)?|([0-9a-fA-F]{1,4}:){6})%s(\\.%s){3})/0*(12[0-8]|1[01][0-9]|[1-9]?[0-9])$" $v6 $v4 $v4 -}}
{{- if not $e -}}
{{- fail (printf "proxy.noProxy %q has an empty entry: remove the doubled, leading or trailing comma" $) -}}
{{- else if regexMatch "\\s" $e -}}
{{- fail (printf "proxy.noProxy entry %q has a space inside it: list the hosts, domains, IPs and CIDRs comma-separated, e.g. .cluster.local,10.0.0.0/8" $e) -}}
{{- else if and (regexMatch "[/?#@]" $e) (not (regexMatch $cidr4 $e)) (not (regexMatch $cidr6 $e)) -}}
{{- fail (printf "proxy.noProxy entry %q is not a host, domain (.example.com), IP or CIDR (10.0.0.0/8): list them comma-separated, e.g. .cluster.local,10.0.0.0/8" $e) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
tls.caBundle as the node plugin and the controller read it at start-up (pluginoptions
ReadCABundle): PEM certificates, each a CERTIFICATE block whose base64 body is a DER
certificate (a SEQUENCE, 30 82 and its two-byte length, as long as the body says).
*/}}
{{- define "s3csi.checkCABundle" -}}
{{- with . -}}
{{- $hint := "give the CA's certificates in PEM, each between -----BEGIN CERTIFICATE----- and -----END CERTIFICATE----- lines, base64 inside (as openssl x509 -in ca.crt prints them)" -}}
{{- $blocks := regexFindAll "-----BEGIN CERTIFICATE-----[^-]*-----END CERTIFICATE-----" . -1 -}}
{{- if not $blocks -}}
{{- fail (printf "tls.caBundle holds no PEM certificate (the node plugin checks it at start-up and would exit on every node): %s" $hint) -}}
{{- end -}}
{{- range $i, $b := $blocks -}}
{{- $body := regexReplaceAll "\\s" (trimSuffix "-----END CERTIFICATE-----" (trimPrefix "-----BEGIN CERTIFICATE-----" $b)) "" -}}
{{- $hex := printf "%x" (b64dec $body) -}}
{{- $ok := and (regexMatch "^[A-Za-z0-9+/]+={0,2}$" $body) (hasPrefix "3082" $hex) (ge (len $hex) 8) -}}
{{- if $ok -}}{{- $ok = eq (len $hex) (mul 2 (add 4 (int64 (printf "0x%s" (substr 4 8 $hex))))) -}}{{- end -}}
{{- if not $ok -}}
{{- fail (printf "tls.caBundle certificate %d of %d is not a certificate (its base64 body is not a whole DER certificate: truncated, or not base64; the node plugin would exit on every node): %s" (add1 $i) (len $blocks) $hint) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
A resource quantity as a number: millicores for cpu, bytes otherwise (s3csi.bytes; read after
s3csi.checkQuantity refused what is not a quantity). Arguments: resource, value.
*/}}
{{- define "s3csi.quantity" -}}
{{- if eq .resource "cpu" -}}
{{- mulf (include "s3csi.bytes" .value | float64) 1000 -}}
{{- else -}}
{{- include "s3csi.bytes" .value -}}
{{- end -}}
{{- end -}}

{{/*
A proxy setting as pkg/proxyenv reads it (pkg/safetext CheckRunes): at most 2048 bytes of
printable text, no control or invisible format characters. Arguments: name, value.
*/}}
{{- define "s3csi.checkText" -}}
{{- if gt (len .value) 2048 -}}
{{- fail (printf "%s is %d bytes long: the node plugin takes at most 2048" .name (len .value)) -}}
{{- else if regexMatch "[\\p{Cc}\\p{Cf}\\p{Zl}\\p{Zp}]" .value -}}
{{- fail (printf "%s %q holds a control or invisible character (a tab, a line break, a zero-width or bidirectional mark): write it as plain text" .name .value) -}}
{{- end -}}
{{- end -}}
