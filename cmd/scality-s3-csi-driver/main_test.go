package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/s3csi/s3-csi-driver/pkg/pluginoptions"
)

// parse returns the options for args, as main parses them.
func parse(t *testing.T, args ...string) pluginoptions.Options {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var o pluginoptions.Options
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestRunControllerRefusesBadCABundle(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bundle := range []string{filepath.Join(dir, "missing.pem"), notPEM} {
		o := parse(t, "--mode=controller", "--endpoint=unix://"+filepath.Join(dir, "csi.sock"), "--s3-ca-bundle="+bundle)
		if err := runController(context.Background(), o, nil); err == nil {
			t.Errorf("runController with CA bundle %s started", bundle)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "csi.sock")); err == nil {
		t.Error("the socket was created although start-up failed")
	}
}

func TestProbesPerCheckFlag(t *testing.T) {
	for v, want := range map[int]int{0: -1, 1: 1, 100: 100} {
		if got := probesPerCheck(v); got != want {
			t.Errorf("probesPerCheck(%d) = %d, want %d (0 means every mount-s3, the monitor's negative)", v, got, want)
		}
	}
}
