#!/usr/bin/env bash
# Builds private, compile-only ROCm prefixes with hipRTC (no GPU needed):
#
#   PREFIX        Debian 13 (trixie)'s ROCm 5.7.1: gfx90a and gfx942;
#   ROCM6_PREFIX  Debian forky's ROCm 6.4.3 with comgr 7 (LLVM 21): gfx950 (MI350X, MI355X),
#                 which ROCm 5.7's LLVM 17 does not know.
#
# Debian's packages are downloaded through a private apt configuration that reuses this
# machine's own Debian mirror, unpacked with `dpkg -x` into the prefix, and never installed
# system-wide.  Run Python through a prefix's own loader:
#
#   PREFIX/run python ...
#
# Usage: scripts/rocm-prefix.sh [PREFIX [ROCM6_PREFIX]]   (defaults: $FLYCONFIGS_ROCM_PREFIX
#        or ~/.cache/flyconfigs/rocm-prefix, $FLYCONFIGS_ROCM6_PREFIX or
#        ~/.cache/flyconfigs/rocm6-prefix).  Re-running with complete prefixes does nothing.
set -euo pipefail

prefix=${1:-${FLYCONFIGS_ROCM_PREFIX:-$HOME/.cache/flyconfigs/rocm-prefix}}
prefix6=${2:-${FLYCONFIGS_ROCM6_PREFIX:-$HOME/.cache/flyconfigs/rocm6-prefix}}
layout=2  # bump when a prefix's layout or its run script changes

mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  uri=$(awk '/^URIs:/ {print $2; exit}' "$f")
  case "$uri" in */debian) mirror=$uri; break ;; esac
done
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list)
fi
[ -n "$mirror" ] || { echo "rocm-prefix: no Debian mirror found in /etc/apt sources" >&2; exit 1; }

build() {  # build PREFIX SUITE HIP_SO PACKAGES...
  local target=$1 suite=$2 hip_so=$3
  shift 3
  local libdir=$target/usr/lib/x86_64-linux-gnu
  if [ -x "$target/run" ] && [ -e "$libdir/libhiprtc.so" ] && [ "$(cat "$target/.layout" 2>/dev/null)" = "$layout" ]; then
    echo "rocm prefix ready: $target"
    return 0
  fi
  local work
  work=$(mktemp -d)
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" >"$work/sources.list"
  local apt_opts=(
    -o "Dir::Etc::SourceList=$work/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$work/lists"
    -o "Dir::Cache=$work/cache"
    -o "Dir::State::status=/dev/null"
    -o "APT::Architecture=amd64"
    -o "Debug::NoLocking=1"
    -o "APT::Sandbox::User=root"
  )
  apt-get "${apt_opts[@]}" -qq update
  (cd "$work/debs" && apt-get "${apt_opts[@]}" -qq download "$@")
  local staging=$target.partial
  rm -rf "$staging"
  mkdir -p "$staging"
  for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$staging"; done
  rm -rf "$work"
  local slib=$staging/usr/lib/x86_64-linux-gnu
  ln -sf "$hip_so" "$slib/libhiprtc.so"
  ln -sf "$hip_so" "$slib/libamdhip64.so"
  cat >"$staging/run" <<'RUN'
#!/usr/bin/env bash
# Runs a command under this prefix's dynamic loader (plain LD_LIBRARY_PATH crashes).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lib=$here/usr/lib/x86_64-linux-gnu
cmd=$(command -v "$1") || { echo "run: $1 not found" >&2; exit 127; }
shift
# Shims (pyenv and the like) are scripts; the loader needs the real interpreter.
if [ "$(head -c 4 "$cmd" | od -An -c | tr -d ' ')" != '177ELF' ]; then
  cmd=$("$cmd" -c 'import sys; print(sys.executable)') || exit 127
fi
export FLYCONFIGS_ROCM_PREFIX=$here ROCM_PATH=$here/usr
case "$cmd" in /*) ;; *) cmd=$PWD/$cmd ;; esac
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$cmd" "$@"
RUN
  chmod +x "$staging/run"
  echo "$layout" >"$staging/.layout"
  rm -rf "$target"
  mv "$staging" "$target"
  echo "rocm prefix ready: $target"
}

build "$prefix" trixie libamdhip64.so.5 \
  libamdhip64-5 libamd-comgr2 libhsa-runtime64-1 libhsakmt1 libllvm17t64 \
  libc6 libgcc-s1 libstdc++6 libelf1t64 libnuma1 libdrm2 libdrm-amdgpu1 zlib1g libzstd1 \
  libtinfo6 libffi8 libxml2 libedit2 libbsd0 libmd0 liblzma5 libicu76 libz3-4
# ROCm 6's hipRTC lives in libamdhip64.so.6 in Debian's build; its clang headers come
# from libclang-common-21-dev.
build "$prefix6" forky libamdhip64.so.6 \
  libamdhip64-6 libamd-comgr3 libhsa-runtime64-1 libllvm21 libclang-common-21-dev gcc-16-base \
  libc6 libc-gconv-modules-extra libgcc-s1 libstdc++6 libelf1t64 libnuma1 libdrm2 libdrm-common libdrm-amdgpu1 \
  zlib1g libzstd1 libtinfo6 libffi8 libxml2-16 libedit2 libbsd0 libmd0 libz3-4
