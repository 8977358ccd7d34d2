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
#   EXTRAS     the package's optional extras installed (default "postgres"); "postgres,mcp" adds
#              the MCP server for AI agents (`runbook-bot mcp serve`, docs/agents.md)
#   AWS_SERVICES   the AWS services whose API models botocore keeps: EC2 and STS, which the bot
#              calls, and EKS (0.1 MB, for access to EKS clusters); the other 400-odd are removed
# The image's own name is not an argument of the build: `make image IMAGE=...` tags it.
ARG BASE=docker.io/library/python:3.12-slim-bookworm

FROM ${BASE} AS build
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG PIP_NO_INDEX=0
ARG PIP_FIND_LINKS=
ARG AWS_SERVICES="ec2 sts eks"
ARG EXTRAS=postgres
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
RUN python3 -m venv /opt/runbook-bot
COPY pyproject.toml README.md /src/
COPY bot /src/bot
COPY runbooks /src/runbooks
COPY templates /src/templates
# What the bot never runs is removed before compiling (docs/deploy.md, "Building the image"):
# the kubernetes client's asyncio copy (kubernetes.aio) and aiohttp, which only it uses; the API
# models of AWS services the bot does not call; pip and setuptools. Then the command line, the
# Slack app and the clients are imported and an AWS client of each service kept is made, so a
# trim too far fails here.
RUN /opt/runbook-bot/bin/pip install --no-compile "/src[${EXTRAS}]" \
    && /opt/runbook-bot/bin/pip uninstall --yes aiohttp aiohappyeyeballs aiosignal frozenlist \
       multidict propcache yarl \
    && /opt/runbook-bot/bin/pip uninstall --yes pip setuptools \
    && site=$(/opt/runbook-bot/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') \
    && rm -rf "$site/kubernetes/aio" \
    && keep=$(for s in $AWS_SERVICES; do printf ' ! -name %s' "$s"; done) \
    && find "$site/botocore/data" -mindepth 1 -maxdepth 1 -type d $keep -exec rm -rf {} + \
    && /opt/runbook-bot/bin/python -m compileall -q /opt/runbook-bot/lib \
    && /opt/runbook-bot/bin/python -c 'import sys, boto3, bot.cli, bot.frontends.slack.app, \
bot.clients.kube, bot.clients.aws; s = boto3.Session(region_name="us-east-1", \
aws_access_key_id="x", aws_secret_access_key="x"); [s.client(n) for n in sys.argv[1:]]' \
       $AWS_SERVICES \
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
