# LIBERO's served simulator (docs/SERVING.md), robosuite 1.4 and LIBERO-PRO from requirements/libero.lock.
#   docker build -f docker/libero.Dockerfile -t assay-sim-libero .
#   docker run --rm -p 8710:8710 assay-sim-libero
# Not built or run on the machine this was written on (no docker there). A LIBERO environment holds ~1.4 GB: give
# the container that much per --clients.
FROM python:3.11-slim
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libosmesa6 \
    && rm -rf /var/lib/apt/lists/*
ENV MUJOCO_GL=osmesa PYTHONDONTWRITEBYTECODE=1
WORKDIR /assay
COPY pyproject.toml README.md ./
COPY requirements/libero.lock requirements/libero.lock
COPY src src
RUN python -m pip install -q --no-deps --require-hashes -r requirements/libero.lock && python -m pip install -q '.[libero]'
EXPOSE 8710
CMD ["python", "-m", "assay.served", "libero", "--host", "0.0.0.0", "--port", "8710", "--clients", "2"]
