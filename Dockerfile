# One image for every Quiver service; compose picks the module per service.
#   docker build --target service -t quiver:latest .     (what compose builds)
#   docker build --target spark -t quiver-spark:latest .  (the compose `spark` profile)
# The base is python:3.11-slim, or, where no registry is reachable, a stand-in of the same
# name that scripts/docker-base.sh builds from Debian's archive (bookworm's python3 is 3.11).
# Both work because Quiver lives in its own venv, /opt/quiver, made by the base's python3
# (so Debian's externally-managed system pip is never used).

FROM python:3.11-slim AS deps
# pip's CA bundle, for the build only (ARGs do not reach the service image). On the stand-in
# the system bundle also holds the host's CAs, for a TLS-intercepting proxy.
ARG PIP_CERT=/etc/ssl/certs/ca-certificates.crt
ARG REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
ENV PATH=/opt/quiver/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# A C compiler for quiver._speedups (setup.py), in the build stages only: the runtime stage
# copies the venv, whose extension needs nothing but libc. python:3.11-slim has the Python
# headers; the Debian stand-in needs python3-dev for them.
RUN headers=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \
    && apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev $([ -f "$headers/Python.h" ] || echo python3-dev) \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/quiver
WORKDIR /src
# Dependencies in a layer of their own: rebuilt only when pyproject.toml changes.
COPY pyproject.toml ./
COPY scripts/requirements.py ./scripts/
RUN python scripts/requirements.py all > /tmp/requirements.txt \
    && pip install -q -r /tmp/requirements.txt "setuptools>=68" wheel

FROM deps AS build
COPY README.md setup.py ./
COPY sdk ./sdk
COPY services ./services
# the compiled fast path must be in the image: fail the build rather than ship without it
RUN pip install -q --no-deps --no-build-isolation . \
    && cd / && python -c 'import sys; from quiver.wire import speedups; sys.exit(0 if speedups.ACTIVE else speedups.REASON)'

# The service venv without the installers (nothing is pip-installed at run time).
FROM build AS venv
RUN pip uninstall -q -y pip setuptools wheel

# No VOLUME: it would give every container without a named volume (namesrv, filter,
# txn-checker keep nothing on disk) an anonymous one that `down` leaves behind. compose
# mounts named volumes at /data; a new one starts as a copy of this /data, owned by quiver.
FROM python:3.11-slim AS runtime
RUN useradd --create-home --uid 10001 quiver && mkdir -p /data && chown quiver /data
ENV PATH=/opt/quiver/bin:$PATH QUIVER_DATA_DIR=/data PYTHONUNBUFFERED=1
WORKDIR /home/quiver

FROM runtime AS service
COPY --from=venv /opt/quiver /opt/quiver
USER quiver
CMD ["python", "-m", "quiver_namesrv"]

# The ingest job of the compose `spark` profile: the same venv plus PySpark, and a JRE.
# PySpark (~500 MB) goes in before the source, so a code edit does not download it again.
FROM deps AS spark-venv
RUN python scripts/requirements.py spark > /tmp/spark.txt && pip install -q -r /tmp/spark.txt
COPY README.md setup.py ./
COPY sdk ./sdk
COPY services ./services
# Quiver itself; then no installers, and none of the libraries' own test suites
# (pandas, pyarrow, numpy: ~60 MB, never imported)
RUN pip install -q --no-deps --no-build-isolation . && pip uninstall -q -y pip setuptools wheel \
    && find /opt/quiver/lib -type d -name tests -prune -exec rm -rf {} +

FROM runtime AS spark
# update-alternatives links the JRE's man pages: the directory is missing on slim bases
RUN mkdir -p /usr/share/man/man1 && apt-get update \
    && apt-get install -y --no-install-recommends default-jre-headless \
    && rm -rf /var/lib/apt/lists/*
COPY --from=spark-venv /opt/quiver /opt/quiver
USER quiver
