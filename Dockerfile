# The controller image: `multikueue run` (manager or worker role, see --help).
#
# Two stages on the same base: the builder makes a wheel of this package and
# installs it with its dependencies into a virtualenv at /opt/multikueue; the
# final stage copies only that virtualenv. The base is a build argument so the
# image also builds where no registry is reachable: hack/image.sh then makes an
# equivalent Debian bookworm base with debootstrap (its python3 is
# /usr/bin/python3, the python:* images' is /usr/local/bin/python3; both are
# found on PATH). The venv links to the base's interpreter, so both stages must
# use the same BASE_IMAGE.
#
#   hack/image.sh                       # picks or makes the base, then builds
#   docker build --build-arg BASE_IMAGE=python:3.12-slim-bookworm -t multikueue:dev .
ARG BASE_IMAGE=python:3.12-slim-bookworm

FROM ${BASE_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1
# PEM certificates pip must trust besides the base's bundle, for builds behind a
# TLS-intercepting proxy (hack/image.sh passes the host's local CAs). They go to
# this stage's /etc/pip.conf only: the final image never sees them.
ARG EXTRA_CA_CERTS=""
RUN python3 -m venv /opt/multikueue \
 && if [ -n "$EXTRA_CA_CERTS" ]; then \
      { cat /etc/ssl/certs/ca-certificates.crt; printf '%s\n' "$EXTRA_CA_CERTS"; } > /etc/pip-ca.pem \
      && printf '[global]\ncert = /etc/pip-ca.pem\n' > /etc/pip.conf; \
    fi
WORKDIR /src
# Dependencies first, from pyproject.toml alone, so that a code change reuses this layer.
COPY pyproject.toml ./
RUN python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' > /tmp/requirements.txt \
 && /opt/multikueue/bin/pip install --prefer-binary --requirement /tmp/requirements.txt
COPY README.md ./
COPY multikueue ./multikueue
# The wheel (not an editable or in-tree install): what a release would ship.
# --no-deps: everything it needs is already there; `pip check` proves it.
# Then the trims (the image would be about 255 MB without them):
# - pip and setuptools are build tools;
# - kubernetes.aio is a second, asyncio copy of the whole API client (65 MB)
#   that nothing here imports (the controller uses kubernetes.client, kopf its
#   own aiohttp client);
# - the generated API classes and models of kubernetes.client (api/, models/:
#   32 MB of source next to 23 MB of bytecode) are kept as bytecode only,
#   without their docstrings (17 MB): `compileall -b -o 2` writes foo.pyc
#   beside foo.py, which Python loads without the source. Their tracebacks show
#   no source lines; the hand-written client modules (api_client, rest,
#   configuration ...) keep theirs.
# Everything else is compiled in place, so no import compiles at start-up.
# The last lines prove the controller still imports what it uses.
RUN /opt/multikueue/bin/pip wheel --no-deps --wheel-dir /tmp/wheels . \
 && /opt/multikueue/bin/pip install --no-deps /tmp/wheels/multikueue-*.whl \
 && /opt/multikueue/bin/pip check \
 && /opt/multikueue/bin/pip uninstall --yes pip setuptools \
 && cd /opt/multikueue/lib/python3*/site-packages/kubernetes \
 && rm -rf aio \
 && for generated in client/api client/models; do \
      find "$generated" -name __pycache__ -prune -exec rm -rf {} + \
      && /opt/multikueue/bin/python -m compileall -q -b -o 2 "$generated" \
      && find "$generated" -name '*.py' -delete; \
    done \
 && cd / \
 && /opt/multikueue/bin/python -m compileall -q /opt/multikueue/lib \
 && /opt/multikueue/bin/multikueue --help > /dev/null \
 && /opt/multikueue/bin/python -c 'import multikueue.cli.main, multikueue.operator, kubernetes.config, kubernetes.watch; from kubernetes import client; client.CoreV1Api, client.CustomObjectsApi, client.V1Pod' \
 && rm -rf /tmp/wheels /tmp/requirements.txt /root/.cache

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="multikueue" \
      org.opencontainers.image.description="Kueue's multi-cluster job dispatcher (MultiKueue) in Python" \
      org.opencontainers.image.licenses="Apache-2.0"
# Bytecode is compiled at build time; the user cannot write to /opt anyway.
ENV PATH=/opt/multikueue/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LANG=C.UTF-8
# A named account for the numeric UID, so tools that look the user up work.
RUN groupadd --system --gid 65532 multikueue \
 && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin multikueue
COPY --from=builder /opt/multikueue /opt/multikueue
USER 65532:65532
WORKDIR /
# Liveness (/healthz) and metrics defaults of `multikueue run`.
EXPOSE 8081 8080
ENTRYPOINT ["multikueue", "run"]
