// Command vm-agent runs inside the VM rig's guest (started by the image's s3csi-agent.service
// as root, in the root mount namespace, a child of PID 1) and runs the commands the host sends
// over the virtio serial port named vmproto.PortName, answering each with its exit status and
// output (protocol: tests/vm/vmproto).
//
// The port reads end-of-file while no host is connected; the agent then waits and reads
// again, so a host may connect, disconnect and reconnect at any time. A line that is not a
// Request is answered with ID 0 and an Error, never dropped silently.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/s3csi/s3-csi-driver/tests/vm/vmproto"
)

// basePath is every command's PATH; the binaries disk comes first.
const basePath = "PATH=/opt/s3csi:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func main() {
	port, err := openPort()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vm-agent:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "vm-agent: serving on", port.Name())
	var mu sync.Mutex
	send := func(r vmproto.Response) {
		b, _ := json.Marshal(r)
		mu.Lock()
		defer mu.Unlock()
		if _, err := port.Write(append(b, '\n')); err != nil {
			fmt.Fprintln(os.Stderr, "vm-agent: write:", err)
		}
	}
	rd := bufio.NewReaderSize(port, 1<<20)
	for {
		line, err := rd.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			var req vmproto.Request
			if jerr := json.Unmarshal(line, &req); jerr != nil {
				send(vmproto.Response{Exit: -1, Error: "bad request: " + jerr.Error()})
			} else {
				go func() { send(run(req)) }()
			}
			continue
		}
		// A partial line at end-of-file is a host that went away mid-request: drop it.
		if errors.Is(err, io.EOF) || err == nil {
			time.Sleep(100 * time.Millisecond)
			rd.Reset(port)
			continue
		}
		fmt.Fprintln(os.Stderr, "vm-agent: read:", err)
		os.Exit(1)
	}
}

// openPort opens the agent's port, waiting up to ten minutes for it. It finds the port by
// its name in /sys/class/virtio-ports and opens the kernel's own node (/dev/vportNpM), not
// udev's symlink: udev's coldplug takes minutes under emulation, the node is there as soon as
// virtio_console probed the port.
func openPort() (*os.File, error) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, n := range names {
			if b, err := os.ReadFile(n); err == nil && strings.TrimSpace(string(b)) == vmproto.PortName {
				if f, err := os.OpenFile("/dev/"+filepath.Base(filepath.Dir(n)), os.O_RDWR, 0); err == nil {
					return f, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no virtio port named %s", vmproto.PortName)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// run executes one request in a process group of its own and kills the group at the timeout.
func run(req vmproto.Request) vmproto.Response {
	resp := vmproto.Response{ID: req.ID}
	if len(req.Argv) == 0 {
		return resp
	}
	timeout := time.Duration(req.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = 600 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, req.Argv[0], req.Argv[1:]...)
	cmd.Env = append([]string{basePath, "HOME=/root", "LANG=C.UTF-8"}, req.Env...)
	cmd.Dir = req.Dir
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Output of children that outlive the command must not hold the answer back.
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	resp.Seconds = time.Since(start).Seconds()
	resp.Stdout, resp.Stderr = stdout.Bytes(), stderr.Bytes()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		resp.Exit = exitErr.ExitCode()
		if ctx.Err() != nil {
			resp.Error = fmt.Sprintf("killed after the %s timeout", timeout)
		} else if resp.Exit < 0 {
			resp.Error = exitErr.String()
		}
	default:
		resp.Exit, resp.Error = -1, err.Error()
	}
	return resp
}

// lockedBuffer is an output buffer safe for the two copying goroutines of exec.Cmd.
type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// Bytes returns a copy of what was written so far.
func (b *lockedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf...)
}
