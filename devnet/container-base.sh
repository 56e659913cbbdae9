#!/usr/bin/env bash
# The base image the project's Dockerfile builds FROM, made here without an
# image registry: Debian bookworm (debootstrap, from Debian's packages) with
# this machine's Rust toolchain, tagged as the official
# `rust:<version>-slim-bookworm` so that `podman build --pull=never` uses it.
#
#   devnet/container-base.sh          # ~2 min once; nothing when the image exists
#
# Also makes podman usable on a Debian host: installs podman, podman-compose,
# buildah, runc and debootstrap (Debian's packages) when missing, and — when the host has
# no containers.conf — sets runc as the runtime (crun refuses cgroups in
# hybrid mode here) and ulimits podman may set (its default RLIMIT_NPROC is
# refused). Needs root.
set -euo pipefail

say() { printf '==> %s\n' "$*"; }

if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null \
  || ! command -v podman-compose >/dev/null; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "container-base.sh: podman, runc and debootstrap are needed (apt-get install podman podman-compose buildah runc debootstrap, as root)" >&2
    exit 2
  fi
  say "installing podman, podman-compose, buildah, runc, debootstrap (Debian packages)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman podman-compose buildah runc debootstrap >/dev/null
fi
if [ ! -s /etc/containers/containers.conf ]; then
  mkdir -p /etc/containers
  printf '%s\n' '[containers]' 'default_ulimits = ["nofile=20000:20000", "nproc=1024:1024"]' \
    '[engine]' 'runtime = "runc"' >/etc/containers/containers.conf
fi

version=$(rustc --version | awk '{ print $2 }')
tag="docker.io/library/rust:${version}-slim-bookworm"
if podman image exists "$tag"; then
  say "base image $tag: present"
  exit 0
fi
say "base image $tag: building from Debian bookworm and this machine's Rust $version"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
mkdir -p "$root"
if ! debootstrap --variant=minbase --include=ca-certificates,gcc,libc6-dev bookworm "$root" \
  >"$work/debootstrap.log" 2>&1; then
  tail -n 20 "$work/debootstrap.log" >&2
  echo "container-base.sh: debootstrap failed (above)" >&2
  exit 1
fi
# The certificate authorities the host trusts beyond Debian's, so cargo and
# apt inside a build reach the registries as the host does.
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null 2>&1
fi
toolchain=$(readlink -f "$(rustc --print sysroot)")
name="${version}-$(rustc -vV | sed -n 's/^host: //p')"
mkdir -p "$root/usr/local/rustup/toolchains" "$root/usr/local/cargo/bin"
cp -a "$toolchain" "$root/usr/local/rustup/toolchains/$name"
rm -rf "$root/usr/local/rustup/toolchains/$name/share/doc"
for tool in cargo rustc rustdoc; do
  ln -sf "../../rustup/toolchains/$name/bin/$tool" "$root/usr/local/cargo/bin/$tool"
done
rm -f "$root"/var/cache/apt/archives/*.deb
tar -C "$root" -c . | podman import \
  -c 'ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'ENV RUSTUP_HOME=/usr/local/rustup' -c 'ENV CARGO_HOME=/usr/local/cargo' -c "ENV RUST_VERSION=$version" \
  - "$tag" >/dev/null
podman run --rm --pull=never "$tag" cargo --version
