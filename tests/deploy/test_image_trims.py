"""What the Dockerfile removes from the image is what the bot never runs, read from the source.

The image keeps botocore's API models only for the services in the Dockerfile's ``AWS_SERVICES``
and drops the Kubernetes client's asyncio copy with aiohttp (docs/deploy.md, "Building the
image"). A client made for another AWS service, a grant in the IAM policy for one, or an import of
what is removed would work in a checkout and fail in the image: each is caught here, without
building it (``make image-check`` builds it and looks inside).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
REMOVED = ("kubernetes.aio", "aiohttp", "yarl", "multidict", "frozenlist", "aiosignal",
           "aiohappyeyeballs", "propcache")


def kept_services() -> set[str]:
    (value,) = re.findall(r'^ARG AWS_SERVICES="([^"]*)"$', (ROOT / "Dockerfile").read_text(), re.M)
    return set(value.split())


def test_every_aws_service_the_bot_calls_keeps_its_models_in_the_image() -> None:
    used = set()
    for path in (ROOT / "bot").rglob("*.py"):
        text = path.read_text()
        used |= set(re.findall(r"\.client\(\s*[\"']([a-z0-9-]+)[\"']", text))
        used |= set(re.findall(r"\bservice: str = [\"']([a-z0-9-]+)[\"']", text))
    policy = json.loads((ROOT / "deploy" / "iam-policy.json").read_text())
    granted = {action.split(":")[0] for statement in policy["Statement"]
               for action in ([statement["Action"]] if isinstance(statement["Action"], str)
                              else statement["Action"])}
    assert {"ec2", "sts"} <= used
    assert used | granted <= kept_services(), (used | granted) - kept_services()


def test_nothing_in_the_bot_imports_what_the_image_leaves_out() -> None:
    removed = "|".join(map(re.escape, REMOVED))
    imports = re.compile(rf"^\s*(?:from|import)\s+(?:{removed})\b"
                         r"|^\s*from\s+kubernetes\s+import\s+.*\baio\b", re.M)
    found = [f"{path.relative_to(ROOT)}: {m[0].strip()}" for path in (ROOT / "bot").rglob("*.py")
             for m in imports.finditer(path.read_text())]
    assert not found
    assert imports.search("from kubernetes.aio import client") and imports.search("import aiohttp")
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'rm -rf "$site/kubernetes/aio"' in dockerfile
    assert all(name in dockerfile for name in REMOVED[1:])
