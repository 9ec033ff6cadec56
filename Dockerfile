# One image for every Quiver service; compose picks the module per service.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY sdk ./sdk
COPY services ./services
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[postgres]"

FROM python:3.11-slim AS service
RUN useradd --create-home --uid 10001 quiver && mkdir -p /data && chown quiver /data
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER quiver
WORKDIR /home/quiver
VOLUME ["/data"]
ENV QUIVER_DATA_DIR=/data PYTHONUNBUFFERED=1
CMD ["python", "-m", "quiver_namesrv"]

# The ingest job of the compose `spark` profile: the same package plus PySpark and a JRE.
FROM service AS spark
USER root
RUN apt-get update && apt-get install -y --no-install-recommends default-jre-headless \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src /src
RUN pip install --no-cache-dir "/src[spark]" && rm -rf /src
USER quiver
