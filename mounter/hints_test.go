package mounter

import (
	"strings"
	"testing"
)

func TestHint(t *testing.T) {
	for _, c := range []struct{ output, want string }{
		{"Error: Timeout after 30 seconds while waiting for mount process to be ready", "--s3-ca-bundle"},
		{"3: CRT error 1029: aws-c-io: AWS_IO_TLS_ERROR_NEGOTIATION_FAILURE, TLS (SSL) negotiation failed", "not signed by a CA"},
		{"Error: Failed to create S3 client\n  1: Service error\n  2: The bucket does not exist", ""},
		{"", ""},
	} {
		got := Hint(c.output)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("Hint(%q) = %q, want one containing %q", c.output, got, c.want)
		}
	}
}
