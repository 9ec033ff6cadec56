#!/usr/bin/env bash
# The Dockerfile's base image without a registry: when python:3.11-slim is neither present
# nor pullable (an air-gapped machine, no Docker Hub), build a stand-in of the same name from
# Debian's archive with debootstrap: bookworm minbase + python3 (3.11), python3-venv,
# python3-pip, ca-certificates, plus this host's CA certificates (so pip works behind a
# TLS-intercepting proxy), imported with `docker import`.
#
#   bash scripts/docker-base.sh           # no-op when the base is present or can be pulled
#   FORCE=1 bash scripts/docker-base.sh   # build the stand-in anyway (replaces the tag)
#
# Needs root and a running Docker engine; installs debootstrap (apt) when missing.
# Env: DEBIAN_MIRROR (default http://deb.debian.org/debian), DEBIAN_SUITE (bookworm),
#      HOST_CA_DIR (/usr/local/share/ca-certificates).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=$(awk '/^FROM /{print $2; exit}' Dockerfile)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=${DEBIAN_SUITE:-bookworm}
CA_DIR=${HOST_CA_DIR:-/usr/local/share/ca-certificates}

if [ -z "${FORCE:-}" ]; then
  if docker image inspect "$BASE" >/dev/null 2>&1; then
    echo "$BASE is present"; exit 0
  fi
  if timeout 120 docker pull -q "$BASE" >/dev/null 2>&1; then
    echo "$BASE pulled"; exit 0
  fi
  echo "$BASE cannot be pulled: building a stand-in from $MIRROR ($SUITE)"
fi
if ! command -v debootstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

root=$(mktemp -d /var/tmp/quiver-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
  "$SUITE" "$root" "$MIRROR" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"

# the host's CAs, trusted by everything in the image (pip, apt over https, the SDK)
if compgen -G "$CA_DIR/*.crt" >/dev/null; then
  cp "$CA_DIR"/*.crt "$root/usr/local/share/ca-certificates/"
fi
chroot "$root" update-ca-certificates >/dev/null 2>&1  # rehash warns about the bundle itself

# slim like Debian's own images: later apt installs skip docs and man pages, keep no cache
cat >"$root/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
Binary::apt::APT::Keep-Downloaded-Packages "false";
Acquire::GzipIndexes "true";
EOF
echo "deb $MIRROR $SUITE main" >"$root/etc/apt/sources.list"
find "$root/usr/share/doc" -mindepth 2 ! -name copyright -delete 2>/dev/null || true
rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/* "$root"/var/lib/apt/lists/* \
       "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old "$root"/var/log/*.log \
       "$root"/var/log/apt/* "$root"/tmp/*

old=$(docker image inspect -f '{{.Id}}' "$BASE" 2>/dev/null || true)
tar --numeric-owner -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  --message "stand-in for $BASE: debootstrap $SUITE minbase + python3 (scripts/docker-base.sh)" \
  - "$BASE" >/dev/null
[ -z "$old" ] || docker rmi "$old" >/dev/null 2>&1 || true  # the replaced stand-in, unless in use
echo "$BASE built: $(docker image inspect -f '{{.Size}}' "$BASE" | awk '{printf "%.0f MB", $1/1e6}')"
