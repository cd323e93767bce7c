#!/usr/bin/env bash
# Builds a private, compile-only ROCm prefix with hipRTC for gfx942 (no GPU needed).
#
# Debian 13's ROCm 5.7.1 packages are downloaded through a private apt configuration
# that reuses this machine's own Debian mirror, unpacked with `dpkg -x` into PREFIX,
# and never installed system-wide.  Run Python through the prefix's own loader:
#
#   PREFIX/run python ...
#
# Usage: scripts/rocm-prefix.sh [PREFIX]   (default: $FLYCONFIGS_ROCM_PREFIX or
#        ~/.cache/flyconfigs/rocm-prefix).  Re-running with a complete prefix does nothing.
set -euo pipefail

prefix=${1:-${FLYCONFIGS_ROCM_PREFIX:-$HOME/.cache/flyconfigs/rocm-prefix}}
libdir=$prefix/usr/lib/x86_64-linux-gnu
layout=2  # bump when the prefix's layout or its run script changes
if [ -x "$prefix/run" ] && [ -e "$libdir/libhiprtc.so" ] && [ "$(cat "$prefix/.layout" 2>/dev/null)" = "$layout" ]; then
  echo "rocm prefix ready: $prefix"
  exit 0
fi

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

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main" >"$work/sources.list"
apt_opts=(
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
packages=(libamdhip64-5 libamd-comgr2 libhsa-runtime64-1 libhsakmt1 libllvm17t64
          libc6 libgcc-s1 libstdc++6 libelf1t64 libnuma1 libdrm2 libdrm-amdgpu1 zlib1g libzstd1
          libtinfo6 libffi8 libxml2 libedit2 libbsd0 libmd0 liblzma5 libicu76 libz3-4)
(cd "$work/debs" && apt-get "${apt_opts[@]}" -qq download "${packages[@]}")

staging=$prefix.partial
rm -rf "$staging"
mkdir -p "$staging"
for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$staging"; done
slib=$staging/usr/lib/x86_64-linux-gnu
ln -sf libamdhip64.so.5 "$slib/libhiprtc.so"
ln -sf libamdhip64.so.5 "$slib/libamdhip64.so"
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
rm -rf "$prefix"
mv "$staging" "$prefix"
echo "rocm prefix ready: $prefix"
