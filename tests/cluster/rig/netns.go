package rig

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Veth names (both ends live inside NetNS: this kernel has no dummy driver).
const (
	vethNode = "s3csi0"
	vethPeer = "s3csi1"
)

// createNetNS creates NetNS with loopback up, a veth pair whose node end holds NodeIP/24 and
// the default route (so components that look for "the default interface" find NodeIP), and
// the two DNAT rules that make the `kubernetes` Service reach the API server (no kube-proxy
// runs). It changes nothing outside the namespace.
func createNetNS() error {
	if _, err := os.Stat(netnsPath); err == nil {
		return fmt.Errorf("network namespace %s already exists: another rig runs, or a crashed one was not torn down (rigctl down)", NetNS)
	}
	steps := [][]string{
		{"ip", "netns", "add", NetNS},
		{"ip", "-n", NetNS, "link", "set", "lo", "up"},
		{"ip", "-n", NetNS, "link", "add", vethNode, "type", "veth", "peer", "name", vethPeer},
		{"ip", "-n", NetNS, "addr", "add", NodeIP + "/24", "dev", vethNode},
		{"ip", "-n", NetNS, "link", "set", vethNode, "up"},
		{"ip", "-n", NetNS, "link", "set", vethPeer, "up"},
		{"ip", "-n", NetNS, "route", "add", "default", "dev", vethNode},
	}
	for _, chain := range []string{"PREROUTING", "OUTPUT"} {
		steps = append(steps, append([]string{"nsenter", "--net=" + netnsPath, "iptables", "-t", "nat", "-A", chain}, kubernetesDNATRule...))
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

// deleteNetNS removes NetNS (its links, addresses and iptables rules go with it).
func deleteNetNS() error {
	if _, err := os.Stat(netnsPath); os.IsNotExist(err) {
		return nil
	}
	if out, err := exec.Command("ip", "netns", "delete", NetNS).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns delete %s: %v: %s", NetNS, err, out)
	}
	return nil
}

// netnsInode identifies NetNS (to find the processes inside it); 0 when it does not exist.
func netnsInode() uint64 {
	var st syscallStat
	if err := stat(netnsPath, &st); err != nil {
		return 0
	}
	return st.Ino
}

// InNetNS returns argv prefixed so that it runs inside NetNS (and only its network namespace:
// mounts stay shared with the host).
func InNetNS(argv ...string) []string {
	return append([]string{"nsenter", "--net=" + netnsPath, "--"}, argv...)
}
