package zzexp

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

func TestStackedMountSignals(t *testing.T) {
	shared := t.TempDir()
	sd := harness.StartSystemd(t, shared)
	conn, err := dbus.Dial("unix:path=" + sd.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		t.Fatal(err)
	}
	ch := make(chan *dbus.Signal, 100000)
	conn.Signal(ch)
	count := func(d time.Duration) int {
		n := 0
		end := time.After(d)
		for {
			select {
			case <-ch:
				n++
			case <-end:
				return n
			}
		}
	}
	sh := func(args ...string) {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
	}
	const N = 200
	for i := 0; i < N; i++ {
		d := filepath.Join(shared, fmt.Sprint(i))
		os.MkdirAll(d, 0o755)
		sh("mount", "-t", "tmpfs", "-o", "size=4k", "guard", d)
	}
	fmt.Println("after single mounts, signals:", count(3*time.Second))
	probe := filepath.Join(shared, "probe")
	os.MkdirAll(probe, 0o755)
	sh("mount", "-t", "tmpfs", "-o", "size=4k", "x", probe)
	sh("umount", probe)
	fmt.Println("one unrelated mount+umount with", N, "single mounts, signals:", count(3*time.Second))
	for i := 0; i < N; i++ {
		d := filepath.Join(shared, fmt.Sprint(i))
		sh("mount", "-t", "tmpfs", "-o", "size=8k", "top", d)
	}
	fmt.Println("after stacking, signals:", count(3*time.Second))
	sh("mount", "-t", "tmpfs", "-o", "size=4k", "x", probe)
	sh("umount", probe)
	fmt.Println("one unrelated mount+umount with", N, "stacked mounts, signals:", count(3*time.Second))
	for i := 0; i < N; i++ {
		d := filepath.Join(shared, fmt.Sprint(i))
		sh("umount", d)
		sh("umount", d)
	}
}
