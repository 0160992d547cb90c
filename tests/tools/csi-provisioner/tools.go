//go:build tools

// Package csiprovisioner pins the csi-provisioner sidecar (kubernetes-csi/external-provisioner)
// that tools.mk builds into bin/csi-provisioner for the cluster suite (tests/cluster): it runs
// in the chart's controller Deployment, from an image built locally. Its blank import only
// makes `go mod tidy` record every dependency in go.sum; nothing here is compiled into the
// driver. See update.sh to bump the version.
package csiprovisioner

import _ "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"
