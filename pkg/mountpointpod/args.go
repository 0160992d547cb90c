package mountpointpod

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// checkArgs is the minimal sanity check of the received mount-s3 options (the node plugin
// applies the real policy): each must be a long option, "--name" or "--name=value", that
// keeps mount-s3 mounting in the foreground.
func checkArgs(args []string) error {
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		switch {
		case a == "--":
			return fmt.Errorf("argument %q would end mount-s3's options", a)
		case !strings.HasPrefix(a, "--") || len(name) < 3:
			return fmt.Errorf("argument %q is not a long option (--name or --name=value)", a)
		case name == "--foreground" && a != name:
			return fmt.Errorf("argument %q: --foreground takes no value", a)
		case name == "--help" || name == "--version":
			return fmt.Errorf("argument %q would make mount-s3 exit without mounting", a)
		}
	}
	return nil
}

// CacheDirName is the cache directory of mount-s3 in the pod's temporary directory (its cache
// volume).
const CacheDirName = "mount-s3-cache"

// mountS3Args returns what follows the bucket and the mount point on mount-s3's command line:
// --foreground, then args with the host-path options rewritten (see the package comment). It
// also returns the cache directory, "" if none; the caller removes it when the pod ends. With a cache
// and maxCacheMiB > 0 (the bound of the pod's /tmp), mount-s3's --max-cache-size is at most
// maxCacheMiB: set to it when absent, lowered to it when above.
func mountS3Args(args []string, maxCacheMiB uint64) ([]string, string, error) {
	out := []string{"--foreground"}
	cache := ""
	sizeAt := -1 // index in out of --max-cache-size
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--max-cache-size="):
			sizeAt = len(out)
			out = append(out, a)
		case a == "--foreground":
		case a == "--read-only" || a == "--auto-unmount":
			// mount-s3 refuses these with a FUSE fd: they belong to the mount(2) call, which the
			// node plugin made (read-only as MS_RDONLY). Node plugins of this release never send
			// them; earlier ones did.
			klog.InfoS("Dropping a mount-s3 option: the node plugin's mount call applies it", "arg", a)
		case strings.HasPrefix(a, "--log-directory="):
			klog.InfoS("Dropping a mount-s3 option: mount-s3 logs to the container output instead", "arg", a)
		case a == "--cache" || strings.HasPrefix(a, "--cache="):
			if cache == "" {
				// One fixed directory: a Mountpoint Pod serves one volume, and the container
				// that mount-s3's death restarts finds the cache its predecessor left in the
				// pod's cache volume (serve removes it only when the pod ends).
				dir := filepath.Join(os.TempDir(), CacheDirName)
				if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
					return nil, "", fmt.Errorf("create the cache directory: %w", err)
				}
				if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
					return nil, "", fmt.Errorf("the cache directory %s is not a directory", dir)
				}
				cache = dir
			}
			klog.InfoS("Replacing the cache directory with one inside the Mountpoint Pod", "arg", a, "cache", cache)
			out = append(out, "--cache="+cache)
		default:
			out = append(out, a)
		}
	}
	if cache != "" && maxCacheMiB > 0 {
		bound := fmt.Sprintf("--max-cache-size=%d", maxCacheMiB)
		switch {
		case sizeAt < 0:
			klog.InfoS("Bounding mount-s3's cache to the Mountpoint Pod's cache volume", "arg", bound)
			out = append(out, bound)
		default:
			asked, err := strconv.ParseUint(strings.TrimPrefix(out[sizeAt], "--max-cache-size="), 10, 64)
			if err != nil || asked > maxCacheMiB {
				klog.InfoS("Lowering mount-s3's cache size to what the Mountpoint Pod's cache volume holds", "asked", out[sizeAt], "arg", bound)
				out[sizeAt] = bound
			}
		}
	}
	return out, cache, nil
}
