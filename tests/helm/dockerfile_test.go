package helm

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// stage is one FROM ... AS name section of the Dockerfile, with its instructions (continuation
// lines joined).
type stage struct {
	name, from string
	lines      []string
}

// parseDockerfile is harness.ParseDockerfile (the parser the cluster rig reads the image's
// layout with), failing the test on an error.
func parseDockerfile(t *testing.T) []stage {
	t.Helper()
	parsed, err := harness.ParseDockerfile()
	if err != nil {
		t.Fatal(err)
	}
	stages := make([]stage, 0, len(parsed))
	for _, p := range parsed {
		stages = append(stages, stage{name: p.Name, from: p.From, lines: p.Instructions})
	}
	return stages
}

func stageNamed(t *testing.T, stages []stage, name string) stage {
	t.Helper()
	for _, s := range stages {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("Dockerfile has no stage %q", name)
	return stage{}
}

// cmdDirs lists the binaries of cmd/.
func cmdDirs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(harness.RepoRoot(), "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// helpDefault returns the default value of a flag as `<binary> -help` prints it.
func helpDefault(t *testing.T, binary, flag string) string {
	t.Helper()
	out, _ := runBinary(t, binary, "-help")
	m := regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(flag) + ` string\n\s+.*\(default "([^"]*)"\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("%s -help shows no default for -%s:\n%s", binary, flag, out)
	}
	return m[1]
}

var buildRE = regexp.MustCompile(`go build (.+) -o /out/(\S+) \./cmd/(\S+)$`)

// TestDockerfilePackaging checks, without a Docker engine, what the image contains: every
// binary of cmd/ built from it at /bin/, mount-s3 where install-mp and scality-csi-mounter look
// for it (their own flag defaults), a pinned and checksummed mount-s3, and every path the
// rendered chart runs.
func TestDockerfilePackaging(t *testing.T) {
	stages := parseDockerfile(t)
	final := stages[len(stages)-1]
	build := stageNamed(t, stages, "build")
	mp := stageNamed(t, stages, "mountpoint")

	// The build stage builds every cmd/ binary into /out/<name>.
	built := map[string]string{}
	for _, l := range build.lines {
		if m := buildRE.FindStringSubmatch(l); m != nil {
			if m[2] != m[3] {
				t.Errorf("build line names /out/%s for ./cmd/%s", m[2], m[3])
			}
			built[m[3]] = m[1]
		}
	}
	if diff := slices.Compare(keys(built), cmdDirs(t)); diff != 0 {
		t.Errorf("the build stage builds %v; cmd/ has %v", keys(built), cmdDirs(t))
	}
	env := strings.Join(slices.DeleteFunc(slices.Clone(build.lines), func(l string) bool { return !strings.HasPrefix(l, "ENV ") }), " ")
	if !strings.Contains(env, "CGO_ENABLED=0") {
		t.Errorf("binaries must be static (ENV CGO_ENABLED=0): %q", env)
	}

	// The final stage: what lands where.
	placed := map[string]bool{}
	copiesMountpoint := false
	for _, l := range final.lines {
		f := strings.Fields(l)
		if len(f) < 4 || f[0] != "COPY" {
			continue
		}
		from := strings.TrimPrefix(f[1], "--from=")
		srcs, dst := f[2:len(f)-1], f[len(f)-1]
		switch from {
		case "build":
			for _, s := range srcs {
				if !strings.HasSuffix(dst, "/") {
					t.Errorf("COPY %v %s: the destination must be a directory", srcs, dst)
				}
				placed[path.Join(dst, path.Base(s))] = true
			}
		case "mountpoint":
			if slices.Equal(srcs, []string{"/mountpoint-s3/"}) && dst == "/mountpoint-s3/" {
				copiesMountpoint = true
			}
		}
	}
	for _, c := range cmdDirs(t) {
		want := "/bin/" + c
		if c == "scality-fuse-helper" {
			want = "/mountpoint-s3/bin/" + c // install-mp copies it to the host with mount-s3
		}
		if !placed[want] {
			t.Errorf("the image lacks %s (placed: %v)", want, keys(placed))
		}
	}
	if !copiesMountpoint {
		t.Errorf("the final stage must copy /mountpoint-s3/ from the mountpoint stage")
	}

	// mount-s3: where install-mp copies from and where the mounter runs it, by their defaults.
	src := helpDefault(t, "install-mp", "source-dir")
	mounterPath := helpDefault(t, "scality-csi-mounter", "mount-s3-path")
	if mounterPath != path.Join(src, "mount-s3") || !strings.HasPrefix(src, "/mountpoint-s3/") {
		t.Errorf("install-mp copies %s, scality-csi-mounter runs %s: the image has /mountpoint-s3/bin/mount-s3", src, mounterPath)
	}
	mpText := strings.Join(mp.lines, "\n")
	for _, want := range []string{
		"/mountpoint-s3/bin/mount-s3",           // installed there
		`sha256sum -c`,                          // checked
		`patchelf --set-rpath '$ORIGIN'`,        // finds its bundled libraries
		"libfuse.so.2",                          // bundled
		"/mountpoint-s3/bin/mount-s3 --version", // runs
		"https://s3.amazonaws.com/mountpoint-s3-release/${MOUNTPOINT_VERSION}/", // the release
	} {
		if !strings.Contains(mpText, want) {
			t.Errorf("the mountpoint stage lacks %q", want)
		}
	}
	args := map[string]string{}
	for _, l := range mp.lines {
		if k, v, ok := strings.Cut(strings.TrimPrefix(l, "ARG "), "="); ok && strings.HasPrefix(l, "ARG ") {
			args[k] = v
		}
	}
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(args["MOUNTPOINT_VERSION"]) {
		t.Errorf("mount-s3 must be pinned to a version: MOUNTPOINT_VERSION=%q", args["MOUNTPOINT_VERSION"])
	}
	for _, a := range []string{"MOUNTPOINT_SHA256_AMD64", "MOUNTPOINT_SHA256_ARM64"} {
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(args[a]) {
			t.Errorf("%s=%q is not a SHA-256", a, args[a])
		}
	}

	// Every path the chart runs is in the image.
	inImage := func(p string) bool {
		return placed[p] || (copiesMountpoint && strings.HasPrefix(p, "/mountpoint-s3/"))
	}
	for _, m := range modes {
		_, objs := m.render(t)
		for _, o := range objs {
			if o.GetKind() != "DaemonSet" && o.GetKind() != "Deployment" {
				continue
			}
			spec := typedPodSpec(t, o.Object)
			for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
				if _, ok := ourBinary(c.Command); !ok {
					continue
				}
				if !inImage(c.Command[0]) {
					t.Errorf("%s: %s/%s runs %s, not in the image", m.name, o.GetName(), c.Name, c.Command[0])
				}
				for _, flag := range []string{"mountpoint-command", "source-dir"} {
					if v, ok := flagValue(c.Args, flag); ok && !inImage(v) && !inImage(v+"/mount-s3") {
						t.Errorf("%s: %s/%s --%s=%s is not in the image", m.name, o.GetName(), c.Name, flag, v)
					}
				}
				if v, ok := flagValue(c.Args, "mountpoint-image"); ok && v != c.Image {
					t.Errorf("%s: Mountpoint Pods run %s, the controller %s: both must be the driver image", m.name, v, c.Image)
				}
			}
		}
	}
}

// dockerignore is the build context filter: docker's rules, the last matching pattern wins, a
// pattern matches a path or any of its parent directories, ** spans directories.
type dockerignore []struct {
	re     *regexp.Regexp
	negate bool
}

func loadDockerignore(t *testing.T) dockerignore {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(harness.RepoRoot(), ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var di dockerignore
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		neg := strings.HasPrefix(line, "!")
		p := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(line, "!"), "/"), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(p); i++ {
			switch {
			case strings.HasPrefix(p[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(p[i:], "**"):
				re.WriteString(".*")
				i++
			case p[i] == '*':
				re.WriteString("[^/]*")
			case p[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(p[i : i+1]))
			}
		}
		re.WriteString("$")
		di = append(di, struct {
			re     *regexp.Regexp
			negate bool
		}{regexp.MustCompile(re.String()), neg})
	}
	return di
}

func (di dockerignore) excluded(rel string) bool {
	excluded := false
	for _, p := range di {
		match := false
		for dir := rel; dir != "." && dir != "/"; dir = path.Dir(dir) {
			if p.re.MatchString(dir) {
				match = true
				break
			}
		}
		if match {
			excluded = !p.negate
		}
	}
	return excluded
}

// TestDockerBuildContext copies what .dockerignore lets into the build context and builds every
// cmd/ binary there with the Dockerfile's flags: a file the build needs but the context lacks,
// or a wrong version -X path, fails here rather than in CI's image build.
func TestDockerBuildContext(t *testing.T) {
	stages := parseDockerfile(t)
	build := stageNamed(t, stages, "build")
	var ldflags string
	for _, l := range build.lines {
		if v, ok := strings.CutPrefix(l, `ENV GO_LDFLAGS="`); ok {
			ldflags = strings.TrimSuffix(v, `"`)
		}
	}
	if ldflags == "" || !strings.Contains(ldflags, "${VERSION}") {
		t.Fatalf("no GO_LDFLAGS with ${VERSION} in the build stage")
	}
	ldflags = strings.ReplaceAll(ldflags, "${VERSION}", "v0.0.0-context-test")
	var buildFlags string
	for _, l := range build.lines {
		if m := buildRE.FindStringSubmatch(l); m != nil {
			if buildFlags != "" && m[1] != buildFlags {
				t.Errorf("binaries are built with different flags: %q and %q", buildFlags, m[1])
			}
			buildFlags = m[1]
		}
	}
	if buildFlags != `-trimpath -ldflags "${GO_LDFLAGS}"` {
		t.Fatalf("build flags %q: update this test with the Dockerfile", buildFlags)
	}

	di := loadDockerignore(t)
	root := harness.RepoRoot()
	ctxDir := t.TempDir()
	var copied int
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		if d.IsDir() {
			if rel == ".git" || rel == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		if di.excluded(filepath.ToSlash(rel)) || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		dst := filepath.Join(ctxDir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		copied++
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"go.mod", "go.sum"} {
		if _, err := os.Stat(filepath.Join(ctxDir, must)); err != nil {
			t.Fatalf("the build context lacks %s", must)
		}
	}
	for _, mustNot := range []string{"tests", "docs", "charts", "Dockerfile"} {
		if _, err := os.Stat(filepath.Join(ctxDir, mustNot)); err == nil {
			t.Errorf("the build context includes %s: .dockerignore lets too much in", mustNot)
		}
	}

	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	goArgs := []string{"build", "-trimpath", "-ldflags", ldflags, "-o", out + "/"}
	for _, c := range cmdDirs(t) {
		goArgs = append(goArgs, "./cmd/"+c)
	}
	cmd := exec.CommandContext(ctx, "go", goArgs...)
	cmd.Dir = ctxDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build in the build context (%d files): %v\n%s", copied, err, b)
	}
	for _, c := range cmdDirs(t) {
		bin := filepath.Join(out, c)
		if _, err := os.Stat(bin); err != nil {
			t.Errorf("%s was not built", c)
			continue
		}
		if c == "install-mp" {
			continue // no --version (yet)
		}
		b, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(b), "v0.0.0-context-test") {
			t.Errorf("%s --version = %q (%v): the -X version path of the Dockerfile is wrong", c, b, err)
		}
	}
}
