#!/usr/bin/env bash
# vm-image.sh — build the virtual machine image of the systemd-mode rig (tests/vm).
#
#   tests/tools/vm-image.sh OUT_ROOT       (make vm-image: OUT_ROOT = <repo>/bin/vm)
#
# Contract
#   * Produces OUT_ROOT/<key>/{disk.img,vmlinuz,initrd.img,cmdline} and prints OUT_ROOT/<key> as
#     its last line of output. <key> is the first 16 hex digits of the SHA-256 of this script
#     (which holds the package list and every file the image gets), so a change to either builds
#     a new image and a warm run rebuilds nothing (the directory exists: ~0.01 s).
#   * The root file system is Debian bookworm from Debian's packages only (mmdebstrap, minbase
#     plus PACKAGES): systemd as PID 1 (unified cgroup v2 hierarchy: systemd 252's default,
#     also asked for on the command line), journald, udev, fuse3, the cloud kernel and its
#     initrd (virtio is modular there). The kernel and initrd are copied out for qemu's
#     -kernel/-initrd (no boot loader in the image).
#   * The image holds one unit of the rig's own, s3csi-agent.service: it mounts the second
#     disk (/dev/vdb, read-only ext4 with the binaries; tests/vm makes it) at /opt/s3csi and
#     runs /opt/s3csi/vm-agent, which serves commands on the virtio serial port
#     "s3csi.agent" (see tests/vm/agent). The agent is not part of the image, so changing it
#     needs no rebuild.
#   * The downloaded debs are kept in OUT_ROOT/debs (shared by every key) and put back into
#     apt's cache before the next build, so a rebuild downloads only the package indexes.
#   * Builds in OUT_ROOT/.tmp-<key>.* and renames into place: an interrupted build never
#     leaves a directory a later run would take for finished.
#   * Needs root (mmdebstrap's root mode, mkfs.ext4 -d keeps owners) and the host packages
#     mmdebstrap and e2fsprogs; installs mmdebstrap with apt-install.sh when it is missing.
set -euo pipefail

PACKAGES="systemd systemd-sysv dbus udev kmod fuse3 iproute2 procps util-linux mount linux-image-cloud-amd64 initramfs-tools"
SUITE=bookworm
MIRROR=http://deb.debian.org/debian
# Size of the (sparse) disk image; the tests write buckets and logs into it (snapshot=on
# keeps those writes out of the file).
DISK_SIZE=2G

out_root=${1:?usage: vm-image.sh OUT_ROOT}
here=$(cd "$(dirname "$0")" && pwd)
key=$(sha256sum "$0" | cut -c1-16)
dest=$out_root/$key
if [ -f "$dest/disk.img" ]; then
	echo "vm-image: $dest is up to date"
	echo "$dest"
	exit 0
fi

command -v mmdebstrap >/dev/null || sh "$here/apt-install.sh" mmdebstrap
command -v mkfs.ext4 >/dev/null || sh "$here/apt-install.sh" e2fsprogs

mkdir -p "$out_root/debs"
tmp=$(mktemp -d "$out_root/.tmp-$key.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
start=$(date +%s)

# The guest's own files, written into the tree by the customize hook below.
mkdir -p "$tmp/files"
cat >"$tmp/files/s3csi-agent.service" <<'EOF'
[Unit]
Description=s3csi VM rig agent (commands from the host over the s3csi.agent port)
After=local-fs.target systemd-journald.service

[Service]
Type=simple
# The kernel's /dev/vdb, not udev's dev-vdb.device: udev's coldplug takes minutes under TCG
# and the device job timed out (90 s) on a loaded host, failing the agent by dependency.
ExecStartPre=/bin/sh -c 'until [ -b /dev/vdb ]; do sleep 0.2; done; mkdir -p /opt/s3csi; mountpoint -q /opt/s3csi || mount -o ro /dev/vdb /opt/s3csi'
ExecStart=/opt/s3csi/vm-agent
StandardError=journal+console
TimeoutStartSec=infinity
Restart=on-failure
RestartSec=1

[Install]
WantedBy=multi-user.target
EOF
# fuse for mount-s3, virtio_console for the agent's port (udev would load both on demand; this
# does not wait for it).
printf 'fuse\nvirtio_console\n' >"$tmp/files/s3csi.conf"
printf 's3csi-vm\n' >"$tmp/files/hostname"
printf '/dev/vda / ext4 rw,errors=remount-ro 0 1\n' >"$tmp/files/fstab"

# shellcheck disable=SC2016 # $1 is expanded by mmdebstrap's hook shell, not here
mmdebstrap --variant=minbase --mode=root \
	--include="${PACKAGES// /,}" \
	--setup-hook='mkdir -p "$1/var/cache/apt/archives"' \
	--setup-hook="find '$out_root/debs' -name '*.deb' -exec cp {} \"\$1/var/cache/apt/archives/\" \;" \
	--customize-hook="find \"\$1/var/cache/apt/archives\" -name '*.deb' -exec cp -n {} '$out_root/debs/' \;" \
	--customize-hook="cp '$tmp/files/s3csi-agent.service' \"\$1/etc/systemd/system/\"" \
	--customize-hook='mkdir -p "$1/etc/systemd/system/multi-user.target.wants"' \
	--customize-hook='ln -sf /etc/systemd/system/s3csi-agent.service "$1/etc/systemd/system/multi-user.target.wants/s3csi-agent.service"' \
	--customize-hook="cp '$tmp/files/s3csi.conf' \"\$1/etc/modules-load.d/s3csi.conf\"" \
	--customize-hook="cp '$tmp/files/hostname' \"\$1/etc/hostname\"" \
	--customize-hook="cp '$tmp/files/fstab' \"\$1/etc/fstab\"" \
	--customize-hook='for u in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer fstrim.timer e2scrub_all.timer getty@tty1.service; do ln -sf /dev/null "$1/etc/systemd/system/$u"; done' \
	--customize-hook='rm -f "$1/etc/machine-id" && touch "$1/etc/machine-id"' \
	--customize-hook="cp \"\$1\"/boot/vmlinuz-* '$tmp/vmlinuz' && cp \"\$1\"/boot/initrd.img-* '$tmp/initrd.img'" \
	"$SUITE" "$tmp/root" "$MIRROR"
echo "vm-image: root file system in $(($(date +%s) - start)) s ($(du -sm "$tmp/root" | cut -f1) MB)"

mkfs.ext4 -q -F -L s3csi-root -d "$tmp/root" "$tmp/disk.img" "$DISK_SIZE"
rm -rf "$tmp/root" "$tmp/files"
echo "console=ttyS0 root=/dev/vda rw panic=-1 systemd.unified_cgroup_hierarchy=1 systemd.show_status=0 loglevel=4" >"$tmp/cmdline"
chmod 0644 "$tmp/vmlinuz" "$tmp/initrd.img"
mv -T "$tmp" "$dest"
trap - EXIT
echo "vm-image: built $dest in $(($(date +%s) - start)) s"
echo "$dest"
