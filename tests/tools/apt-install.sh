#!/bin/sh
# apt-install.sh PKG... — install the Debian packages among PKG that are not installed yet.
#
# Used by tools.mk (targets apt-deps and bin/k8s/etcd). Contract:
#   * a no-op (one dpkg-query call, ~10 ms) when every package is installed;
#   * otherwise `apt-get install -y --no-install-recommends` of only the missing ones, non-
#     interactively; if that fails (typically: stale or empty package lists on a fresh
#     machine) it runs `apt-get update` and retries once;
#   * concurrent callers are serialised with flock(1) (plus apt's own DPkg::Lock::Timeout);
#   * runs apt-get through sudo when not root (and fails with a hint if sudo is missing).
set -eu

[ "$#" -gt 0 ] || { echo "usage: $0 PKG..." >&2; exit 2; }

find_missing() {
	# One dpkg-query call. `dpkg -s` alone is not enough: it also succeeds for removed-but-
	# not-purged packages, so look at the real state.
	installed=" $(dpkg-query -W -f='${Package} ${Status}\n' "$@" 2>/dev/null |
		awk '$2 == "install" && $3 == "ok" && $4 == "installed" { printf "%s ", $1 }')"
	missing=
	for pkg in "$@"; do
		case $installed in
		*" $pkg "*) ;;
		*) missing="$missing $pkg" ;;
		esac
	done
}

find_missing "$@"
[ -n "$missing" ] || exit 0

# `make -j` may run two callers at once (apt-deps and bin/k8s/etcd): serialise them, then
# look again, so the second one finds the packages installed instead of failing on the dpkg lock.
if command -v flock >/dev/null 2>&1; then
	exec 9>"${TMPDIR:-/tmp}/apt-install.sh.lock"
	flock 9
	find_missing "$@"
	[ -n "$missing" ] || exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
	SUDO=
elif command -v sudo >/dev/null 2>&1; then
	SUDO="sudo -n"
else
	echo "apt-install.sh: need root (or sudo) to install:$missing" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "apt-install.sh: installing:$missing" >&2
# shellcheck disable=SC2086 # $missing is a space-separated package list
if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 $missing; then
	echo "apt-install.sh: install failed; running apt-get update and retrying once" >&2
	$SUDO apt-get update -q
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 $missing
fi
