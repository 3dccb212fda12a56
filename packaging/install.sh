#!/bin/sh
# Install envd with its own interpreter prefix, a launcher and the systemd unit. Idempotent:
# running it again upgrades envd in place. Run as root.
#
#   packaging/install.sh [--root DIR] [--prefix DIR] [--python PATH] [--bin-dir DIR]
#                     [--unit-dir DIR] [--commit SHA] [--wheel PATH] [--enable]
#   packaging/install.sh --artifact PATH [--root DIR] [--prefix DIR] [--bin-dir DIR]
#                     [--unit-dir DIR] [--enable]
#
#   --artifact PATH install the self-contained build of packaging/build-artifact (a tarball,
#                   checked against PATH.sha256 when that exists) instead of making a venv: the
#                   target needs no Python at all; its commit is the one stamped at build time
#   --root DIR      install into the root file system mounted at DIR (an image being built):
#                   every step runs chrooted into DIR with DIR's own python3 (with --artifact,
#                   nothing runs in DIR)
#   --prefix DIR    envd's private prefix (default /usr/lib/envd): a venv of the system python3
#   --python PATH   the interpreter the venv is made from (default /usr/bin/python3, >= 3.11)
#   --bin-dir DIR   where the launcher `envd` goes (default /usr/bin, which the unit runs)
#   --unit-dir DIR  where envd.service goes (default /lib/systemd/system)
#   --commit SHA    the build commit `envd -commit` prints (default: the source tree's git HEAD)
#   --wheel PATH    install this envd wheel (its commit stamped at its build) instead of building
#                   one from the source tree: what a sandboxd wheel ships with this script
#   --enable        enable envd.service (and, on a running system, start or restart it)
#
# Why a prefix of its own: the interpreter is part of the artifact. Templates pip-install into
# the system Python, set PYTHONPATH, or upgrade packages envd depends on; the launcher runs
# `<prefix>/bin/python -I -m envd`, and -I ignores PYTHONPATH, PYTHONHOME and the user's site
# directory, so none of that reaches envd.
set -eu

root=""
prefix=/usr/lib/envd
python=/usr/bin/python3
bin_dir=/usr/bin
unit_dir=/lib/systemd/system
commit=""
enable=no
artifact=""
wheel=""
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --bin-dir) bin_dir=$2; shift 2 ;;
    --unit-dir) unit_dir=$2; shift 2 ;;
    --commit) commit=$2; shift 2 ;;
    --enable) enable=yes; shift ;;
    --artifact) artifact=$2; shift 2 ;;
    --wheel) wheel=$2; shift 2 ;;
    -h | --help) sed -n '2,22s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

fail() {
  echo "install.sh: $*" >&2
  exit 1
}

[ "$(id -u)" = 0 ] || fail "run as root"
src=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$src/packaging/envd.service" ] || fail "no packaging/envd.service at $src"
if [ -n "$wheel" ]; then
  [ -f "$wheel" ] || fail "no wheel at $wheel"
  [ -z "$commit" ] || fail "--commit: a wheel's commit is stamped when it is built"
elif [ -z "$artifact" ]; then
  { [ -f "$src/pyproject.toml" ] && [ -d "$src/envd" ]; } || fail "no envd source tree at $src"
fi
if [ -n "$root" ]; then
  root=$(cd "$root" && pwd) || fail "no root file system at $root"
  [ "$root" != / ] || root=""
fi

# The unit, the summary line and --enable: the same for both kinds of install.
finish() { # VERSION COMMIT
  mkdir -p "$root$unit_dir"
  install -m 0644 "$src/packaging/envd.service" "$root$unit_dir/envd.service"
  echo "install.sh: envd $1 (commit $2) in ${root:-}$prefix, unit in ${root:-}$unit_dir"
  # systemd is managing this system (not an image being built) when /run/systemd/system exists.
  running=no
  [ -z "$root" ] && [ -d /run/systemd/system ] && running=yes
  [ $running = no ] || systemctl daemon-reload
  if [ $enable = yes ]; then
    if [ -n "$root" ]; then
      systemctl --root="$root" enable envd.service
    else
      systemctl enable envd.service
      [ $running = no ] || systemctl restart envd.service
    fi
  fi
}

# The self-contained artifact: unpacked as the prefix (replacing a venv or an older artifact), the
# launcher a symlink to its bin/envd. Nothing runs inside the target, which needs no Python; the
# artifact runs from wherever it lies, so its version is read here, outside any chroot.
if [ -n "$artifact" ]; then
  [ -f "$artifact" ] || fail "no artifact at $artifact"
  if [ -f "$artifact.sha256" ]; then
    want_sum=$(cut -d ' ' -f 1 "$artifact.sha256")
    [ "$(sha256sum "$artifact" | cut -d ' ' -f 1)" = "$want_sum" ] ||
      fail "$artifact does not match $artifact.sha256"
  fi
  rm -rf "$root$prefix.new"
  mkdir -p "$root$prefix.new"
  tar -C "$root$prefix.new" --strip-components=1 --no-same-owner -xzf "$artifact" ||
    fail "cannot unpack $artifact"
  artifact_version=$("$root$prefix.new/bin/envd" -version) ||
    fail "$artifact does not run here (an x86-64 Linux with glibc >= 2.28 is needed)"
  artifact_commit=$("$root$prefix.new/bin/envd" -commit)
  rm -rf "$root$prefix"
  mv "$root$prefix.new" "$root$prefix"
  mkdir -p "$root$bin_dir"
  ln -sfn "$prefix/bin/envd" "$root$bin_dir/envd"
  finish "$artifact_version" "$artifact_commit"
  exit 0
fi

# Run a command inside the target: chrooted into --root (with /proc, /sys and /dev mounted for
# the duration, as pip and venv need them), or directly.
mounted=""
stage=""
cleanup() {
  [ -z "$stage" ] || rm -rf "$root$stage"
  for m in $mounted; do umount -l "$root$m" || true; done
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM
in_target() {
  if [ -n "$root" ]; then
    chroot "$root" "$@"
  else
    "$@"
  fi
}
if [ -n "$root" ]; then
  for m in /proc /sys /dev; do
    if ! mountpoint -q "$root$m"; then
      mkdir -p "$root$m"
      mount --rbind "$m" "$root$m"
      mount --make-rslave "$root$m"
      mounted="$m $mounted"
    fi
  done
  # pip downloads the dependencies from inside the target: it needs a resolver configuration.
  [ -s "$root/etc/resolv.conf" ] || cp -L /etc/resolv.conf "$root/etc/resolv.conf"
fi

in_target "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  fail "$python is missing or older than 3.11: install python3 >= 3.11 (and its venv module) first"

# The wheel is staged inside the target, where pip runs. Without --wheel: a copy of the source
# with the build commit in a generated envd/_build.py (a source tree has none and says
# "unknown"), built in the target, against the target's Python, further down.
stage=$(mktemp -d -p "$root/var/tmp" envd-install.XXXXXX)
stage=${stage#"$root"}
if [ -n "$wheel" ]; then
  mkdir "$root$stage/dist"
  cp "$wheel" "$root$stage/dist/"
else
  tar -C "$src" --exclude=__pycache__ -cf - pyproject.toml README.md envd | tar -C "$root$stage" -xf -
  [ -n "$commit" ] || commit=$(git -C "$src" rev-parse --short=7 HEAD 2>/dev/null || echo unknown)
  case "$commit" in *[!0-9A-Za-z._-]*) fail "--commit: letters, digits, '.', '_' and '-' only" ;; esac
  printf '"""Written by packaging/install.sh."""\n\nCOMMIT = "%s"\n' "$commit" >"$root$stage/envd/_build.py"
fi
chmod -R a+rX "$root$stage"

# Recreate the venv when its interpreter is gone or is a different Python than the target's
# (e.g. the image moved to a newer Debian), otherwise upgrade it in place.
want=$(in_target "$python" -c 'import sys; print(sys.version_info[:2])')
have=$(in_target "$prefix/bin/python" -I -c 'import sys; print(sys.version_info[:2])' 2>/dev/null || true)
if [ "$want" != "$have" ]; then
  rm -rf "$root$prefix"
  in_target "$python" -m venv "$prefix" ||
    fail "cannot create a venv with $python: install its venv module (Debian: python3-venv)"
fi
# Build a wheel (not an editable install: the prefix must not depend on this source tree) unless
# one was given, then replace envd itself even when the version is unchanged, and add any
# missing dependency.
[ -n "$wheel" ] || in_target env PIP_DISABLE_PIP_VERSION_CHECK=1 \
  "$prefix/bin/python" -I -m pip wheel -q --no-deps -w "$stage/dist" "$stage"
envd_wheel=$(cd "$root$stage/dist" && ls ./*.whl)
envd_wheel=${envd_wheel#./}
in_target env PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_WARN_SCRIPT_LOCATION=1 \
  "$prefix/bin/python" -I -m pip install -q --force-reinstall --no-deps \
  "$stage/dist/$envd_wheel"
in_target env PIP_DISABLE_PIP_VERSION_CHECK=1 \
  "$prefix/bin/python" -I -m pip install -q "$stage/dist/$envd_wheel"
# Byte-compile everything in the prefix now, so the first start does not pay for it (pip's own
# compile step is skipped when PYTHONDONTWRITEBYTECODE is set).
in_target "$prefix/bin/python" -I -m compileall -q -j 0 "$prefix/lib" >/dev/null

# The spawn helper (envd/process/spawn_helper.c, from the installed envd), prebuilt as a static binary with this host's
# compiler: images without one get it too, and envd's first start does not compile it. Skipped
# (envd then builds it itself when it can, or starts children without it) when there is no
# compiler or static libc here, or the target is another architecture.
helper=""
cc=$(command -v cc || command -v gcc || true)
if [ -n "$cc" ] && [ "$(in_target "$python" -c 'import platform; print(platform.machine())')" = "$(uname -m)" ]; then
  mkdir -p "$root$prefix/libexec"
  package=$(in_target "$prefix/bin/python" -I -c 'import envd.process as p; print(p.__path__[0])')
  if "$cc" -O2 -static -o "$root$prefix/libexec/spawn-helper" "$root$package/spawn_helper.c" 2>/dev/null; then
    helper=$prefix/libexec/spawn-helper
  fi
fi

# The launcher: the only thing outside the prefix besides the unit. exec keeps the PID, so
# systemd's main process (Type=notify, NotifyAccess=main) is envd itself.
mkdir -p "$root$bin_dir"
{
  echo '#!/bin/sh'
  echo "# envd launcher, installed by envd's packaging/install.sh: envd's private interpreter, isolated."
  [ -z "$helper" ] || echo "export ENVD_SPAWN_HELPER=$helper"
  echo "exec $prefix/bin/python -I -m envd \"\$@\""
} >"$root$bin_dir/envd.new"
chmod 0755 "$root$bin_dir/envd.new"
mv -f "$root$bin_dir/envd.new" "$root$bin_dir/envd"

finish "$(in_target "$bin_dir/envd" -version)" "$(in_target "$bin_dir/envd" -commit)"
