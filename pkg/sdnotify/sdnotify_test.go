//go:build linux

package sdnotify

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// manager listens like systemd's notify socket and returns what it received: each message's
// text and its file descriptors. close says whether to close received descriptors at once
// (passing the barrier) or keep them (never passing it).
func manager(t *testing.T, msgs int, close bool) (string, <-chan [2]any) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(s, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	out := make(chan [2]any, msgs)
	var mu sync.Mutex
	var kept []int
	t.Cleanup(func() {
		unix.Close(s)
		mu.Lock()
		defer mu.Unlock()
		for _, fd := range kept {
			unix.Close(fd)
		}
	})
	go func() {
		for i := 0; i < msgs; i++ {
			buf, oob := make([]byte, 512), make([]byte, 128)
			n, oobn, _, _, err := unix.Recvmsg(s, buf, oob, 0)
			if err != nil {
				return
			}
			var fds []int
			if cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, c := range cmsgs {
					if f, err := unix.ParseUnixRights(&c); err == nil {
						fds = append(fds, f...)
					}
				}
			}
			if strings.HasPrefix(string(buf[:n]), "BARRIER=1") {
				if close {
					for _, fd := range fds {
						unix.Close(fd)
					}
				} else {
					mu.Lock()
					kept = append(kept, fds...)
					mu.Unlock()
				}
			}
			out <- [2]any{string(buf[:n]), fds}
		}
	}()
	return path, out
}

func TestStoreFD(t *testing.T) {
	sock, got := manager(t, 2, true)
	f, err := os.CreateTemp(t.TempDir(), "fd")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := StoreFD(sock, "fuse", int(f.Fd()), 5*time.Second); err != nil {
		t.Fatalf("StoreFD: %v", err)
	}
	first := <-got
	if first[0] != "FDSTORE=1\nFDNAME=fuse" {
		t.Errorf("first message %q", first[0])
	}
	fds := first[1].([]int)
	if len(fds) != 1 {
		t.Fatalf("first message carried %d descriptors, want 1", len(fds))
	}
	defer unix.Close(fds[0])
	var a, b unix.Stat_t
	if err := unix.Fstat(fds[0], &a); err != nil || unix.Fstat(int(f.Fd()), &b) != nil || a.Ino != b.Ino || a.Dev != b.Dev {
		t.Errorf("the stored descriptor is not the file sent (%v)", err)
	}
	if second := <-got; second[0] != "BARRIER=1" || len(second[1].([]int)) != 1 {
		t.Errorf("second message %q with %v, want BARRIER=1 with the pipe", second[0], second[1])
	}
}

func TestStoreFDWaitsForTheBarrier(t *testing.T) {
	sock, _ := manager(t, 2, false) // a manager that never processes the barrier
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start := time.Now()
	err = StoreFD(sock, "fuse", int(f.Fd()), 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not process") {
		t.Fatalf("StoreFD = %v, want a timeout", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("returned after %v, before the timeout", d)
	}
}

func TestStoreFDRefusals(t *testing.T) {
	if err := StoreFD("", "fuse", 0, time.Second); err != ErrNoSocket {
		t.Errorf("no socket: %v", err)
	}
	for _, name := range []string{"", "a:b", "a\nb", strings.Repeat("x", 256)} {
		if err := StoreFD("/nonexistent", name, 0, time.Second); err == nil || !strings.Contains(err.Error(), "bad file descriptor name") {
			t.Errorf("name %q: %v", name, err)
		}
	}
	if err := StoreFD(filepath.Join(t.TempDir(), "absent"), "fuse", 0, time.Second); err == nil {
		t.Error("a socket nobody listens on: no error")
	}
}
