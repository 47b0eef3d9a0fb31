#!/bin/sh
# mmdebstrap's last hook for the fp8 image (scripts/build_image.sh, and the Containerfile
# runs it too): the non-root user the chart runs as and its writable folder, and the
# loader path of the CUDA libraries when the image has them. $1 is the root filesystem.
set -eu
rootfs=$1
# uid and gid 65532, as the chart's securityContext (runAsUser/runAsGroup/fsGroup).
grep -q '^fp8:' "$rootfs/etc/group" || echo 'fp8:x:65532:' >>"$rootfs/etc/group"
grep -q '^fp8:' "$rootfs/etc/passwd" ||
  echo 'fp8:x:65532:65532:fp8 service:/var/lib/fp8:/usr/sbin/nologin' >>"$rootfs/etc/passwd"
# The state, work and checkpoint folders the daemons default to live under /var/lib/fp8.
mkdir -p "$rootfs/var/lib/fp8"
chown 65532:65532 "$rootfs/var/lib/fp8"
if [ -n "$(ls -A "$rootfs/usr/local/lib/fp8-cuda" 2>/dev/null)" ]; then
  echo /usr/local/lib/fp8-cuda >"$rootfs/etc/ld.so.conf.d/fp8-cuda.conf"
fi
chroot "$rootfs" /sbin/ldconfig
