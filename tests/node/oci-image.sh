#!/usr/bin/env bash
# Writes a one-layer OCI image layout tarball (what `ctr images import`
# takes) from a directory, without a registry or a container daemon: the
# layer is the directory as an uncompressed, reproducible tar (sorted
# names, owner root, time 0); the config names the entrypoint and user.
# Usage: oci-image.sh ROOTFS NAME:TAG ENTRYPOINT USER OUT.tar
set -euo pipefail
rootfs="$1" ref="$2" entrypoint="$3" user="$4" out="$5"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
blobs="$work/layout/blobs/sha256"
mkdir -p "$blobs"
# Stores stdin as a blob; prints "DIGEST SIZE".
blob() {
  cat >"$work/blob"
  local digest size
  digest="$(sha256sum "$work/blob" | cut -d' ' -f1)"
  size="$(stat -c %s "$work/blob")"
  mv "$work/blob" "$blobs/$digest"
  echo "$digest $size"
}
(cd "$rootfs" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort >"$work/files")
read -r layer layer_size < <(tar -C "$rootfs" --no-recursion --numeric-owner --owner=0 \
  --group=0 --mtime=@0 -cf - -T "$work/files" | blob)
read -r config config_size < <(printf '%s' "{\"architecture\":\"amd64\",\"os\":\"linux\",\
\"config\":{\"Entrypoint\":[\"$entrypoint\"],\"User\":\"$user\",\"WorkingDir\":\"/\"},\
\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$layer\"]}}" | blob)
read -r manifest manifest_size < <(printf '%s' "{\"schemaVersion\":2,\
\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\
\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\
\"digest\":\"sha256:$config\",\"size\":$config_size},\
\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\
\"digest\":\"sha256:$layer\",\"size\":$layer_size}]}" | blob)
printf '%s' "{\"schemaVersion\":2,\"manifests\":[{\
\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\
\"digest\":\"sha256:$manifest\",\"size\":$manifest_size,\
\"annotations\":{\"org.opencontainers.image.ref.name\":\"$ref\"}}]}" >"$work/layout/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"
(cd "$work/layout" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort >"$work/layout-files")
tar -C "$work/layout" --no-recursion --numeric-owner --owner=0 --group=0 \
  --mtime=@0 -cf "$out" -T "$work/layout-files"
