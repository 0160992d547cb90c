//go:build linux

package mountoptions

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// FuzzParse feeds arbitrary payloads and control buffers to the receiver's parser. It must
// never panic, must report every descriptor it saw, and whatever it accepts must be valid and
// survive a round trip through the sender's encoding unchanged.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"bucketName":"bkt","args":["--allow-delete"],"env":["AWS_REGION=us-east-1"]}`), unix.UnixRights(3))
	f.Add([]byte(`{"bucketName":"bkt"}`), unix.UnixRights(3, 4))
	f.Add([]byte(`{"bucketName":"bkt","unknown":1}`), unix.UnixRights(3))
	f.Add([]byte(`{"bucketName":"b\u0000b"}`), []byte{})
	f.Add([]byte(`{"bucketName":"bkt","env":["A=1","A=2"]}`), append(unix.UnixRights(5), unix.UnixRights(6)...))
	f.Add([]byte(`[]`), unix.UnixCredentials(&unix.Ucred{Pid: 1}))
	f.Fuzz(func(t *testing.T, data, oob []byte) {
		o, fds, err := parse(data, oob)
		if err != nil {
			return
		}
		if len(fds) != 1 {
			t.Fatalf("accepted with %d descriptors", len(fds))
		}
		if err := o.Validate(); err != nil {
			t.Fatalf("accepted invalid options %+v: %v", o, err)
		}
		again, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		o2, _, err := parse(again, unix.UnixRights(fds[0]))
		if err != nil {
			t.Fatalf("re-encoded options refused: %v\n%s", err, again)
		}
		if diff := cmp.Diff(o, o2); diff != "" {
			t.Fatalf("round trip changed the options (-first +second):\n%s", diff)
		}
	})
}
