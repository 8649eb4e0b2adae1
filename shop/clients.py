"""Who is asking: the client's address as the site sees it behind its own proxies.

Behind nginx or a load balancer, REMOTE_ADDR is the proxy's, the same for every visitor. Each proxy
appends the address it saw to COMMENTS_CLIENT_IP_HEADER (X-Forwarded-For); the client supplies
whatever it likes to the left of them. So the client is the address COMMENTS_CLIENT_IP_PROXIES places
from the right, counting only the proxies of our own (DRF's NUM_PROXIES does the same). This holds
only while nobody but those proxies reaches the server: gunicorn binds to the loopback address by
default (gunicorn.conf.py), and nginx's real_ip module believes only NGINX_TRUSTED_PROXIES
(deploy/nginx/shop.conf.template, docs/nginx.md)."""
from __future__ import annotations

import ipaddress

from django.conf import settings


def client_ip(request) -> str:
    """The client's address: the configured header's entry COMMENTS_CLIENT_IP_PROXIES places from the
    right, or REMOTE_ADDR when the header is not configured, or holds fewer entries than there are
    proxies (the request did not come through them all)."""
    address = request.META.get("REMOTE_ADDR", "")
    header = settings.COMMENTS_CLIENT_IP_HEADER
    proxies = settings.COMMENTS_CLIENT_IP_PROXIES
    if header and proxies > 0:
        forwarded = [entry.strip() for entry in request.META.get(
            "HTTP_" + header.upper().replace("-", "_"), "").split(",")]
        forwarded = [entry for entry in forwarded if entry]
        if len(forwarded) >= proxies:
            address = forwarded[-proxies]
    return address


def client_address(request) -> str:
    """The client as rate limits and reporter hashes count it: its IPv4 address, or its IPv6 /64 (the
    block one subscriber usually has); anything that is no address is counted as given."""
    address = client_ip(request)
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address or "unknown"
    if ip.version == 6:
        if ip.ipv4_mapped:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


# Headers a proxy adds to what it passes on: a request carrying any of them came through one.
FORWARDING_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_PROTO", "HTTP_X_FORWARDED_HOST",
                      "HTTP_X_REAL_IP", "HTTP_FORWARDED")


def came_through_a_proxy(request) -> bool:
    return any(name in request.META for name in FORWARDING_HEADERS)
