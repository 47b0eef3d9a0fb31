# Sourced by the container tests: `pm` runs podman as these machines need it (runc, since
# crun fails on their hybrid cgroups; cgroupfs; no default ulimits, which are refused).
# Settings of the test, not of the image: a cluster's runtime needs none of them.
podman_conf=$(mktemp)
printf '[containers]\ndefault_ulimits = []\n' >"$podman_conf"
export CONTAINERS_CONF=$podman_conf
pm() { podman --runtime runc --cgroup-manager=cgroupfs "$@"; }
image=${FP8_IMAGE:-localhost/fp8-train:$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$src/deploy/helm/fp8/Chart.yaml")}
