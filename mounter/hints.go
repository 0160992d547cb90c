package mounter

import "strings"

// mount-s3's messages whose cause its own output does not say, with what a user can do
// (awslabs/mountpoint-s3@58817cab2; tests/mounts3/CONFORMANCE.md, rows D3, X2 and X3).
var hints = []struct{ marker, hint string }{
	{
		// run.rs (run): the parent's 30 s wait for its daemon child ended; the child was still
		// retrying its first request (ten attempts over about a minute), unprinted.
		marker: "Timeout after 30 seconds while waiting for mount process to be ready",
		hint: "mount-s3 retries a failed first request to S3 for about a minute and did not get to say why: " +
			"the endpoint does not answer or refuses connections, or its TLS certificate is not signed by a CA in the " +
			"bundle mount-s3 trusts (the node plugin's --s3-ca-bundle, the chart's tls.caBundle or tls.configMapName; " +
			"a bundle replaces the system's CAs). mount-s3's own log is in the node's journal for the unit named above",
	},
	{
		// the CRT's AWS_IO_TLS_ERROR_NEGOTIATION_FAILURE: the certificate is not named.
		marker: "AWS_IO_TLS_ERROR_NEGOTIATION_FAILURE",
		hint: "TLS with the endpoint failed: most often its certificate is not signed by a CA in the bundle mount-s3 " +
			"trusts (the node plugin's --s3-ca-bundle, the chart's tls.caBundle or tls.configMapName; a bundle replaces " +
			"the system's CAs), or the endpoint does not speak TLS on that port",
	},
}

// Hint returns " (<what it means>)" for mount-s3 output whose cause the output does not
// say, and "" for any other.
func Hint(output string) string {
	for _, h := range hints {
		if strings.Contains(output, h.marker) {
			return " (" + h.hint + ")"
		}
	}
	return ""
}
