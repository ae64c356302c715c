# robosuite 1.5's served simulator (docs/SERVING.md). Build from the checkout's root:
#   docker build -f docker/robosuite.Dockerfile -t assay-sim-robosuite .
#   docker run --rm -p 8710:8710 assay-sim-robosuite
# Not built or run on the machine this was written on (no docker there); its steps are the Makefile's env-robosuite.
FROM python:3.11-slim
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libosmesa6 \
    && rm -rf /var/lib/apt/lists/*
ENV MUJOCO_GL=osmesa PYTHONDONTWRITEBYTECODE=1
WORKDIR /assay
COPY requirements/robosuite.lock requirements/robosuite.lock
RUN python -m pip install -q --no-deps --require-hashes -r requirements/robosuite.lock
COPY src src
RUN echo /assay/src > "$(python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/assay-checkout.pth"
EXPOSE 8710
CMD ["python", "-m", "assay.served", "robosuite", "--host", "0.0.0.0", "--port", "8710", "--clients", "4"]
