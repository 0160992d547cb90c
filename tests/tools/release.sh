#!/usr/bin/env bash
# release.sh — the release workflow's steps that need no network, so that they run here too
# (`make release-check`, tests/helm's TestRelease*) exactly as .github/workflows/release.yaml
# runs them.
#
# One version scheme: a git tag vX.Y.Z releases version X.Y.Z, which is the chart's version and
# appVersion (Chart.yaml), the image tag (the chart's default image.tag is its appVersion), the
# version every binary reports (--version) and a section "## [X.Y.Z]" of CHANGELOG.md.
# The image goes where values.yaml's image.repository says (the chart's default is what the
# workflow publishes) and the chart next to it, under <registry>/<owner>/charts.
#
#   release.sh meta TAG           check TAG against the repository; print version=, image=,
#                                 charts= lines (the workflow appends them to $GITHUB_OUTPUT)
#   release.sh chart VERSION DIR  helm lint the chart, package it at VERSION into DIR, check
#                                 the package (version, appVersion, default image); print its path
#   release.sh index-digest ARCHIVE
#                                 the digest of the image index of an OCI archive (what docker
#                                 buildx --output type=oci writes): the digest the workflow
#                                 pushes and signs, and checks the registry serves
#   release.sh bump-check         fail when charts/ changed since the tag of the chart's version
#                                 without a new version (no such tag: nothing to check)
#
# Environment: ROOT (the repository; default: this script's), HELM (default: helm on PATH).
set -euo pipefail

ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
HELM=${HELM:-helm}
CHART_DIR="$ROOT/charts/scality-s3-csi-driver"

die() { echo "release: $*" >&2; exit 1; }

# chart_field FIELD: a top-level scalar of Chart.yaml, unquoted.
chart_field() {
	sed -n "s/^$1:[[:space:]]*\"\{0,1\}\([^\"#]*[^\"#[:space:]]\)\"\{0,1\}[[:space:]]*\(#.*\)\{0,1\}$/\1/p" "$CHART_DIR/Chart.yaml"
}

# default_image: values.yaml's image.repository (the top-level image: block).
default_image() {
	awk '/^image:/ { in_image = 1; next } /^[^[:space:]#]/ { in_image = 0 }
		in_image && $1 == "repository:" { gsub(/"/, "", $2); print $2; exit }' "$CHART_DIR/values.yaml"
}

semver='^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$'

cmd_meta() {
	[ $# -eq 1 ] || die "usage: release.sh meta TAG"
	local tag=$1 version chart_version app_version image
	case "$tag" in
	v*) version=${tag#v} ;;
	*) die "tag $tag: a release tag is v followed by the version (v1.2.3)" ;;
	esac
	[[ $version =~ $semver ]] || die "tag $tag: $version is not a semantic version X.Y.Z (v1.2.3, v1.2.3-rc.1)"
	chart_version=$(chart_field version)
	app_version=$(chart_field appVersion)
	[ "$chart_version" = "$version" ] ||
		die "tag $tag: charts/scality-s3-csi-driver/Chart.yaml has version $chart_version; set version and appVersion to $version before tagging"
	[ "$app_version" = "$version" ] ||
		die "tag $tag: charts/scality-s3-csi-driver/Chart.yaml has appVersion $app_version; set it to $version (the image tag) before tagging"
	grep -q "^## \[$version\]" "$ROOT/CHANGELOG.md" ||
		die "tag $tag: CHANGELOG.md has no section \"## [$version]\"; move the Unreleased entries under it before tagging"
	image=$(default_image)
	[ -n "$image" ] || die "charts/scality-s3-csi-driver/values.yaml has no image.repository"
	case "$image" in
	*/*/*) ;;
	*) die "values.yaml image.repository $image: expected <registry>/<owner>/<name> (the chart goes to <registry>/<owner>/charts)" ;;
	esac
	echo "version=$version"
	echo "image=$image"
	echo "charts=oci://${image%/*}/charts"
}

cmd_chart() {
	[ $# -eq 2 ] || die "usage: release.sh chart VERSION DIR"
	local version=$1 dir=$2 pkg got
	"$HELM" lint --strict "$CHART_DIR" --values "$ROOT/tests/harness/testdata/offline-values.yaml" >/dev/null ||
		die "helm lint --strict fails on the chart"
	mkdir -p "$dir"
	"$HELM" package "$CHART_DIR" --version "$version" --app-version "$version" -d "$dir" >/dev/null
	pkg="$dir/scality-s3-csi-driver-$version.tgz"
	[ -f "$pkg" ] || die "helm package wrote no $pkg"
	got=$("$HELM" show chart "$pkg" | sed -n 's/^version: //p')
	[ "$got" = "$version" ] || die "$pkg has version $got, not $version"
	got=$("$HELM" show chart "$pkg" | sed -n 's/^appVersion: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p')
	[ "$got" = "$version" ] || die "$pkg has appVersion $got, not $version"
	got=$("$HELM" show values "$pkg" | awk '/^image:/ { i = 1; next } /^[^[:space:]#]/ { i = 0 } i && $1 == "repository:" { print $2; exit }')
	[ "$got" = "$(default_image)" ] || die "$pkg's default image.repository is $got, not $(default_image)"
	echo "$pkg"
}

cmd_index_digest() {
	[ $# -eq 1 ] || die "usage: release.sh index-digest ARCHIVE"
	local index
	index=$(tar -xOf "$1" index.json 2>/dev/null) || die "$1: no index.json (not an OCI archive)"
	# buildx writes one descriptor into index.json: the multi-platform image index.
	python3 -c '
import json, re, sys
m = json.loads(sys.argv[2]).get("manifests") or []
if len(m) != 1:
    sys.exit("%s: index.json has %d manifests, expected the one image index" % (sys.argv[1], len(m)))
if m[0].get("mediaType") != "application/vnd.oci.image.index.v1+json":
    sys.exit("%s: index.json names a %s, not an OCI image index (a single-platform build?)" % (sys.argv[1], m[0].get("mediaType")))
d = m[0].get("digest", "")
if not re.fullmatch(r"sha256:[0-9a-f]{64}", d):
    sys.exit("%s: index.json names no sha256 digest" % sys.argv[1])
print(d)' "$1" "$index" || die "index-digest failed"
}

cmd_bump_check() {
	[ $# -eq 0 ] || die "usage: release.sh bump-check"
	local version tag
	version=$(chart_field version)
	tag="v$version"
	git -C "$ROOT" rev-parse -q --verify "refs/tags/$tag" >/dev/null || { echo "no tag $tag: the chart's version $version is unreleased"; return 0; }
	if ! git -C "$ROOT" diff --quiet "$tag" -- charts/; then
		git -C "$ROOT" diff --stat "$tag" -- charts/ >&2
		die "charts/ changed since $tag, which released version $version: set a new version (and appVersion) in Chart.yaml and a CHANGELOG section"
	fi
	echo "charts/ is as $tag released it"
}

[ $# -ge 1 ] || die "usage: release.sh meta|chart|index-digest|bump-check ..."
sub=$1
shift
case "$sub" in
meta) cmd_meta "$@" ;;
chart) cmd_chart "$@" ;;
index-digest) cmd_index_digest "$@" ;;
bump-check) cmd_bump_check "$@" ;;
*) die "unknown step $sub (meta, chart, index-digest, bump-check)" ;;
esac
