package systemd

import (
	"slices"
	"testing"
)

// TestAppendUmount: mounts with the same flags share one umount(8) command, in order, and a
// change of flags starts a new one (systemd stops at the first failed command).
func TestAppendUmount(t *testing.T) {
	type step struct {
		forced bool
		path   string
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  [][]string
	}{
		{"a live mount: both binds and the staging mount in one", []step{{false, "/t"}, {false, "/t"}, {false, "/s"}},
			[][]string{{"/bin/umount", "--", "/t", "/t", "/s"}}},
		{"a dead mount: all forced, in one", []step{{true, "/t"}, {true, "/t"}, {true, "/s"}},
			[][]string{{"/bin/umount", "-f", "-l", "--", "/t", "/t", "/s"}}},
		{"flags change: a command each, order kept", []step{{false, "/t"}, {true, "/t"}, {false, "/s"}},
			[][]string{{"/bin/umount", "--", "/t"}, {"/bin/umount", "-f", "-l", "--", "/t"}, {"/bin/umount", "--", "/s"}}},
		{"one mount", []step{{false, "/t"}}, [][]string{{"/bin/umount", "--", "/t"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cmds [][]string
			for _, s := range tc.steps {
				cmds = appendUmount(cmds, "/bin/umount", s.forced, s.path)
			}
			if !slices.EqualFunc(cmds, tc.want, slices.Equal) {
				t.Fatalf("commands %q, want %q", cmds, tc.want)
			}
		})
	}
}
