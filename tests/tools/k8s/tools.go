//go:build tools

// Package k8sbin pins the Kubernetes release whose server binaries tools.mk builds into
// bin/k8s (kube-apiserver for envtest; kube-controller-manager, kube-scheduler, kubelet and
// kubectl for the cluster suite), the ginkgo CLI and agnhost of the same release, and
// e2e/e2e.test (the storage e2e suites). It is never compiled into the driver: the
// blank imports below only make `go mod tidy` record every dependency of those commands in
// this module's go.sum.
//
// k8s.io/kubernetes cannot be required directly because its go.mod replaces the k8s.io/*
// staging modules with ./staging paths; go.mod here replaces each of them with its
// published v0.<minor>.<patch> tag instead. See tools.mk (K8S_VERSION) to bump.
package k8sbin

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/test/images/agnhost"
)
