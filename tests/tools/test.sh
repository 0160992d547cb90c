#!/usr/bin/env bash
# test.sh — what `make test` runs: every stage in order, then a table of how long each took
# (bin/timings.tsv; the cluster suite adds a line per step). It stops at the first failing
# stage and exits non-zero; the table is printed either way.
#
#   tools     make -j2 build tools: the project's binaries and the pinned tools (bin/)
#   cluster-tools (in the background from here on) Kubernetes binaries, e2e.test,
#             csi-provisioner, containerd & co: the cluster suite's needs
#   verify    make verify: generated files, gofmt, go mod tidy, vet, darwin build, lint, docs
#   unit      go test -race of the driver's module (unit tests)
#   go-test   go test -race of the tests module (tests/) but tests/cluster (envtest, real
#             systemd, FUSE, csi-sanity, helm suites)
#   monitoring promtool check rules and the alerts' unit tests (tests/monitoring)
#   fuzz      each fuzz target for FUZZ_TIME
#   cluster   the cluster suite (tests/cluster) on a real single-node cluster: the upstream
#             storage e2e suites in both modes and the project's scenarios
set -u
# Background builds and runs stop with this script, whatever way it ends.
trap 'kill $(jobs -p) 2>/dev/null' EXIT
cd "$(dirname "$0")/../.."
export PATH="/usr/local/go/bin:$PATH"
make="make --no-print-directory"
timings=bin/timings.tsv
mkdir -p bin
: >"$timings"
start_all=$(date +%s.%N)

now() { date +%s.%N; }
record() { # name start status
	awk -v n="$1" -v s="$2" -v e="$(now)" -v r="$3" 'BEGIN { printf "%s\t%.1f\t%s\n", n, e - s, (r == 0 ? "ok" : "FAIL") }' >>"$timings"
}
table() {
	echo
	echo "== timings (seconds) =="
	awk -F'\t' '{ printf "%-50s %8s  %s\n", $1, $2, $3 }' "$timings"
	awk -v s="$start_all" -v e="$(now)" 'BEGIN { printf "%-50s %8.1f\n", "total (wall)", e - s }'
}
fail() {
	table
	echo "make test: stage $1 failed" >&2
	exit 1
}
stage() { # name cmd...
	local name=$1 s rc
	shift
	echo "== $name: $*"
	s=$(now)
	"$@"
	rc=$?
	record "$name" "$s" "$rc"
	[ "$rc" = 0 ] || fail "$name"
}

stage tools $make -j2 build tools

# The cluster suite's tools build while the other stages run (the suites mostly wait on
# processes; verify's compiles leave gaps a second build fills).
s=$(now)
$make cluster-tools >bin/cluster-tools.log 2>&1 &
tools_pid=$!

stage verify $make verify

stage unit go test -race -count=1 -timeout 10m ./...
pkgs=$(cd tests && go list ./... | grep -vx 'github.com/s3csi/s3-csi-driver/tests/cluster')
# shellcheck disable=SC2086 # a list of packages
stage go-test bash -c "cd tests && go test -race -count=1 -timeout 25m $(echo $pkgs)"
stage monitoring $make test-monitoring
stage fuzz $make test-fuzz

echo "== cluster-tools: waiting for the background build (log: bin/cluster-tools.log)"
wait "$tools_pid"
rc=$?
record cluster-tools "$s" "$rc"
if [ "$rc" != 0 ]; then
	tail -50 bin/cluster-tools.log
	fail cluster-tools
fi
stage cluster $make test-cluster-run
table
