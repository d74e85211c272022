"""VPC firewall rules of the Compute emulator: ``firewalls.insert`` checks a rule as Compute Engine does and
keeps it as Compute Engine returns it from ``firewalls.get``.

What is checked and the defaults filled in come from the Firewall resource's reference,
https://cloud.google.com/compute/docs/reference/rest/v1/firewalls, and the firewall rules overview,
https://cloud.google.com/firewall/docs/firewalls (components of a rule). The rules are records only: the
emulator does not filter traffic by them (its VMs' addresses are on the loopback interface).
"""

from __future__ import annotations

import copy
import ipaddress
import re

from nbburst.testing.compute import catalog as cat
from nbburst.testing.compute.resources import ComputeError, check_name, invalid, not_found

#: Protocols a rule may name by name (firewalls: ``allowed[].IPProtocol``), else an IP protocol number.
PROTOCOLS = ("tcp", "udp", "icmp", "esp", "ah", "sctp", "ipip", "all")
#: The protocols whose rules may name ports ("only applicable for UDP or TCP protocol", and SCTP).
WITH_PORTS = ("tcp", "udp", "sctp", "6", "17", "132")
_NETWORK = re.compile(
    r"(?:https://(?:www|compute)\.googleapis\.com/compute/v1/)?(?:projects/([^/]+)/)?global/networks/([^/]+)$"
)
_PORTS = re.compile(r"^(\d{1,5})(?:-(\d{1,5}))?$")


def network_of(project: str, value: str | None) -> tuple[str, str]:
    """(project, name) of the rule's network: ``global/networks/default`` when none is given; a full or partial
    URL otherwise (firewalls: ``network``)."""
    m = _NETWORK.match(value or "global/networks/default")
    if not m:
        raise invalid("resource.network", value, "Must be a URL to a network resource.")
    return m.group(1) or project, m.group(2)


def _rules(body: dict, key: str) -> list[dict]:
    rules = body.get(key) or []
    for i, rule in enumerate(rules):
        protocol = str(rule.get("IPProtocol", "")).lower()
        if not protocol or (protocol not in PROTOCOLS and not (protocol.isdigit() and 0 <= int(protocol) <= 255)):
            raise invalid(f"resource.{key}[{i}].IPProtocol", rule.get("IPProtocol", ""), "Invalid IP protocol.")
        for port in rule.get("ports") or []:
            if protocol not in WITH_PORTS:
                raise invalid(
                    f"resource.{key}[{i}].ports",
                    port,
                    "Ports may be specified only for the TCP, UDP and SCTP protocols.",
                )
            m = _PORTS.match(str(port))
            low, high = (int(m.group(1)), int(m.group(2) or m.group(1))) if m else (1, 0)
            if not m or low > high or high > 65535:
                raise invalid(f"resource.{key}[{i}].ports", port, "Invalid port or port range.")
    return rules


def _ranges(body: dict, key: str) -> list[str]:
    ranges = [str(r) for r in body.get(key) or []]
    for i, value in enumerate(ranges):
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise invalid(f"resource.{key}[{i}]", value, "Must be a CIDR address range.") from None
    return ranges


def check_firewall(project: str, body: dict, networks: dict) -> dict:
    """The rule ``body`` of ``firewalls.insert`` as ``firewalls.get`` returns it; ComputeError for what Compute
    Engine refuses (the reference's constraints above)."""
    name = check_name(body.get("name"))
    net_project, net_name = network_of(project, body.get("network"))
    if (net_project, net_name) not in networks:
        raise not_found(f"projects/{net_project}/global/networks/{net_name}")
    direction = body.get("direction") or "INGRESS"  # "The default is INGRESS."
    if direction not in ("INGRESS", "EGRESS"):
        raise invalid("resource.direction", direction, "Must be INGRESS or EGRESS.")
    allowed, denied = _rules(body, "allowed"), _rules(body, "denied")
    if bool(allowed) == bool(denied):  # each rule either allows or denies: exactly one of them
        raise invalid("resource.allowed", "", "Exactly one of allowed or denied must be specified.")
    priority = body.get("priority", 1000)  # "The default value is 1000."
    if not isinstance(priority, int) or not 0 <= priority <= 65535:
        raise invalid("resource.priority", priority, "Must be an integer between 0 and 65535, both inclusive.")
    if direction == "EGRESS" and body.get("sourceTags"):  # "For EGRESS traffic, you cannot specify the sourceTags"
        raise invalid("resource.sourceTags", body["sourceTags"], "Source tags cannot be set for EGRESS rules.")
    if body.get("targetServiceAccounts") and (body.get("targetTags") or body.get("sourceTags")):
        # "targetServiceAccounts cannot be used at the same time as targetTags or sourceTags"
        raise invalid(
            "resource.targetServiceAccounts",
            body["targetServiceAccounts"],
            "Cannot be used at the same time as targetTags or sourceTags.",
        )
    for key in ("targetTags", "sourceTags"):
        for i, tag in enumerate(body.get(key) or []):
            check_tag(f"resource.{key}[{i}]", tag)
    rule = {
        "kind": "compute#firewall",
        "id": str(cat.stable_id("firewall", project, name)),
        "creationTimestamp": cat.rfc3339(),
        "name": name,
        "description": body.get("description", ""),
        "network": cat.link(net_project, "global", "networks", net_name),
        "priority": priority,
        "direction": direction,
        "disabled": bool(body.get("disabled", False)),
        "logConfig": {"enable": bool((body.get("logConfig") or {}).get("enable", False))},
        "selfLink": cat.link(project, "global", "firewalls", name),
    }
    if allowed:
        rule["allowed"] = copy.deepcopy(allowed)
    if denied:
        rule["denied"] = copy.deepcopy(denied)
    for key in ("sourceRanges", "destinationRanges"):
        if body.get(key):
            rule[key] = _ranges(body, key)
    for key in ("sourceTags", "targetTags", "sourceServiceAccounts", "targetServiceAccounts"):
        if body.get(key):
            rule[key] = list(body[key])
    return rule


def check_tag(field_name: str, tag: object) -> None:
    """A network tag: RFC 1035, 1-63 characters (the same rule as a resource name)."""
    try:
        check_name(tag)
    except ComputeError:
        raise invalid(field_name, tag, "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'") from None
