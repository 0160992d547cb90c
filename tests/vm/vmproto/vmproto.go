// Package vmproto is the wire format between the VM rig (tests/vm) and its in-guest agent
// (tests/vm/agent): one JSON object per line in each direction over the virtio serial port
// PortName. The host sends Requests; the agent answers each with one Response carrying the
// same ID, in completion order (requests run concurrently).
package vmproto

// PortName is the name of the virtio serial port (/sys/class/virtio-ports/*/name in the guest).
const PortName = "s3csi.agent"

// Request asks the agent to run Argv (Argv[0] looked up in PATH) with Env added to the agent's
// minimal environment, in Dir ("" = /), and to kill its process group after TimeoutSeconds
// (0 = 600). An empty Argv is a ping: the agent answers at once with Exit 0.
type Request struct {
	ID             uint64   `json:"id"`
	Argv           []string `json:"argv,omitempty"`
	Env            []string `json:"env,omitempty"`
	Dir            string   `json:"dir,omitempty"`
	TimeoutSeconds int      `json:"timeoutSeconds,omitempty"`
}

// Response is the outcome of one Request. Exit is the exit status (-1 when the process was
// killed by a signal or could not start; Error then says why). Stdout and Stderr are complete.
type Response struct {
	ID      uint64  `json:"id"`
	Exit    int     `json:"exit"`
	Stdout  []byte  `json:"stdout,omitempty"`
	Stderr  []byte  `json:"stderr,omitempty"`
	Error   string  `json:"error,omitempty"`
	Seconds float64 `json:"seconds"`
}
