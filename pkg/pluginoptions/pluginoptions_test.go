package pluginoptions

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string // "" means valid
	}{
		{"node", []string{"--node-id=n1"}, ""},
		{"node without id", nil, "--node-id"},
		{"node with a CA bundle", []string{"--node-id=n1", "--s3-ca-bundle=/etc/ca.pem"}, ""},
		{"node with a relative CA bundle", []string{"--node-id=n1", "--s3-ca-bundle=ca.pem"}, "--s3-ca-bundle must be an absolute path"},
		{"controller", []string{"--mode=controller"}, ""},
		{"controller with everything", []string{"--mode=controller", "--s3-endpoint-url=https://s3.example.com", "--s3-ca-bundle=/etc/ca.pem", "--empty-bucket-budget=5s"}, ""},
		{"controller with a relative CA bundle", []string{"--mode=controller", "--s3-ca-bundle=ca.pem"}, "--s3-ca-bundle must be an absolute path"},
		{"controller with no budget", []string{"--mode=controller", "--empty-bucket-budget=0s"}, "--empty-bucket-budget must be positive"},
		{"controller with a bad endpoint", []string{"--mode=controller", "--s3-endpoint-url=s3.example.com"}, "--s3-endpoint-url"},
		{"unknown mode", []string{"--mode=both"}, "--mode must be node or controller"},
		{"node probing every mount", []string{"--node-id=n1", "--health-probes-per-check=0"}, ""},
		{"node with mount-s3's user", []string{"--node-id=n1", "--mount-s3-user=s3csi-mount", "--systemd-credentials-dir=/run/s3", "--systemd-cache-dir=/var/cache/s3"}, ""},
		{"node with protected mount units", []string{"--node-id=n1", "--mount-s3-protect-system", "--systemd-credentials-dir=/run/s3", "--systemd-cache-dir=/var/cache/s3"}, ""},
		{"protected mount units without the hand-over", []string{"--node-id=n1", "--mount-s3-protect-system", "--fuse-helper-path="}, "--mount-s3-protect-system needs the descriptor hand-over"},
		{"protected mount units with a cache below /tmp", []string{"--node-id=n1", "--mount-s3-protect-system", "--systemd-cache-dir=/tmp/cache"}, `--systemd-cache-dir "/tmp/cache" is below /tmp`},
		{"protected mount units with mount-s3 below /root", []string{"--node-id=n1", "--mount-s3-protect-system", "--mount-s3-path=/root/bin/mount-s3"}, `--mount-s3-path "/root/bin/mount-s3" is below /root`},
		{"protected mount units with the helper auto below /home", []string{"--node-id=n1", "--mount-s3-protect-system", "--mount-s3-path=/home/x/mount-s3"}, `--fuse-helper-path "/home/x/scality-fuse-helper" is below /home`},
		{"protected mount units with kubelet in /var/tmp", []string{"--node-id=n1", "--mount-s3-protect-system", "--kubelet-path=/var/tmp"}, `--kubelet-path "/var/tmp" is below /var/tmp`},
		{"/tmpfoo is not below /tmp", []string{"--node-id=n1", "--mount-s3-protect-system", "--systemd-cache-dir=/tmpfoo"}, ""},
		{"mount-s3's user without a cache directory", []string{"--node-id=n1", "--mount-s3-user=s3csi-mount", "--systemd-credentials-dir=/run/s3"}, "--mount-s3-user needs --systemd-credentials-dir and --systemd-cache-dir"},
		{"mount-s3's user named root", []string{"--node-id=n1", "--mount-s3-user=root", "--systemd-credentials-dir=/run/s3", "--systemd-cache-dir=/var/cache/s3"}, "--mount-s3-user is root"},
		{"mount-s3's user with a bad name", []string{"--node-id=n1", "--mount-s3-user=S3/../x", "--systemd-credentials-dir=/run/s3", "--systemd-cache-dir=/var/cache/s3"}, "is not a portable user name"},
		{"a relative cache directory", []string{"--node-id=n1", "--systemd-cache-dir=cache"}, "--systemd-cache-dir must be an absolute path"},
		{"node with a negative probe bound", []string{"--node-id=n1", "--health-probes-per-check=-1"}, "--health-probes-per-check must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CSI_NODE_NAME", "")
			_, err := Parse(tc.args)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("validate = %v, want an error about %q", err, tc.wantErr)
			}
		})
	}
}
