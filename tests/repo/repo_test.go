// Package repo checks what git tracks in the repository: source, never build outputs. A binary
// was committed at the repository root once (a `go build ./cmd/scality-fuse-helper` there);
// these tests fail on any tracked ELF file, on any tracked file where .gitignore says build
// outputs go, and on a .gitignore that no longer covers where the binaries get built.
package repo

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// git runs git in the repository root and returns its standard output; the test is skipped
// when the tree is not a git checkout (a source tarball).
func git(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = harness.RepoRoot()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if _, lerr := exec.LookPath("git"); lerr != nil {
			t.Skip("git is not installed: what is tracked cannot be read")
		}
		if strings.Contains(stderr.String(), "not a git repository") {
			t.Skip("not a git checkout: nothing is tracked")
		}
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// nulList splits git's -z output.
func nulList(b []byte) []string {
	var out []string
	for _, s := range strings.Split(string(b), "\x00") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// isELF reports whether the file at p starts with the ELF magic number (every Linux binary
// go build writes, static or not).
func isELF(p string) (bool, error) {
	f, err := os.Open(p) //nolint:gosec // G304: a tracked file of the repository
	if err != nil {
		return false, err
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return false, nil // shorter than the magic number
		}
		return false, err
	}
	return bytes.Equal(magic, []byte("\x7fELF")), nil
}

// TestIsELF checks the detector itself: the running test binary is an ELF file, this source
// file is not.
func TestIsELF(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{self: true, "repo_test.go": false} {
		got, err := isELF(p)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("isELF(%s) = %v, want %v", p, got, want)
		}
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := isELF(empty); err != nil || got {
		t.Errorf("isELF(an empty file) = %v, %v; want false, nil", got, err)
	}
}

// TestNoTrackedBinaries fails on a tracked ELF file (staged or committed): binaries are built
// by make into bin/ and by the Dockerfile into the image, never committed.
func TestNoTrackedBinaries(t *testing.T) {
	root := harness.RepoRoot()
	files := nulList(git(t, "ls-files", "-z", "--cached"))
	if len(files) == 0 {
		t.Fatal("git ls-files lists nothing")
	}
	for _, f := range files {
		p := filepath.Join(root, f)
		st, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		elf, err := isELF(p)
		if err != nil {
			t.Fatal(err)
		}
		if elf {
			t.Errorf("%s is a binary (ELF) tracked by git: remove it (git rm --cached %s) and let make build it into bin/", f, f)
		}
	}
}

// TestNoTrackedBuildOutputs fails on a tracked file that .gitignore places among build outputs
// (bin/, a binary of cmd/ at the root, a test binary): one that was added before the pattern
// existed, or with git add -f.
func TestNoTrackedBuildOutputs(t *testing.T) {
	for _, f := range nulList(git(t, "ls-files", "-z", "--cached", "--ignored", "--exclude-standard")) {
		t.Errorf("%s is tracked but sits where build outputs go (.gitignore): git rm --cached %s", f, f)
	}
}

var commandsRE = regexp.MustCompile(`(?m)^COMMANDS := (.+)$`)

// TestGitignoreCoversBinaries checks that .gitignore keeps every binary the project builds out
// of git wherever go build or make writes it: bin/ (make), the repository root (go build
// ./cmd/<name> there) and the command's own directory (go build inside cmd/<name>), for every
// binary of cmd/ and of the Makefile's COMMANDS, and the mount-s3 stand-in.
func TestGitignoreCoversBinaries(t *testing.T) {
	root := harness.RepoRoot()
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := commandsRE.FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile has no COMMANDS := line: update this test with it")
	}
	names := strings.Fields(string(m[1]))
	entries, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !slices.Contains(names, e.Name()) {
			names = append(names, e.Name())
		}
	}
	var paths []string
	for _, n := range names {
		paths = append(paths, n, "bin/"+n, "cmd/"+n+"/"+n)
	}
	paths = append(paths, "bin/mount-s3", "mount-s3", "tests/mounts3/mounts3", "bin/cluster.test", "tests/helm/helm.test")
	for _, p := range paths {
		// --no-index: the patterns alone, whether or not such a file is tracked.
		cmd := exec.Command("git", "check-ignore", "--no-index", "-q", p)
		cmd.Dir = root
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exit) && exit.ExitCode() == 1:
			t.Errorf("%s is not ignored by .gitignore: a binary built there could be committed", p)
		default:
			git(t, "rev-parse", "--git-dir") // skips outside a checkout
			t.Fatalf("git check-ignore %s: %v", p, err)
		}
	}
}
