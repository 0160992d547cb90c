package rig

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/s3csi/s3-csi-driver/tests/harness"
)

// Image names. The driver image is tagged DriverTag (the chart's image.tag in the suite); the
// others carry the exact names the chart's values and the e2e suites use, so nothing is ever
// pulled (there is no registry here).
const (
	DriverRepository    = "ghcr.io/scality/s3-csi-driver"
	DriverTag           = "e2e"
	ProvisionerImage    = "registry.k8s.io/sig-storage/csi-provisioner:v6.3.0"
	BusyboxImage        = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"
	agnhostImage        = "registry.k8s.io/e2e-test-images/agnhost:2.53"
	jessieDNSUtilsImage = "registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7"
	nginxImage          = "registry.k8s.io/e2e-test-images/nginx:1.14-4"
)

// file is one entry of an image's single layer.
type file struct {
	path   string // in the image, without the leading /
	src    string // host file to copy (regular files)
	mode   int64
	link   string // symlink target (when set)
	dir    bool
	inline []byte // content (when src is empty and not a dir or link)
}

// image is an OCI image made of one uncompressed layer.
type image struct {
	ref        string
	entrypoint []string
	cmd        []string
	files      []file
}

const imagePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// baseFiles are what every image of the project has besides its programs: the usual
// directories, and a passwd/group naming root and the Mountpoint Pods' user (1000).
func baseFiles() []file {
	return rootFiles("root:x:0:0:root:/root:/bin/sh\nmountpoint:x:1000:1000::/tmp:/sbin/nologin\nnobody:x:65534:65534::/nonexistent:/sbin/nologin\n",
		"root:x:0:\nmountpoint:x:1000:\nnogroup:x:65534:\n")
}

// rootFiles are the usual directories of a root file system and the given passwd and group.
func rootFiles(passwd, group string) []file {
	return []file{
		{path: "etc", dir: true, mode: 0o755}, {path: "tmp", dir: true, mode: 0o1777},
		{path: "proc", dir: true, mode: 0o555}, {path: "sys", dir: true, mode: 0o555}, {path: "dev", dir: true, mode: 0o755},
		{path: "etc/passwd", mode: 0o644, inline: []byte(passwd)},
		{path: "etc/group", mode: 0o644, inline: []byte(group)},
	}
}

// busyboxFiles is a busybox root: the static busybox of the host (Debian's busybox-static)
// and a link per applet, as the busybox image has.
func busyboxFiles() ([]file, error) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(bb, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list-full: %w", err)
	}
	files := []file{{path: "bin", dir: true, mode: 0o755}, {path: "sbin", dir: true, mode: 0o755}, {path: "usr", dir: true, mode: 0o755},
		{path: "usr/bin", dir: true, mode: 0o755}, {path: "usr/sbin", dir: true, mode: 0o755}, {path: "bin/busybox", src: bb, mode: 0o755}}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "bin/busybox" {
			continue
		}
		files = append(files, file{path: applet, link: "/bin/busybox"})
	}
	return files, nil
}

// images lists what the cluster runs: the driver image (the layout of the Dockerfile, with the
// mount-s3 stand-in in place of mount-s3, or the binary $MOUNT_S3 names), csi-provisioner, pause, and the e2e test images.
func (u *upper) images() ([]image, error) {
	bb, err := busyboxFiles()
	if err != nil {
		return nil, err
	}
	// The driver image is laid out as the Dockerfile's final stage says (harness.DriverImageLayout),
	// with the local builds of the binaries and the mount-s3 the suites run.
	layout, err := harness.DriverImageLayout()
	if err != nil {
		return nil, err
	}
	var driver []file
	dirs := map[string]bool{}
	add := func(inImage, src string) {
		rel := strings.TrimPrefix(inImage, "/")
		for d := path.Dir(rel); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			driver = append(driver, file{path: d, dir: true, mode: 0o755})
		}
		driver = append(driver, file{path: rel, src: src, mode: 0o755})
	}
	add(layout.MountS3, harness.MountS3In(u.opts.Bin))
	for _, b := range slices.Sorted(maps.Keys(layout.Binaries)) {
		add(layout.Binaries[b], u.bin(b))
	}
	// The e2e images name only root and nobody, like the upstream busybox image: the suites
	// compare `ls -l` group columns with numeric ids.
	busyboxRoot := append(rootFiles("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n", "root:x:0:\nnogroup:x:65534:\n"), bb...)
	return []image{
		{ref: pauseImage, entrypoint: []string{"/pause"}, files: append(baseFiles(), file{path: "pause", src: u.bin("pause"), mode: 0o755})},
		{ref: DriverRepository + ":" + DriverTag, entrypoint: layout.Entrypoint, files: append(baseFiles(), driver...)},
		{ref: ProvisionerImage, entrypoint: []string{"/csi-provisioner"}, files: append(baseFiles(), file{path: "csi-provisioner", src: u.bin("csi-provisioner"), mode: 0o755})},
		{ref: BusyboxImage, cmd: []string{"sh"}, files: busyboxRoot},
		{ref: agnhostImage, entrypoint: []string{"/agnhost"}, cmd: []string{"pause"}, files: append(slicesClone(busyboxRoot), file{path: "agnhost", src: u.bin("k8s/agnhost"), mode: 0o755})},
		{ref: jessieDNSUtilsImage, cmd: []string{"sh"}, files: busyboxRoot},
		{ref: nginxImage, cmd: []string{"sh", "-c", "trap 'exit 0' TERM; sleep 100000 & wait"}, files: busyboxRoot},
	}, nil
}

func slicesClone(f []file) []file { return append([]file(nil), f...) }

// archivePath is where an image's OCI archive is written.
func archivePath(ref string) string {
	name := strings.NewReplacer("/", "_", ":", "_").Replace(ref)
	return filepath.Join(DataDir, "images", name+".tar")
}

// buildImages writes every image as an OCI image-layout archive.
func (u *upper) buildImages() error {
	imgs, err := u.images()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(DataDir, "images"), 0o700); err != nil {
		return err
	}
	for _, img := range imgs {
		if err := writeOCIArchive(img, archivePath(img.ref)); err != nil {
			return fmt.Errorf("image %s: %w", img.ref, err)
		}
	}
	return nil
}

// importImages imports the archives into containerd's k8s.io namespace (what the CRI uses),
// unpacked for its snapshotter, and removes the archives.
func (u *upper) importImages(ctx context.Context) error {
	return u.importImagesInto(ctx, firstNode())
}

// importImagesInto imports the archives into node n's containerd and removes them.
func (u *upper) importImagesInto(_ context.Context, n *node) error {
	imgs, err := u.images()
	if err != nil {
		return err
	}
	for _, img := range imgs {
		p := archivePath(img.ref)
		if err := run(ctrAt(n.containerdSocket, "images", "import", "--no-unpack=false", p)...); err != nil {
			return err
		}
		_ = os.Remove(p)
		if !slices.Contains(u.state.Images, img.ref) {
			u.state.Images = append(u.state.Images, img.ref)
		}
	}
	return u.state.save()
}

// writeOCIArchive writes img as an OCI image layout in a tar file: one uncompressed layer, its
// config (entrypoint, cmd, PATH), the manifest, and an index naming the image for containerd
// (io.containerd.image.name).
func writeOCIArchive(img image, path string) error {
	layerPath := path + ".layer"
	layerDigest, layerSize, err := writeLayer(img.files, layerPath)
	if err != nil {
		return err
	}
	defer os.Remove(layerPath)
	cfg, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux", "created": time.Unix(0, 0).UTC(),
		"config": map[string]any{"Entrypoint": img.entrypoint, "Cmd": img.cmd, "Env": []string{imagePath}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	cfgDigest := digest(cfg)
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfgDigest, "size": len(cfg)},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": layerSize}},
	})
	manifestDigest := digest(manifest)
	tag := img.ref[strings.LastIndex(img.ref, ":")+1:]
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifestDigest, "size": len(manifest),
			"platform":    map[string]string{"architecture": runtime.GOARCH, "os": "linux"},
			"annotations": map[string]string{"io.containerd.image.name": img.ref, "org.opencontainers.image.ref.name": tag},
		}},
	})
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	defer out.Close()
	tw := tar.NewWriter(out)
	blobs := [][2]string{{"oci-layout", `{"imageLayoutVersion":"1.0.0"}`}, {"index.json", string(index)},
		{blobPath(cfgDigest), string(cfg)}, {blobPath(manifestDigest), string(manifest)}}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			return err
		}
	}
	for _, b := range blobs {
		if err := tw.WriteHeader(&tar.Header{Name: b[0], Mode: 0o644, Size: int64(len(b[1]))}); err != nil {
			return err
		}
		if _, err := tw.Write([]byte(b[1])); err != nil {
			return err
		}
	}
	layer, err := os.Open(layerPath)
	if err != nil {
		return err
	}
	defer layer.Close()
	if err := tw.WriteHeader(&tar.Header{Name: blobPath(layerDigest), Mode: 0o644, Size: layerSize}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, layer); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return out.Close()
}

func blobPath(d string) string { return "blobs/sha256/" + strings.TrimPrefix(d, "sha256:") }

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// writeLayer writes the files as a tar (parents before children) and returns its digest.
func writeLayer(files []file, path string) (string, int64, error) {
	out, err := os.Create(path)
	if err != nil {
		return "", 0, err
	}
	defer out.Close()
	h := sha256.New()
	counter := &countWriter{}
	tw := tar.NewWriter(io.MultiWriter(out, h, counter))
	sorted := slicesClone(files)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].path < sorted[j].path })
	seen := map[string]bool{}
	for _, f := range sorted {
		if seen[f.path] {
			continue
		}
		seen[f.path] = true
		hdr := &tar.Header{Name: f.path, Mode: f.mode, ModTime: time.Unix(0, 0)}
		switch {
		case f.dir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, f.path+"/"
		case f.link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.link, 0o777
		case f.src != "":
			st, err := os.Stat(f.src)
			if err != nil {
				return "", 0, err
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size()
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f.inline))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return "", 0, err
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		if f.src == "" {
			if _, err := tw.Write(f.inline); err != nil {
				return "", 0, err
			}
			continue
		}
		src, err := os.Open(f.src)
		if err != nil {
			return "", 0, err
		}
		_, err = io.Copy(tw, src)
		src.Close()
		if err != nil {
			return "", 0, err
		}
	}
	if err := tw.Close(); err != nil {
		return "", 0, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), counter.n, out.Close()
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
