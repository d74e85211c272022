"""The VPC firewall rule that lets the notebook reach a warm session's relay directly (``nbburst setup``, doctor).

A session VM's relay listens on :data:`~nbburst.protocol.sessionpush.PORT` with mutual TLS
(docs/sessions.md). Compute Engine drops that traffic unless a rule admits it: this one allows TCP to that
port only, only from the source ranges the user names (the notebook's address), and only to VMs carrying
:data:`SESSION_TAG`, which session VMs carry and no other VM of nbburst does. Without the rule everything
still works: the cells of a session go through the Store relay, more slowly.

Firewall rules: https://cloud.google.com/compute/docs/reference/rest/v1/firewalls
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from ...errors import BurstError, UsageError
from ...protocol.sessionpush import PORT
from ..base import Check
from . import api as gce_api
from .context import GCEContext

#: The network tag of session VMs, the rule's only target.
SESSION_TAG = "nbburst-session"
#: The rule's name in the project.
RULE = "nbburst-session-push"


def network_name(context: GCEContext) -> str:
    return gce_api.resource_name(context.settings.network or "default")


def create_command(network: str, sources: list[str] | None = None) -> str:
    """The gcloud command that makes the rule (shown where the rule is missing)."""
    ranges = ",".join(sources or ["YOUR_IP/32"])
    return (
        f"gcloud compute firewall-rules create {RULE} --network {network} --direction INGRESS "
        f"--allow tcp:{PORT} --source-ranges {ranges} --target-tags {SESSION_TAG}  "
        f"(or: nbburst setup --session-source {ranges})"
    )


def check_sources(sources: list[str]) -> list[str]:
    """The source ranges, each a CIDR block; ``0.0.0.0/0`` is refused (the port is for the notebook only)."""
    checked = []
    for source in sources:
        try:
            block = ipaddress.ip_network(source.strip(), strict=False)
        except ValueError:
            raise UsageError(
                f"--session-source: {source!r} is not an address or CIDR range, e.g. 203.0.113.7/32"
            ) from None
        if block.prefixlen == 0:
            raise UsageError("--session-source: a range of every address would open the port to anyone; name yours")
        checked.append(str(block))
    return checked


def resource(network: str, project: str, sources: list[str]) -> Any:
    """The rule as ``firewalls.insert`` takes it."""
    from google.cloud import compute_v1

    return compute_v1.Firewall(
        name=RULE,
        description="nbburst: the notebook reaches its warm sessions' relays (mutual TLS) on this port",
        network=f"projects/{project}/global/networks/{network}",
        direction="INGRESS",
        priority=1000,
        allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=[str(PORT)])],
        source_ranges=sources,
        target_tags=[SESSION_TAG],
    )


def check(context: GCEContext) -> Check:
    """Whether the rule exists on the VMs' network and admits the port to session VMs (a warning otherwise:
    sessions still work through the Store)."""
    from google.api_core import exceptions as gexc

    network = network_name(context)
    try:
        rule = context.api.firewall(RULE)
    except gexc.NotFound:
        return Check(
            "session firewall",
            False,
            f"no firewall rule {RULE}: the notebook cannot reach a session VM's relay on TCP port {PORT}, so "
            "session cells go through the Store (slower, but they work)",
            warning=True,
            fix=create_command(network),
        )
    problem = _problem(rule, network)
    if problem:
        return Check("session firewall", False, f"rule {RULE} {problem}", warning=True, fix=create_command(network))
    ranges = ", ".join(rule.source_ranges) or "no source range"
    return Check("session firewall", True, f"rule {RULE} admits TCP {PORT} to session VMs from {ranges}")


def _problem(rule: Any, network: str) -> str:
    if gce_api.resource_name(rule.network) != network:
        return f"is on network {gce_api.resource_name(rule.network)}, not on the VMs' {network}"
    if rule.disabled:
        return "is disabled"
    if rule.direction != "INGRESS" or SESSION_TAG not in rule.target_tags:
        return f"does not admit ingress to VMs tagged {SESSION_TAG}"
    if not any(a.I_p_protocol == "tcp" and _covers(a.ports, PORT) for a in rule.allowed):
        return f"does not allow TCP port {PORT}"
    return ""


def _covers(ports: list[str], port: int) -> bool:
    if not ports:
        return True  # no ports: every port of the protocol
    for item in ports:
        low, _, high = item.partition("-")
        if int(low) <= port <= int(high or low):
            return True
    return False


def ensure(context: GCEContext, sources: list[str], say: Callable[[str], None] = print) -> Check:
    """Create the rule from ``sources`` when it is missing (a rule that exists is left as it is); its check."""
    from google.api_core import exceptions as gexc

    sources = check_sources(sources)
    api = context.api
    try:
        api.firewall(RULE)
    except gexc.NotFound:
        network = network_name(context)
        try:
            api.wait(api.insert_firewall(resource(network, api.project, sources), f"creating {RULE}"), RULE)
        except gexc.GoogleAPICallError as exc:
            raise BurstError(f"nbburst setup: firewall rule {RULE}: {getattr(exc, 'message', exc)}") from None
        say(f"created firewall rule {RULE}: TCP {PORT} from {', '.join(sources)} to VMs tagged {SESSION_TAG}")
    return check(context)
