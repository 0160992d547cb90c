package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// DockerfileStage is one stage of the repository's Dockerfile: its name (AS …), its base image
// and its instructions, continuation lines joined and whitespace collapsed.
type DockerfileStage struct {
	Name, From   string
	Instructions []string
}

var fromRE = regexp.MustCompile(`(?i)^FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$`)

// ParseDockerfile reads the repository's Dockerfile into its stages.
func ParseDockerfile() ([]DockerfileStage, error) {
	b, err := os.ReadFile(filepath.Join(RepoRoot(), "Dockerfile"))
	if err != nil {
		return nil, err
	}
	var stages []DockerfileStage
	var cur strings.Builder
	for _, raw := range strings.Split(string(b), "\n") {
		line := strings.TrimSpace(raw)
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		instr := strings.Join(strings.Fields(cur.String()), " ")
		cur.Reset()
		if m := fromRE.FindStringSubmatch(instr); m != nil {
			stages = append(stages, DockerfileStage{Name: m[2], From: m[1]})
			continue
		}
		if len(stages) == 0 {
			continue // global ARGs
		}
		stages[len(stages)-1].Instructions = append(stages[len(stages)-1].Instructions, instr)
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("the Dockerfile has no FROM")
	}
	return stages, nil
}

// ImageLayout is where the driver image holds what it runs, as the Dockerfile's final stage
// lays it out: the one description of the image that the Dockerfile (for releases) and the
// cluster suite's rig (which builds the image from local files) share.
type ImageLayout struct {
	// Binaries maps each project binary (cmd/<name>) to its path in the image.
	Binaries map[string]string
	// MountS3 is mount-s3's path in the image (the mountpoint stage installs it there).
	MountS3 string
	// Entrypoint is the image's ENTRYPOINT.
	Entrypoint []string
}

var (
	copyBuildRE   = regexp.MustCompile(`^COPY --from=build ((?:/out/\S+ )+)(\S+)$`)
	copyMPRE      = regexp.MustCompile(`^COPY --from=mountpoint (\S+) (\S+)$`)
	installMS3RE  = regexp.MustCompile(`install -m 0755 \S+ (/\S*/mount-s3);`)
	entrypointRE  = regexp.MustCompile(`^ENTRYPOINT (\[.*\])$`)
	errNoLayoutOf = "the Dockerfile's final stage has no %s"
)

// DriverImageLayout reads the driver image's layout from the Dockerfile: the final stage's
// COPY --from=build of the binaries, its COPY --from=mountpoint of mount-s3's directory (and
// where the mountpoint stage installs mount-s3 in it), and its ENTRYPOINT.
func DriverImageLayout() (ImageLayout, error) {
	stages, err := ParseDockerfile()
	if err != nil {
		return ImageLayout{}, err
	}
	l := ImageLayout{Binaries: map[string]string{}}
	var ms3Src, ms3Dst, installed string
	for _, s := range stages {
		if s.Name != "mountpoint" {
			continue
		}
		for _, in := range s.Instructions {
			if m := installMS3RE.FindStringSubmatch(in); m != nil {
				installed = m[1]
			}
		}
	}
	for _, in := range stages[len(stages)-1].Instructions {
		if m := copyBuildRE.FindStringSubmatch(in); m != nil {
			for _, src := range strings.Fields(m[1]) {
				name := path.Base(src)
				l.Binaries[name] = path.Join(m[2], name)
			}
		}
		if m := copyMPRE.FindStringSubmatch(in); m != nil {
			ms3Src, ms3Dst = m[1], m[2]
		}
		if m := entrypointRE.FindStringSubmatch(in); m != nil {
			if err := json.Unmarshal([]byte(m[1]), &l.Entrypoint); err != nil {
				return l, fmt.Errorf("ENTRYPOINT: %w", err)
			}
		}
	}
	switch {
	case len(l.Binaries) == 0:
		return l, fmt.Errorf(errNoLayoutOf, "COPY --from=build of the binaries")
	case ms3Src == "" || installed == "" || !strings.HasPrefix(installed, strings.TrimSuffix(ms3Src, "/")+"/"):
		return l, fmt.Errorf(errNoLayoutOf, "COPY --from=mountpoint of the directory where the mountpoint stage installs mount-s3")
	case len(l.Entrypoint) == 0:
		return l, fmt.Errorf(errNoLayoutOf, "ENTRYPOINT")
	}
	l.MountS3 = path.Join(ms3Dst, strings.TrimPrefix(installed, strings.TrimSuffix(ms3Src, "/")))
	return l, nil
}
