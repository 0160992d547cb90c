package confined

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// hostile returns a directory as a compromised Mountpoint Pod could leave it, next to an
// "outside" directory standing for the rest of the host.
func hostile(t *testing.T) (dir, outside string) {
	t.Helper()
	dir, outside = t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "shadow")
	if err := os.WriteFile(secret, []byte("root:secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(secret, filepath.Join(dir, "mount.err")))
	must(os.Symlink(outside, filepath.Join(dir, "credentials")))
	must(os.Symlink("../../../../../../"+outside, filepath.Join(dir, "relative")))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "huge"), bytes.Repeat([]byte("x"), 1<<20), 0o644))
	must(os.Link(secret, filepath.Join(dir, "hardlink")))
	must(os.Symlink(secret, filepath.Join(dir, "ca.crt")))
	return dir, outside
}

func TestHostileDirectory(t *testing.T) {
	dir, outside := hostile(t)
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	for _, name := range []string{"mount.err", "relative", "fifo", "credentials"} {
		if b, _, err := d.ReadFile(name, 4096); err == nil {
			t.Errorf("ReadFile(%s) = %q, want a refusal", name, b)
		}
	}
	b, truncated, err := d.ReadFile("huge", 4096)
	if err != nil || len(b) != 4096 || !truncated {
		t.Errorf("ReadFile(huge) = %d bytes, truncated=%v, %v; want 4096, true", len(b), truncated, err)
	}
	// Writes replace the name, never write through a link or a hard link.
	for _, name := range []string{"ca.crt", "hardlink", "fifo"} {
		if err := d.WriteFile(name, []byte("pem"), 0o644, -1); err != nil {
			t.Errorf("WriteFile(%s): %v", name, err)
		}
		if st, err := os.Lstat(filepath.Join(dir, name)); err != nil || !st.Mode().IsRegular() {
			t.Errorf("%s after WriteFile: %v %v, want a regular file", name, st, err)
		}
	}
	if err := d.WriteFile("relative/x", []byte("x"), 0o644, -1); err == nil {
		t.Error("WriteFile through an escaping link succeeded")
	}
	// A subdirectory that is a link is refused, and nothing outside is chowned.
	if _, err := d.Sub("credentials", 0o750, 1000); err == nil {
		t.Error("Sub(credentials) through a link succeeded")
	}
	if st, _ := os.Stat(outside); st.Mode().Perm() == 0o750 {
		t.Error("the outside directory was chmodded")
	}
	if _, _, err := d.SocketPath("mount.err"); !errors.Is(err, ErrFileType) {
		t.Errorf("SocketPath(a link) = %v, want ErrFileType", err)
	}
	if _, _, err := d.SocketPath("huge"); !errors.Is(err, ErrFileType) {
		t.Errorf("SocketPath(a file) = %v, want ErrFileType", err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "shadow")); string(b) != "root:secret" {
		t.Errorf("the outside file changed: %q", b)
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 1 {
		t.Errorf("files appeared outside: %v", entries)
	}
	for _, e := range mustReadDir(t, dir) {
		if strings.Contains(e, ".tmp-") {
			t.Errorf("temporary file left: %s", e)
		}
	}
}

func TestSubAndSocket(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	sub, err := d.Sub("credentials", 0o750, os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.WriteFile("config", []byte("[profile x]\n"), 0o640, os.Getgid()); err != nil {
		t.Fatal(err)
	}
	sub.Close()
	if st, err := os.Stat(filepath.Join(dir, "credentials", "config")); err != nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("config: %v %v", st, err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "mount.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			_, _ = c.Write([]byte("ok"))
			c.Close()
		}
	}()
	path, release, err := d.SocketPath("mount.sock")
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", path)
	release()
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	buf := make([]byte, 2)
	if _, err := c.Read(buf); err != nil || string(buf) != "ok" {
		t.Errorf("read %q %v", buf, err)
	}
	c.Close()
}

func mustReadDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestHasFile(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "file"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(dir, "dirlink")); err != nil {
		t.Fatal(err)
	}
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for name, want := range map[string]bool{"sub/file": true, "sub": false, "none": false, "link": false, "dirlink/secret": false, "../x": false} {
		if got := d.HasFile(name); got != want {
			t.Errorf("HasFile(%q) = %v, want %v", name, got, want)
		}
	}
}
