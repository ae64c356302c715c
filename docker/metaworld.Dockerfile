# Meta-World's served simulator (docs/SERVING.md). Build from the checkout's root:
#   docker build -f docker/metaworld.Dockerfile -t assay-sim-metaworld .
#   docker run --rm -p 8710:8710 assay-sim-metaworld
# Not built or run on the machine this was written on (no docker there). The campaign's side must run the same
# package versions (the handshake compares metaworld, mujoco and numpy with the campaign's environment): install
# the same Assay release on both sides.
FROM python:3.11-slim
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libosmesa6 \
    && rm -rf /var/lib/apt/lists/*
ENV MUJOCO_GL=osmesa PYTHONDONTWRITEBYTECODE=1
WORKDIR /assay
COPY pyproject.toml README.md ./
COPY src src
RUN python -m pip install -q .
EXPOSE 8710
CMD ["python", "-m", "assay.served", "metaworld", "--host", "0.0.0.0", "--port", "8710", "--clients", "4"]
