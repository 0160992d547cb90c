//go:build linux

package mountoptions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// testTimeout bounds every wait of these tests; nothing waits for it on success.
const testTimeout = 10 * time.Second

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func listen(t *testing.T) *Listener {
	t.Helper()
	l, err := Listen(filepath.Join(t.TempDir(), SocketName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// pipe returns a pipe; the write end is what tests send, the read end proves whether every
// copy of the write end was closed (EOF) or lets a test read what was written through a copy.
func pipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// requireEOF fails unless every copy of the pipe's write end has been closed.
func requireEOF(t *testing.T, r *os.File) {
	t.Helper()
	_ = r.SetReadDeadline(time.Now().Add(testTimeout))
	var b [1]byte
	if n, err := r.Read(b[:]); n != 0 || err != io.EOF {
		t.Fatalf("read from pipe = %d, %v; want EOF (a received descriptor leaked)", n, err)
	}
}

type acceptResult struct {
	o   Options
	f   *os.File
	err error
}

// acceptAsync runs one Accept in the background.
func acceptAsync(ctx context.Context, l *Listener, accept func(Options, *os.File) error) <-chan acceptResult {
	c := make(chan acceptResult, 1)
	go func() {
		o, f, err := l.Accept(ctx, accept)
		c <- acceptResult{o, f, err}
	}()
	return c
}

func wait[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("no result within %v", testTimeout)
		panic("unreachable")
	}
}

// rawSend writes data with the descriptors in one sendmsg, half-closes and returns the reply.
func rawSend(t *testing.T, path string, data []byte, fds ...int) []byte {
	t.Helper()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(testTimeout))
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := conn.WriteMsgUnix(data, oob, nil); err != nil {
		t.Fatal(err)
	}
	_ = conn.CloseWrite()
	reply, _ := io.ReadAll(conn) // a refusal of an unread message ends with a reset
	return reply
}

var sample = Options{
	BucketName: "bkt",
	Args:       []string{"--allow-delete", "--force-path-style"},
	Env:        []string{"AWS_REGION=us-east-1", "AWS_PROFILE=s3-csi"},
}

func TestRoundTrip(t *testing.T) {
	ctx := testContext(t)
	l := listen(t)
	if fi, err := os.Lstat(l.Path()); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != SocketMode {
		t.Fatalf("socket %s: %v, %v; want a socket with mode %v", l.Path(), fi.Mode(), err, SocketMode)
	}
	r, w := pipe(t)
	res := acceptAsync(ctx, l, nil)
	if err := Send(ctx, l.Path(), sample, int(w.Fd())); err != nil {
		t.Fatalf("Send: %v", err)
	}
	w.Close()
	got := wait(t, res)
	if got.err != nil {
		t.Fatalf("Accept: %v", got.err)
	}
	if diff := cmp.Diff(sample, got.o); diff != "" {
		t.Fatalf("options (-sent +received):\n%s", diff)
	}
	// The received descriptor is a working copy of the sent one.
	if _, err := got.f.Write([]byte("through the copy")); err != nil {
		t.Fatal(err)
	}
	got.f.Close()
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "through the copy" {
		t.Fatalf("read = %q, %v", b, err)
	}
}

func TestAcceptRefusal(t *testing.T) {
	ctx := testContext(t)
	l := listen(t)
	r, w := pipe(t)
	called := false
	res := acceptAsync(ctx, l, func(o Options, f *os.File) error {
		called = true
		return errors.New("no thanks")
	})
	err := Send(ctx, l.Path(), sample, int(w.Fd()))
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "no thanks") {
		t.Fatalf("Send = %v, want ErrRejected with the reason", err)
	}
	got := wait(t, res)
	if !called || !errors.Is(got.err, ErrReceive) || got.f != nil {
		t.Fatalf("Accept = %v, %v (hook called: %v)", got.f, got.err, called)
	}
	w.Close()
	requireEOF(t, r)
}

func TestRefusedMessages(t *testing.T) {
	valid := []byte(`{"bucketName":"bkt"}`)
	for _, tc := range []struct {
		name  string
		data  []byte
		nfds  int
		err   error
		errSS string
	}{
		{"malformed JSON", []byte(`{"bucketName":`), 1, ErrMalformed, ""},
		{"unknown field", []byte(`{"bucketName":"bkt","extra":true}`), 1, ErrMalformed, `unknown field "extra"`},
		{"invalid bucket", []byte(`{"bucketName":"-x-"}`), 1, ErrInvalid, "bucket name"},
		{"oversized", []byte(`{"bucketName":"bkt","args":["--` + strings.Repeat("x", MaxMessageSize) + `"]}`), 1, ErrTooLarge, ""},
		{"zero fds", valid, 0, ErrNoFD, ""},
		{"two fds", valid, 2, ErrTooManyFDs, "got 2"},
		{"more fds than the control buffer holds", valid, maxFDsPerRead + 4, ErrTooManyFDs, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			l := listen(t)
			res := acceptAsync(ctx, l, func(Options, *os.File) error {
				t.Error("accept hook called for a refused message")
				return nil
			})
			var readers, writers []*os.File
			var fds []int
			for i := 0; i < tc.nfds; i++ {
				r, w := pipe(t)
				readers, writers = append(readers, r), append(writers, w)
				fds = append(fds, int(w.Fd()))
			}
			reply := rawSend(t, l.Path(), tc.data, fds...)
			got := wait(t, res)
			if !errors.Is(got.err, ErrReceive) || !errors.Is(got.err, tc.err) || !strings.Contains(got.err.Error(), tc.errSS) {
				t.Fatalf("Accept error = %v, want ErrReceive and %v containing %q", got.err, tc.err, tc.errSS)
			}
			if got.f != nil {
				t.Fatal("Accept returned a file with an error")
			}
			if len(reply) == 0 || reply[0] != Nak || !strings.Contains(string(reply[1:]), tc.err.Error()) {
				t.Fatalf("reply = %q, want Nak with the reason", reply)
			}
			// Every descriptor that reached the receiver is closed again.
			for i, r := range readers {
				writers[i].Close()
				requireEOF(t, r)
			}
		})
	}
}

func TestMessageInSeveralWrites(t *testing.T) {
	ctx := testContext(t)
	l := listen(t)
	r, w := pipe(t)
	res := acceptAsync(ctx, l, nil)
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: l.Path(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, _, err := conn.WriteMsgUnix([]byte(`{"bucketName":`), unix.UnixRights(int(w.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte(`"bkt"}`)); err != nil {
		t.Fatal(err)
	}
	_ = conn.CloseWrite()
	got := wait(t, res)
	if got.err != nil || got.o.BucketName != "bkt" {
		t.Fatalf("Accept = %+v, %v", got.o, got.err)
	}
	got.f.Close()
	w.Close()
	requireEOF(t, r)
}

func TestReceiveDeadline(t *testing.T) {
	l := listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res := acceptAsync(ctx, l, nil)
	conn, err := net.Dial("unix", l.Path()) // connects, never sends
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := wait(t, res)
	if !errors.Is(got.err, ErrReceive) || !errors.Is(got.err, os.ErrDeadlineExceeded) {
		t.Fatalf("Accept = %v, want ErrReceive and a deadline error", got.err)
	}
}

func TestAcceptCancelledThenAgain(t *testing.T) {
	l := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	res := acceptAsync(ctx, l, nil)
	cancel()
	if got := wait(t, res); !errors.Is(got.err, context.Canceled) || errors.Is(got.err, ErrReceive) {
		t.Fatalf("Accept after cancel = %v, want context.Canceled", got.err)
	}
	// The listener still works with a fresh context.
	ctx = testContext(t)
	res = acceptAsync(ctx, l, nil)
	_, w := pipe(t)
	if err := Send(ctx, l.Path(), sample, int(w.Fd())); err != nil {
		t.Fatal(err)
	}
	if got := wait(t, res); got.err != nil {
		t.Fatal(got.err)
	} else {
		got.f.Close()
	}
}

func TestSendDeadline(t *testing.T) {
	_, w := pipe(t)
	t.Run("nobody accepts", func(t *testing.T) {
		l := listen(t) // listening, never accepting: connect and write succeed, no reply
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if err := Send(ctx, l.Path(), sample, int(w.Fd())); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Send = %v, want context.DeadlineExceeded", err)
		}
	})
	t.Run("nobody listens", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		path := filepath.Join(t.TempDir(), SocketName)
		err := Send(ctx, path, sample, int(w.Fd()))
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no such file") {
			t.Fatalf("Send = %v, want context.DeadlineExceeded after ENOENT", err)
		}
	})
}

func TestSendNoAck(t *testing.T) {
	ctx := testContext(t)
	path := filepath.Join(t.TempDir(), SocketName)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = io.ReadAll(c)
			c.Close()
		}
	}()
	_, w := pipe(t)
	if err := Send(ctx, path, sample, int(w.Fd())); !errors.Is(err, ErrNoAck) {
		t.Fatalf("Send = %v, want ErrNoAck", err)
	}
}

// TestSendWaitsForListener covers a Mountpoint Pod that is not listening yet: first no
// socket (ENOENT), then a stale socket nobody listens on (ECONNREFUSED), then Listen replaces
// it and the pending Send goes through.
func TestSendWaitsForListener(t *testing.T) {
	ctx := testContext(t)
	path := filepath.Join(t.TempDir(), SocketName)
	_, w := pipe(t)
	sent := make(chan error, 1)
	go func() { sent <- Send(ctx, path, sample, int(w.Fd())) }()

	// A socket file that was bound but never listened on refuses connections.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	select {
	case err := <-sent:
		t.Fatalf("Send returned before anyone listened: %v", err)
	default:
	}
	l, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	defer l.Close()
	got := wait(t, acceptAsync(ctx, l, nil))
	if got.err != nil {
		t.Fatal(got.err)
	}
	got.f.Close()
	if err := wait(t, sent); err != nil {
		t.Fatalf("Send: %v", err)
	}
}

func TestSendLongPath(t *testing.T) {
	ctx := testContext(t)
	base := t.TempDir()
	long := filepath.Join(base, strings.Repeat("d", 100), strings.Repeat("e", 100))
	if err := os.MkdirAll(long, 0o755); err != nil {
		t.Fatal(err)
	}
	// Listen needs a short path: reach the long directory through a symbolic link.
	short := filepath.Join(base, "s")
	if err := os.Symlink(long, short); err != nil {
		t.Fatal(err)
	}
	l, err := Listen(filepath.Join(short, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	longPath := filepath.Join(long, SocketName)
	if len(longPath) <= maxSocketPath {
		t.Fatalf("test path is only %d bytes", len(longPath))
	}
	r, w := pipe(t)
	res := acceptAsync(ctx, l, nil)
	if err := Send(ctx, longPath, sample, int(w.Fd())); err != nil {
		t.Fatalf("Send to a %d-byte path: %v", len(longPath), err)
	}
	got := wait(t, res)
	if got.err != nil {
		t.Fatal(got.err)
	}
	got.f.Close()
	w.Close()
	requireEOF(t, r)

}

// TestSendRefusesLinks: a link in place of the socket (a compromised Mountpoint Pod pointing
// root at another socket of the host) is refused at once, not dialled.
func TestSendRefusesLinks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	elsewhere := t.TempDir()
	l, err := Listen(filepath.Join(elsewhere, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	res := acceptAsync(ctx, l, nil)
	comm := t.TempDir()
	if err := os.Symlink(filepath.Join(elsewhere, SocketName), filepath.Join(comm, SocketName)); err != nil {
		t.Fatal(err)
	}
	r, w := pipe(t)
	defer r.Close()
	defer w.Close()
	if err := Send(ctx, filepath.Join(comm, SocketName), sample, int(w.Fd())); !errors.Is(err, ErrNotSocket) {
		t.Fatalf("Send through a link = %v, want ErrNotSocket", err)
	}
	linkedDir := filepath.Join(t.TempDir(), "comm")
	if err := os.Symlink(elsewhere, linkedDir); err != nil {
		t.Fatal(err)
	}
	if err := Send(ctx, filepath.Join(linkedDir, SocketName), sample, int(w.Fd())); err == nil {
		t.Fatal("Send through a linked directory succeeded")
	}
	regular := filepath.Join(t.TempDir(), SocketName)
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Send(ctx, regular, sample, int(w.Fd())); !errors.Is(err, ErrNotSocket) {
		t.Fatalf("Send to a regular file = %v, want ErrNotSocket", err)
	}
	select {
	case got := <-res:
		t.Fatalf("the socket behind the link was dialled: %+v", got)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestListenErrors(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, strings.Repeat("x", 120))
	if _, err := Listen(long); !errors.Is(err, ErrPathTooLong) || !strings.Contains(err.Error(), "at most 107") {
		t.Errorf("Listen(long) = %v, want ErrPathTooLong naming the limit", err)
	}
	if _, err := Listen("relative.sock"); err == nil {
		t.Error("Listen(relative) succeeded")
	}
	file := filepath.Join(dir, "regular")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file); err == nil || !strings.Contains(err.Error(), "not a stale socket") {
		t.Errorf("Listen over a regular file = %v", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("the regular file was touched: %v", err)
	}
}

func TestListenerClose(t *testing.T) {
	l := listen(t)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := os.Lstat(l.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
	if _, _, err := l.Accept(testContext(t), nil); err == nil || errors.Is(err, ErrReceive) {
		t.Fatalf("Accept on a closed listener = %v", err)
	}
}

func TestSendRefusesLocally(t *testing.T) {
	ctx := testContext(t)
	path := filepath.Join(t.TempDir(), SocketName) // nobody listens: errors must come first
	big := sample
	big.Args = []string{}
	for i := 0; i < 100; i++ {
		big.Args = append(big.Args, "--"+strings.Repeat("x", 1000))
	}
	for _, tc := range []struct {
		name string
		path string
		o    Options
		fd   int
		err  error
	}{
		{"negative fd", path, sample, -1, ErrNoFD},
		{"invalid options", path, Options{BucketName: "x"}, 0, ErrInvalid},
		{"too large", path, big, 0, ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Send(ctx, tc.path, tc.o, tc.fd); !errors.Is(err, tc.err) {
				t.Fatalf("Send = %v, want %v", err, tc.err)
			}
		})
	}
	if err := Send(ctx, "relative.sock", sample, 0); err == nil {
		t.Fatal("Send to a relative path succeeded")
	}
}

// TestConcurrentSenders checks that each connection carries exactly its own message and
// descriptor when several senders race.
func TestConcurrentSenders(t *testing.T) {
	const n = 8
	ctx := testContext(t)
	l := listen(t)
	readers := map[string]*os.File{}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		r, w := pipe(t)
		o := sample
		o.BucketName = fmt.Sprintf("bucket-%d", i)
		readers[o.BucketName] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- Send(ctx, l.Path(), o, int(w.Fd()))
		}()
	}
	for i := 0; i < n; i++ {
		o, f, err := l.Accept(ctx, nil)
		if err != nil {
			t.Fatalf("Accept %d: %v", i, err)
		}
		if _, err := f.Write([]byte(o.BucketName)); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Send: %v", err)
		}
	}
	for name, r := range readers {
		b := make([]byte, 64)
		_ = r.SetReadDeadline(time.Now().Add(testTimeout))
		k, err := r.Read(b)
		if err != nil || string(b[:k]) != name {
			t.Errorf("pipe of %s got %q, %v", name, b[:k], err)
		}
	}
}

// TestDescriptorsSpreadOverWrites: descriptors sent with several parts of one message count
// together, and the receiver stops reading at the second one.
func TestDescriptorsSpreadOverWrites(t *testing.T) {
	ctx := testContext(t)
	l := listen(t)
	res := acceptAsync(ctx, l, nil)
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: l.Path(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var readers []*os.File
	for i, part := range []string{`{"bucketName"`, `:"bkt"`, `}`} {
		r, w := pipe(t)
		readers = append(readers, r)
		// The receiver may already have given up (and closed) before the last part.
		if _, _, err := conn.WriteMsgUnix([]byte(part), unix.UnixRights(int(w.Fd())), nil); err != nil && i < 2 {
			t.Fatalf("part %d: %v", i, err)
		}
		w.Close() // the descriptor in flight keeps the pipe open
	}
	_ = conn.CloseWrite()
	got := wait(t, res)
	if !errors.Is(got.err, ErrTooManyFDs) {
		t.Fatalf("Accept = %v, want ErrTooManyFDs", got.err)
	}
	conn.Close() // releases the descriptor the receiver never read
	for _, r := range readers {
		requireEOF(t, r)
	}
}
