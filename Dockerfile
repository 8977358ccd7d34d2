# runbook-bot's container image: `docker build .` or `podman build .` from the top of the source tree.
#
# Two stages: the first installs the package and its runbooks into a virtual environment, the
# second copies that environment onto a clean base and runs it as an unprivileged user. Nothing is
# compiled (every dependency ships wheels), and no compiler, pip or source tree is in the result.
#
# Build arguments:
#   BASE       the Python base image, used by both stages (a slim Debian one by default); any image
#              with python3 (3.11 or later) and its venv module works
#   VERSION, REVISION, CREATED, SOURCE   recorded in the OCI labels (e.g. a tag,
#              `git rev-parse HEAD`, `date -u +%Y-%m-%dT%H:%M:%SZ`, the repository's URL)
#   PIP_INDEX_URL, PIP_NO_INDEX, PIP_FIND_LINKS   passed to pip for a mirror or an offline build
#              (docs/deploy.md, "Building the image")
ARG BASE=docker.io/library/python:3.12-slim-bookworm

FROM ${BASE} AS build
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG PIP_NO_INDEX=0
ARG PIP_FIND_LINKS=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
RUN python3 -m venv /opt/runbook-bot
COPY pyproject.toml README.md /src/
COPY bot /src/bot
COPY runbooks /src/runbooks
COPY templates /src/templates
RUN /opt/runbook-bot/bin/pip install --no-compile "/src[postgres]" \
    && /opt/runbook-bot/bin/pip uninstall --yes pip setuptools \
    && /opt/runbook-bot/bin/python -m compileall -q /opt/runbook-bot/lib \
    && /opt/runbook-bot/bin/runbook-bot --version

FROM ${BASE}
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=unknown
ARG SOURCE=
LABEL org.opencontainers.image.title="runbook-bot" \
      org.opencontainers.image.description="A ChatOps bot that walks on-call engineers through guarded, approved, audited incident runbooks." \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
# A fixed uid/gid so the Kubernetes securityContext (runAsUser 10001) and file ownership agree.
RUN groupadd --gid 10001 runbook-bot \
    && useradd --uid 10001 --gid 10001 --home-dir /var/lib/runbook-bot --create-home \
       --shell /usr/sbin/nologin runbook-bot
COPY --from=build /opt/runbook-bot /opt/runbook-bot
ENV PATH=/opt/runbook-bot/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/var/lib/runbook-bot
WORKDIR /var/lib/runbook-bot
USER 10001:10001
# the Slack port, the ops port (probes, metrics) and the alerts port: docs/deploy.md, "Ports"
EXPOSE 3000 9464 9095
ENTRYPOINT ["runbook-bot"]
CMD ["slack", "serve"]
