#!/usr/bin/env bash
# The two commands on a bare machine: build a minimal Debian root (debootstrap, minbase:
# python3 and make, nothing else: no compiler, no libgomp1, no graphviz, no venv module),
# put a clean clone of this repository's HEAD in it (../shared beside it, as CI has), and
# run `make setup`, one decode and `make test` inside, printing each one's time.
#
#   sudo scripts/bare_machine.sh bookworm           # Debian 12
#   sudo scripts/bare_machine.sh trixie             # Debian 13
#   sudo scripts/bare_machine.sh bookworm setup     # only `make setup` and one decode
#
# Root only (debootstrap, chroot, mounts). The root is kept in /var/tmp/cfsm-bare-SUITE
# (BARE_ROOT overrides) and reused; delete it for a fresh start. This machine's pip
# settings (PIP_* variables, /etc/xdg/pip, local wheel folders) are passed in, so the root
# reaches the same package index as the machine it runs on. Extra variables for the root
# go in BARE_ENV (e.g. BARE_ENV="CFSM_TORCH=torch==2.13.0").
set -euo pipefail
SUITE="${1:?usage: bare_machine.sh bookworm|trixie [setup|test]}"
WHAT="${2:-test}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
ROOT="${BARE_ROOT:-/var/tmp/cfsm-bare-$SUITE}"
MIRROR="${BARE_MIRROR:-$(sed -n 's/^URIs: *\(.*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"

command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
if [ ! -x "$ROOT/usr/bin/python3" ]; then
  t0=$SECONDS
  debootstrap --variant=minbase --include=python3,make "$SUITE" "$ROOT" "$MIRROR" >/dev/null
  echo "bare: $SUITE root built in $((SECONDS - t0)) s ($ROOT)"
fi
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"

mounts=()
bind() {  # bind SRC (read-only where asked) at the same path inside the root
  mkdir -p "$ROOT$1"
  mount --bind "$1" "$ROOT$1"
  mounts+=("$ROOT$1")
}
cleanup() { for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" || true; done; }
trap cleanup EXIT
mount -t proc proc "$ROOT/proc" && mounts+=("$ROOT/proc")
bind /dev
bind /dev/pts
for d in /opt/wheels /opt/pypi /opt/pypi-more; do [ -d "$d" ] && bind "$d"; done
if [ -d /etc/xdg/pip ]; then mkdir -p "$ROOT/etc/xdg" && cp -r /etc/xdg/pip "$ROOT/etc/xdg/"; fi

rm -rf "$ROOT/root/cfsm-lab" "$ROOT/root/shared"
git clone -q "$REPO" "$ROOT/root/cfsm-lab"
[ -d "$REPO/../shared" ] && cp -r "$REPO/../shared" "$ROOT/root/shared"
env_in=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 CI=true)
for v in $(env | sed -n 's/^\(PIP_[A-Z_]*\)=.*/\1/p'); do env_in+=("$v=${!v}"); done
if [ -n "${PIP_CERT:-}" ] && [ -f "$PIP_CERT" ]; then  # this machine's CA bundle, for pip only
  cp "$PIP_CERT" "$ROOT/etc/host-pip-ca.crt"
  env_in+=(PIP_CERT=/etc/host-pip-ca.crt)
fi
read -r -a extra <<< "${BARE_ENV:-}"
in_root() { chroot "$ROOT" env -i "${env_in[@]}" "${extra[@]}" bash -c "cd /root/cfsm-lab && $1"; }

echo "bare: $(chroot "$ROOT" sh -c '. /etc/os-release; echo "$PRETTY_NAME"'), $(chroot "$ROOT" python3 --version)"
t0=$SECONDS
in_root "make setup"
echo "bare: make setup exit 0 in $((SECONDS - t0)) s"
t0=$SECONDS
in_root ".venv/bin/python -m cfsm generate --regex '(yes|no)' --prompt 'Is water wet?' --json |
  .venv/bin/python -c 'import json, sys; t = json.load(sys.stdin); m = t[\"model\"]
print(\"bare: decoded\", repr(t[\"text\"]), \"on\", m[\"runtime\"], m.get(\"runtime_note\") or \"\")'"
echo "bare: first cfsm generate in $((SECONDS - t0)) s"
if [ "$WHAT" = test ]; then
  t0=$SECONDS
  in_root "make test"
  echo "bare: make test exit 0 in $((SECONDS - t0)) s"
fi
