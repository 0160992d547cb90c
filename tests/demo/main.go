// Command demo (make demo) shows the driver's main job end to end on this machine, with no
// cluster: it starts an S3 server and a systemd user manager, runs the CSI node plugin, and plays
// kubelet over the CSI socket to mount a bucket, use it and unmount it. Every step is printed in
// plain words; everything it starts is stopped and removed at the end, also on failure or Ctrl-C.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/s3csi/s3-csi-driver/mounter/systemd"
	"github.com/s3csi/s3-csi-driver/tests/harness"
)

var stepNo int

func step(format string, args ...any) {
	stepNo++
	fmt.Printf("\n%d. %s\n", stepNo, fmt.Sprintf(format, args...))
}

func say(format string, args ...any) { fmt.Printf("   %s\n", fmt.Sprintf(format, args...)) }

func main() {
	if os.Geteuid() != 0 {
		fmt.Println("make demo mounts a filesystem and runs systemd: run it as root.")
		os.Exit(1)
	}
	// Failures (Fatalf) and Ctrl-C clean up everything before exiting.
	t := harness.NewMainTB()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { <-sig; t.Fatalf("interrupted") }()
	run(t)
	step("Cleaning up: stopping the driver, systemd and the S3 server, removing temporary files.")
	t.Close()
	fmt.Println("\nDone. Everything the demo started has been stopped and removed.")
}

func run(t harness.TB) {
	ctx := context.Background()
	step("Starting an S3 server (versitygw, posix backend) on a free loopback port.")
	s3 := harness.StartS3(t)
	say("endpoint %s, region %s, data in %s", s3.Endpoint, s3.Region, s3.DataDir)

	step("Creating bucket %q with one object, hello.txt, through the S3 API.", "demo-bucket")
	s3.CreateBucket(t, "demo-bucket")
	s3.PutObject(t, "demo-bucket", "hello.txt", []byte("Hello from the bucket!\n"))
	say("bucket holds: %s", strings.Join(s3.ListKeys(t, "demo-bucket"), ", "))

	kubelet := harness.NewKubeletDir(t)
	step("Starting a systemd user manager in its own mount namespace (it stands in for the node's systemd).")
	sd := harness.StartSystemd(t, kubelet)
	harness.CleanupMounts(t, kubelet)
	say("D-Bus socket %s; %s is shared, so its mounts are visible here", sd.Socket, kubelet)

	step("Starting the CSI node plugin (bin/scality-s3-csi-driver) in systemd mode.")
	drv := harness.StartDriver(t, harness.DriverOptions{KubeletDir: kubelet, SystemdSocket: sd.Socket, S3: s3, WithCredentials: true, ExtraArgs: []string{"--v=2"}})
	say("CSI socket %s; Probe says ready", drv.Socket)
	info, err := drv.Identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		t.Fatalf("GetPluginInfo: %v", err)
	}
	say("driver %s, version %s", info.Name, info.VendorVersion)

	target := harness.TargetPath(t, kubelet, "demo-pod-uid", "demo-pv")
	step("Publishing the volume like kubelet would: NodePublishVolume(bucket demo-bucket → %s).", target)
	req := &csi.NodePublishVolumeRequest{
		VolumeId:   "demo-volume",
		TargetPath: target,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: []string{"allow-delete"}}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		},
		VolumeContext: map[string]string{"bucketName": "demo-bucket"},
	}
	start := time.Now()
	if _, err := drv.Node.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	unit := systemd.MountUnitName(target)
	say("mounted in %v by the transient unit %s", time.Since(start).Round(time.Millisecond), unit)
	if out, err := sd.Systemctl("show", "--property=ActiveState,MainPID,ExecStart", unit); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			say("  %s", truncate(line, 150))
		}
	}
	for _, m := range harness.MountsBelow(target) {
		say("mount table: %s (filesystem mountpoint-s3, type fuse)", m)
	}

	step("Listing the mount and reading hello.txt through it.")
	entries, err := os.ReadDir(target)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	for _, e := range entries {
		say("ls: %s", e.Name())
	}
	b, err := os.ReadFile(filepath.Join(target, "hello.txt"))
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	say("hello.txt says: %q", string(b))

	step("Writing reply.txt through the mount.")
	if err := os.WriteFile(filepath.Join(target, "reply.txt"), []byte("Hello back from the pod!\n"), 0o644); err != nil {
		t.Fatalf("write: %v", err)
	}
	say("written and closed (mount-s3 uploads on close)")

	step("Looking at the bucket through the S3 API.")
	say("bucket holds: %s", strings.Join(s3.ListKeys(t, "demo-bucket"), ", "))
	say("reply.txt says: %q", string(s3.GetObject(t, "demo-bucket", "reply.txt")))

	step("Unpublishing: NodeUnpublishVolume(%s).", target)
	if _, err := drv.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "demo-volume", TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume: %v", err)
	}
	say("mounts left below the target: %d", len(harness.MountsBelow(target)))
	say("mount-s3 units left: %d", len(sd.Units("mount-s3-*")))
	if _, err := os.Stat(target); os.IsNotExist(err) {
		say("target directory removed")
	}
	state := filepath.Join(kubelet, "plugins", "s3.csi.scality.com", "systemd")
	if entries, _ := os.ReadDir(state); len(entries) == 0 {
		say("no credential files left in %s", state)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
