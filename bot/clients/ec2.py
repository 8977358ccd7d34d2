"""The EC2 client: the only importer of boto3/botocore in the product.

``boto3_client`` builds a botocore EC2 client with the configured retry mode; endpoints come from
the standard environment (``AWS_ENDPOINT_URL_EC2``) unless given, so production and the sandbox are
reached the same way.
"""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config


def boto3_client(
    *,
    region: str,
    endpoint_url: str | None = None,
    profile: str | None = None,
    retry_mode: str = "standard",
    max_attempts: int = 5,
    timeout: float = 30.0,
    credentials: dict[str, str] | None = None,
) -> Any:
    """A raw botocore EC2 client (retry mode, timeouts, optional endpoint and profile)."""
    session = boto3.session.Session(profile_name=profile, **(credentials or {}))
    config = Config(
        region_name=region,
        retries={"mode": retry_mode, "max_attempts": max_attempts},
        connect_timeout=timeout,
        read_timeout=timeout,
    )
    return session.client("ec2", endpoint_url=endpoint_url, config=config)
