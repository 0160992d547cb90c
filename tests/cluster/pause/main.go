// Command pause is the pod sandbox ("infra") container of the cluster suite's containerd: it
// holds the pod's namespaces, reaps the zombies of the pod's shared PID namespace, and exits
// on SIGINT or SIGTERM, like Kubernetes' own pause. It is never shipped.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
