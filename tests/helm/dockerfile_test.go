package helm

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"maps"
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

// awsKeyFingerprints are the fingerprints AWS's install guide lists for the key that signs
// Mountpoint for Amazon S3 releases (awslabs/mountpoint-s3@58817cab2fc3020a422d8aa14049a86b296f4498
// :doc/INSTALL.md, "Verifying the signature of the Mountpoint for Amazon S3 package"; the same on
// https://docs.aws.amazon.com/AmazonS3/latest/userguide/mountpoint-installation.html): the
// current key, and the older one that signed releases before v1.22.2.
var awsKeyFingerprints = map[string]string{
	"8AEFE705EBE329C0948C75A66F1C3B3AEF4B030B": "current",
	"673FE4061506BB469A0EF857BE397A52B086DA5A": "older key",
}

// awsKeysURL is where that guide says the public key is.
const awsKeysURL = "https://s3.amazonaws.com/mountpoint-s3-release/public_keys/KEYS"

// rawInstruction is one instruction of a stage as docker runs it: continuation lines joined with
// their backslash and newline removed and nothing else changed (harness.ParseDockerfile also
// collapses whitespace, which a shell script cannot afford: sha256sum -c needs its two spaces).
type rawInstruction struct{ keyword, rest string }

// rawStage returns the instructions of the Dockerfile's stage name.
func rawStage(t *testing.T, name string) []rawInstruction {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var (
		out     []rawInstruction
		cur     strings.Builder
		inStage bool
	)
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue // docker drops comment lines, within a continued instruction too
		}
		if body, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(body)
			continue
		}
		cur.WriteString(line)
		instr := strings.TrimSpace(cur.String())
		cur.Reset()
		keyword, rest, _ := strings.Cut(instr, " ")
		if strings.EqualFold(keyword, "FROM") {
			if inStage {
				break
			}
			inStage = strings.HasSuffix(rest, " AS "+name)
			continue
		}
		if inStage {
			out = append(out, rawInstruction{strings.ToUpper(keyword), strings.TrimSpace(rest)})
		}
	}
	if len(out) == 0 {
		t.Fatalf("the Dockerfile has no stage %q", name)
	}
	return out
}

// mountS3Steps finds, in the mountpoint stage, the RUN that downloads and verifies the tarball,
// the WORKDIR it runs in and the RUN that extracts it, and the stage's ARG defaults; it fails
// the test unless the verification comes before anything reads the tarball.
func mountS3Steps(t *testing.T) (verify string, args map[string]string) {
	t.Helper()
	instrs := rawStage(t, "mountpoint")
	args = map[string]string{}
	verifyAt, extractAt, workdirAt := -1, -1, -1
	for i, in := range instrs {
		switch in.keyword {
		case "ARG":
			if k, v, ok := strings.Cut(in.rest, "="); ok {
				args[k] = v
			}
		case "WORKDIR":
			if verifyAt < 0 {
				workdirAt = i
			}
		case "RUN":
			switch {
			case strings.Contains(in.rest, "gpg ") && strings.Contains(in.rest, "--verify"):
				if verifyAt >= 0 {
					t.Fatalf("two RUN steps verify signatures: update this test with the Dockerfile")
				}
				verifyAt, verify = i, in.rest
			case strings.Contains(in.rest, "mount-s3.tar.gz"):
				if verifyAt < 0 {
					t.Errorf("RUN %q uses the tarball before its signature and checksum are verified", in.rest)
				}
				if strings.Contains(in.rest, "tar -x") {
					extractAt = i
				}
			}
		}
	}
	switch {
	case verifyAt < 0:
		t.Fatal("the mountpoint stage has no RUN with gpg --verify: the mount-s3 tarball is not checked against AWS's signature")
	case extractAt < 0:
		t.Fatal("the mountpoint stage has no RUN extracting mount-s3.tar.gz (tar -x) after the verification")
	case workdirAt < 0:
		t.Fatal("the verification runs in no WORKDIR: it writes relative paths")
	}
	if strings.Contains(verify, "tar -x") || strings.Contains(verify, "tar x") {
		t.Errorf("the verification step extracts the tarball itself: extract only in a later step, once every check passed")
	}
	if !strings.HasPrefix(verify, "set -eu;") {
		t.Errorf("the verification step must start with set -eu (a failed command must fail the build): %.40q", verify)
	}
	return verify, args
}

// TestDockerfileMountS3Pins checks what the verification of mount-s3 is pinned to: a version,
// a SHA-256 per architecture, AWS's key URL and the full fingerprint of a key AWS lists, the
// gpg commands of AWS's guide with them, in the order that makes any failure fail the build.
func TestDockerfileMountS3Pins(t *testing.T) {
	verify, args := mountS3Steps(t)
	fpr := args["MOUNTPOINT_KEY_FINGERPRINT"]
	if !regexp.MustCompile(`^[0-9A-F]{40}$`).MatchString(fpr) {
		t.Errorf("MOUNTPOINT_KEY_FINGERPRINT=%q must be a full fingerprint (40 upper-case hex digits, as gpg --with-colons prints it), not a key id", fpr)
	} else if _, ok := awsKeyFingerprints[fpr]; !ok {
		t.Errorf("MOUNTPOINT_KEY_FINGERPRINT=%s is none of the fingerprints AWS's install guide lists (%v)", fpr, keys(awsKeyFingerprints))
	} else if awsKeyFingerprints[fpr] != "current" {
		t.Errorf("MOUNTPOINT_KEY_FINGERPRINT=%s is AWS's %s; releases since v1.22.2 are signed with the current one", fpr, awsKeyFingerprints[fpr])
	}
	if got := args["MOUNTPOINT_KEYS_URL"]; got != awsKeysURL {
		t.Errorf("MOUNTPOINT_KEYS_URL=%q; AWS's install guide publishes the key at %s", got, awsKeysURL)
	}
	// In this order: fetch, import, fingerprint, signature, signer, checksum.
	order := []string{
		`curl -fsSL --retry 3 -o mount-s3.tar.gz "${url}"`,
		`curl -fsSL --retry 3 -o mount-s3.tar.gz.asc "${url}.asc"`,
		`curl -fsSL --retry 3 -o KEYS "${MOUNTPOINT_KEYS_URL}"`,
		`gpg --batch --no-autostart --quiet --import KEYS`,
		`grep -qx "${MOUNTPOINT_KEY_FINGERPRINT}"`,
		`gpg --batch --no-autostart --status-file gpg.status --verify mount-s3.tar.gz.asc mount-s3.tar.gz`,
		`VALIDSIG`,
		`sha256sum -c`,
	}
	at := 0
	for _, want := range order {
		i := strings.Index(verify[at:], want)
		if i < 0 {
			t.Errorf("the verification step lacks %q after %q", want, verify[:at][max(0, at-40):])
			continue
		}
		at += i + len(want)
	}
	// The stage installs gpg without its agent (--no-install-recommends): a gpg call that
	// starts one fails (gpg --import exits 2 when the agent cannot start, the key imported).
	for _, call := range regexp.MustCompile(`gpg [^;|]*`).FindAllString(verify, -1) {
		if !strings.Contains(call, "--no-autostart") {
			t.Errorf("%q may start gpg-agent, which the stage does not install: add --no-autostart", call)
		}
	}
	for _, l := range rawStage(t, "mountpoint") {
		if l.keyword == "RUN" && strings.Contains(l.rest, "apt-get install") && !regexp.MustCompile(`\sgpg\s`).MatchString(l.rest) {
			t.Errorf("the mountpoint stage installs no gpg: %q", l.rest)
		}
	}
}

// fakeCurl plays curl as the Dockerfile calls it (-fsSL --retry 3 -o FILE URL): it serves the
// files of $FAKE_CURL_DIR by the SHA-256 of their URL, fails as curl -f does (22) for any other
// URL, and logs every URL asked for.
const fakeCurl = `#!/bin/sh
out=; url=
while [ $# -gt 0 ]; do
  case "$1" in
    -o|--retry) [ "$1" = -o ] && out=$2; shift 2 ;;
    -*) shift ;;
    *) url=$1; shift ;;
  esac
done
echo "$url" >>"$FAKE_CURL_DIR/requests"
f="$FAKE_CURL_DIR/$(printf %s "$url" | sha256sum | cut -c1-64)"
[ -f "$f" ] || { echo "curl: (22) The requested URL returned error: 404 ($url)" >&2; exit 22; }
cp "$f" "$out"
`

// gpgKey is a signing key made for the test, in a keyring of its own.
type gpgKey struct {
	home, fpr string
	public    []byte // armored, as a KEYS file holds it
}

func gpgRun(t *testing.T, home string, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("gpg", append([]string{"--batch", "--pinentry-mode", "loopback", "--passphrase", ""}, args...)...)
	cmd.Env = append(os.Environ(), "GNUPGHOME="+home)
	if stdin != nil {
		cmd.Stdin = strings.NewReader(string(stdin))
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gpg %v: %v\n%s", args, err, stderr.String())
	}
	return out
}

// newGPGKey makes an ed25519 signing key for uid in a new keyring (its agent stopped at the
// end of the test).
func newGPGKey(t *testing.T, uid string) gpgKey {
	t.Helper()
	home, err := os.MkdirTemp("", "gpg") // short: the agent's socket path is bounded
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kill := exec.Command("gpgconf", "--kill", "gpg-agent")
		kill.Env = append(os.Environ(), "GNUPGHOME="+home)
		_ = kill.Run()
		_ = os.RemoveAll(home)
	})
	gpgRun(t, home, nil, "--quick-generate-key", uid, "ed25519", "sign", "never")
	var fpr string
	for _, l := range strings.Split(string(gpgRun(t, home, nil, "--with-colons", "--fingerprint")), "\n") {
		if f := strings.Split(l, ":"); len(f) > 9 && f[0] == "fpr" && fpr == "" {
			fpr = f[9]
		}
	}
	if fpr == "" {
		t.Fatal("no fingerprint for the key just made")
	}
	return gpgKey{home: home, fpr: fpr, public: gpgRun(t, home, nil, "--armor", "--export", fpr)}
}

// sign returns k's armored detached signature of data, as AWS's .asc files are.
func (k gpgKey) sign(t *testing.T, data []byte) []byte {
	t.Helper()
	return gpgRun(t, k.home, data, "--armor", "--detach-sign", "--local-user", k.fpr, "--output", "-")
}

// TestDockerfileMountS3Verification runs the Dockerfile's own verification step, as docker
// would (/bin/sh -c in its WORKDIR, the stage's ARGs in the environment), with the test's curl
// serving AWS's URLs from files the test makes: a tarball, keys made here (one standing for
// AWS's, pinned in place of its fingerprint; another for an attacker's) and their signatures.
// The step must pass only when the key file holds the pinned key, the signature is that key's
// over this tarball, and the tarball has the pinned SHA-256; otherwise it must fail the build
// saying why, before anything is extracted.
func TestDockerfileMountS3Verification(t *testing.T) {
	for _, tool := range []string{"gpg", "gpg-agent", "gpgconf", "sha256sum", "awk"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (make apt-deps installs gpg and gpg-agent): %v", tool, err)
		}
	}
	script, args := mountS3Steps(t)
	version := args["MOUNTPOINT_VERSION"]
	aws := newGPGKey(t, "Mountpoint for Amazon S3 (test stand-in) <mountpoint-s3@amazon.com>")
	other := newGPGKey(t, "Someone else <mountpoint-s3@amazon.com>")
	tarball := []byte("a mount-s3 release tarball " + version)
	tampered := append([]byte("tampered: "), tarball...)
	sha := func(b []byte) string { return fmt.Sprintf("%x", sha256.Sum256(b)) }
	tarURL := func(arch string) string {
		return fmt.Sprintf("https://s3.amazonaws.com/mountpoint-s3-release/%s/%s/mount-s3-%s-%s.tar.gz", version, arch, version, arch)
	}
	fakeBin := t.TempDir()
	if err := os.WriteFile(filepath.Join(fakeBin, "curl"), []byte(fakeCurl), 0o755); err != nil { //nolint:gosec // G306: an executable
		t.Fatal(err)
	}

	type served struct{ tarball, asc, keys []byte }
	for _, tc := range []struct {
		name, targetArch string
		serve            served
		pinnedSum        string // default: the SHA-256 of the tarball served
		wantErr          string // "": the step passes
	}{
		{name: "AWS's key signed the tarball (amd64)", targetArch: "amd64",
			serve: served{tarball, aws.sign(t, tarball), aws.public}},
		{name: "AWS's key signed the tarball (arm64)", targetArch: "arm64",
			serve: served{tarball, aws.sign(t, tarball), aws.public}},
		{name: "the key file holds the pinned key and another", targetArch: "amd64",
			serve: served{tarball, aws.sign(t, tarball), append(slices.Clone(other.public), aws.public...)}},
		{name: "the key file lacks the pinned key", targetArch: "amd64",
			serve:   served{tarball, other.sign(t, tarball), other.public},
			wantErr: "has no key with the pinned fingerprint " + aws.fpr},
		{name: "signed by another key of the key file", targetArch: "amd64",
			serve:   served{tarball, other.sign(t, tarball), append(slices.Clone(aws.public), other.public...)},
			wantErr: "is not signed by the pinned key " + aws.fpr + " (signed by: " + other.fpr + ")"},
		{name: "changed after signing, checksum pinned to the change", targetArch: "amd64",
			serve: served{tampered, aws.sign(t, tarball), aws.public}, pinnedSum: sha(tampered),
			wantErr: "its signature " + tarURL("x86_64") + ".asc does not verify"},
		{name: "signed by AWS's key, another checksum pinned", targetArch: "amd64",
			serve: served{tarball, aws.sign(t, tarball), aws.public}, pinnedSum: sha(tampered),
			wantErr: "AWS's signature verifies but its SHA-256 is " + sha(tarball) + ", not the pinned " + sha(tampered)},
		{name: "no signature published", targetArch: "amd64",
			serve:   served{tarball, nil, aws.public},
			wantErr: "404 (" + tarURL("x86_64") + ".asc)"},
		{name: "no key file", targetArch: "amd64",
			serve:   served{tarball, aws.sign(t, tarball), nil},
			wantErr: "404 (" + awsKeysURL + ")"},
		{name: "an architecture AWS builds nothing for", targetArch: "s390x",
			serve:   served{tarball, aws.sign(t, tarball), aws.public},
			wantErr: "no mount-s3 build for s390x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arch := map[string]string{"amd64": "x86_64", "arm64": "arm64"}[tc.targetArch]
			files := t.TempDir()
			for url, b := range map[string][]byte{tarURL(arch): tc.serve.tarball, tarURL(arch) + ".asc": tc.serve.asc, awsKeysURL: tc.serve.keys} {
				if b == nil || arch == "" {
					continue
				}
				if err := os.WriteFile(filepath.Join(files, sha([]byte(url))), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			work := t.TempDir() // the stage's WORKDIR
			env := []string{"PATH=" + fakeBin + ":" + os.Getenv("PATH"), "HOME=" + work, "FAKE_CURL_DIR=" + files, "TARGETARCH=" + tc.targetArch}
			pinned := maps.Clone(args)
			pinned["MOUNTPOINT_KEY_FINGERPRINT"] = aws.fpr
			sum := tc.pinnedSum
			if sum == "" {
				sum = sha(tc.serve.tarball)
			}
			pinned["MOUNTPOINT_SHA256_AMD64"], pinned["MOUNTPOINT_SHA256_ARM64"] = sum, sum
			for k, v := range pinned {
				env = append(env, k+"="+v)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
			cmd.Dir, cmd.Env = work, env
			out, err := cmd.CombinedOutput()
			requests, _ := os.ReadFile(filepath.Join(files, "requests"))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("the verification step failed: %v\n%s\nURLs asked for:\n%s", err, out, requests)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("the verification step passed; want a failure with %q\n%s", tc.wantErr, out)
			case tc.wantErr != "" && !strings.Contains(string(out), tc.wantErr):
				t.Errorf("the verification step failed without saying %q:\n%s", tc.wantErr, out)
			}
			if tc.wantErr != "" {
				return
			}
			want := []string{awsKeysURL, tarURL(arch), tarURL(arch) + ".asc"}
			got := strings.Fields(string(requests))
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("the step downloaded %v, want %v", got, want)
			}
			// What the next step extracts is what was verified; the keyring and the rest go.
			if b, err := os.ReadFile(filepath.Join(work, "mount-s3.tar.gz")); err != nil || string(b) != string(tc.serve.tarball) {
				t.Errorf("mount-s3.tar.gz after the step: %q, %v", b, err)
			}
			left, _ := os.ReadDir(work)
			if len(left) != 1 {
				t.Errorf("the step left %v in its WORKDIR, want only mount-s3.tar.gz", left)
			}
		})
	}
}
