// Package vm is the virtual machine rig of systemd mode: a Debian guest with systemd as PID 1
// on the unified cgroup v2 hierarchy (built by tests/tools/vm-image.sh), booted once per test
// package under qemu, in which the node plugin talks to PID 1 over /run/systemd/private as
// the chart's node plugin does on a node. The host drives the guest through the agent of
// tests/vm/agent (protocol: tests/vm/vmproto); the checks themselves run inside the guest as
// the test binary of tests/vm/guest.
//
// The guest has no network device: the S3 server runs inside it on its loopback, so no test
// traffic leaves the guest.
package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/s3csi/s3-csi-driver/tests/vm/vmproto"
)

// Image is a built image directory (vm-image.sh's output).
type Image struct {
	Dir string // holds disk.img, vmlinuz, initrd.img, cmdline
}

// Options configure Boot.
type Options struct {
	// Image is the image to boot (snapshot=on: the guest's writes never reach disk.img).
	Image Image
	// BinDir is a directory whose files become the guest's read-only /opt/s3csi (it must hold
	// vm-agent).
	BinDir string
	// WorkDir receives the binaries disk, the console log and the agent's socket.
	WorkDir string
	// MemoryMiB is the guest's memory (default 1024).
	MemoryMiB int
}

// VM is a running guest. Run may be called from several goroutines.
type VM struct {
	// ConsoleLog is the file the guest's first serial port (kernel and systemd) writes to.
	ConsoleLog string
	// BootSeconds is the time from starting qemu to the agent's first answer.
	BootSeconds float64

	cmd     *exec.Cmd
	done    chan struct{}
	conn    net.Conn
	mu      sync.Mutex // serialises writes to conn and guards next and waiting
	next    uint64
	waiting map[uint64]chan vmproto.Response
}

// KVMUsable reports whether hardware virtualisation can be used: the CPU flags show vmx or
// svm and the paravirtual kvm_pvm module (whose /dev/kvm qemu cannot use) is absent.
func KVMUsable() bool {
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		return false
	}
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "flags") {
			for _, f := range strings.Fields(line) {
				if f == "vmx" || f == "svm" {
					return true
				}
			}
		}
	}
	return false
}

// MakeDisk writes an ext4 image at path holding the files of dir (mkfs.ext4 -d), sized for
// them plus 64 MiB.
func MakeDisk(dir, path string) error {
	var size int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			size += fi.Size()
		}
		return err
	})
	if err != nil {
		return err
	}
	mib := size>>20 + 64
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-L", "s3csi-bin", "-d", dir, path, fmt.Sprintf("%dM", mib)).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 -d %s: %v: %s", dir, err, out)
	}
	return nil
}

// Boot makes the binaries disk, starts qemu and waits (up to bootTimeout) until the agent
// answers a ping. On error nothing is left running. Close stops the guest.
func Boot(o Options, bootTimeout time.Duration) (*VM, error) {
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 1024
	}
	cmdline, err := os.ReadFile(filepath.Join(o.Image.Dir, "cmdline"))
	if err != nil {
		return nil, err
	}
	bins := filepath.Join(o.WorkDir, "bin.img")
	if err := MakeDisk(o.BinDir, bins); err != nil {
		return nil, err
	}
	sock := filepath.Join(o.WorkDir, "agent.sock")
	v := &VM{ConsoleLog: filepath.Join(o.WorkDir, "console.log"), done: make(chan struct{}), waiting: map[uint64]chan vmproto.Response{}}
	accel := []string{"-accel", "tcg,tb-size=128", "-cpu", "qemu64"}
	if KVMUsable() {
		accel = []string{"-accel", "kvm", "-cpu", "host"}
	}
	args := append(accel,
		"-smp", "1", "-m", fmt.Sprint(o.MemoryMiB), "-nodefaults", "-vga", "none", "-display", "none",
		// No -no-reboot: a guest reboot (Reboot) stays in this qemu process, so the snapshot
		// disk keeps what the guest wrote before it, as a node's disk does.
		"-nic", "none",
		"-kernel", filepath.Join(o.Image.Dir, "vmlinuz"), "-initrd", filepath.Join(o.Image.Dir, "initrd.img"),
		"-append", strings.TrimSpace(string(cmdline)),
		"-drive", "file="+filepath.Join(o.Image.Dir, "disk.img")+",if=virtio,format=raw,snapshot=on",
		"-drive", "file="+bins+",if=virtio,format=raw,readonly=on",
		"-serial", "file:"+v.ConsoleLog,
		"-chardev", "socket,id=agent,path="+sock+",server=on,wait=off",
		"-device", "virtio-serial-pci", "-device", "virtserialport,chardev=agent,name="+vmproto.PortName,
	)
	v.cmd = exec.Command("qemu-system-x86_64", args...)
	qlog, err := os.Create(filepath.Join(o.WorkDir, "qemu.log"))
	if err != nil {
		return nil, err
	}
	defer qlog.Close()
	v.cmd.Stdout, v.cmd.Stderr = qlog, qlog
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := v.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	go func() { _ = v.cmd.Wait(); close(v.done) }()
	if err := v.connect(sock, start.Add(bootTimeout)); err != nil {
		v.Close()
		return nil, err
	}
	v.BootSeconds = time.Since(start).Seconds()
	return v, nil
}

// connect dials qemu's socket and pings the agent every 2 s until one ping is answered.
func (v *VM) connect(sock string, deadline time.Time) error {
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			v.conn = c
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("qemu's agent socket: %w", err)
		}
		select {
		case <-v.done:
			return errors.New("qemu exited during start-up (see qemu.log)")
		case <-time.After(50 * time.Millisecond):
		}
	}
	go v.readLoop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := v.Run(ctx, nil)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer from the guest agent before the boot deadline: %w", err)
		}
		select {
		case <-v.done:
			return errors.New("qemu exited during boot (see console.log)")
		default:
		}
	}
}

// readLoop hands each response to the Run call waiting for its ID; responses of calls that
// gave up are dropped.
func (v *VM) readLoop() {
	rd := bufio.NewReaderSize(v.conn, 1<<20)
	for {
		line, err := rd.ReadBytes('\n')
		if err != nil {
			v.mu.Lock()
			for id, ch := range v.waiting {
				close(ch)
				delete(v.waiting, id)
			}
			v.mu.Unlock()
			return
		}
		var r vmproto.Response
		if json.Unmarshal(line, &r) != nil {
			continue
		}
		v.mu.Lock()
		ch := v.waiting[r.ID]
		delete(v.waiting, r.ID)
		v.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}

// Result is a finished command of the guest.
type Result = vmproto.Response

// Run runs argv in the guest (as root, in the root mount namespace, PATH starting with
// /opt/s3csi) with env added, and returns its result once it ended. The error is about the
// channel (ctx ended, guest gone), never about the command: check Result.Exit. The command
// is killed in the guest when ctx's deadline (rounded up to seconds) passes.
func (v *VM) Run(ctx context.Context, argv []string, env ...string) (Result, error) {
	req := vmproto.Request{Argv: argv, Env: env}
	if d, ok := ctx.Deadline(); ok {
		req.TimeoutSeconds = int(time.Until(d)/time.Second) + 1
	}
	ch := make(chan vmproto.Response, 1)
	v.mu.Lock()
	v.next++
	req.ID = v.next
	v.waiting[req.ID] = ch
	b, _ := json.Marshal(req)
	_, err := v.conn.Write(append(b, '\n'))
	v.mu.Unlock()
	if err != nil {
		return Result{}, fmt.Errorf("send to the guest agent: %w", err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return Result{}, errors.New("the guest agent's connection closed")
		}
		return r, nil
	case <-ctx.Done():
		v.mu.Lock()
		delete(v.waiting, req.ID)
		v.mu.Unlock()
		return Result{}, ctx.Err()
	case <-v.done:
		return Result{}, errors.New("qemu exited")
	}
}

// Reboot reboots the guest as an operator reboots a node (systemctl reboot: PID 1 stops every
// unit, unmounts, and the kernel restarts) and waits, up to timeout, until the agent of the new
// boot (another /proc/sys/kernel/random/boot_id) answers. It returns how long that took.
func (v *VM) Reboot(timeout time.Duration) (float64, error) {
	before, err := v.bootID(30 * time.Second)
	if err != nil {
		return 0, fmt.Errorf("boot ID before the reboot: %w", err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	r, err := v.Run(ctx, []string{"systemctl", "--no-block", "reboot"})
	cancel()
	// The answer can be lost when the agent stops first; an answer must be a success.
	if err == nil && r.Exit != 0 {
		return 0, fmt.Errorf("systemctl reboot: exit %d: %s%s", r.Exit, r.Stdout, r.Stderr)
	}
	for deadline := start.Add(timeout); time.Now().Before(deadline); {
		if id, err := v.bootID(2 * time.Second); err == nil && id != before {
			return time.Since(start).Seconds(), nil
		}
		select {
		case <-v.done:
			return 0, errors.New("qemu exited during the reboot (see console.log)")
		case <-time.After(time.Second):
		}
	}
	return 0, fmt.Errorf("no answer from the guest's next boot within %v", timeout)
}

func (v *VM) bootID(timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r, err := v.Run(ctx, []string{"cat", "/proc/sys/kernel/random/boot_id"})
	if err != nil {
		return "", err
	}
	if r.Exit != 0 {
		return "", fmt.Errorf("cat boot_id: exit %d %s", r.Exit, r.Stderr)
	}
	return strings.TrimSpace(string(r.Stdout)), nil
}

// RSSKiB returns qemu's resident set size (VmHWM: its peak) in KiB, or 0 when unknown.
func (v *VM) RSSKiB() (peak int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", v.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			_, _ = fmt.Sscanf(strings.TrimPrefix(line, "VmHWM:"), "%d", &peak)
		}
	}
	return peak
}

// Close powers the guest off (kills qemu: the image is a snapshot, nothing is lost) and waits
// for qemu to exit. Safe to call twice.
func (v *VM) Close() {
	if v.conn != nil {
		v.conn.Close()
	}
	if v.cmd != nil && v.cmd.Process != nil {
		_ = v.cmd.Process.Kill()
		<-v.done
	}
}
