"""`python -m stack.strict_endpoint --upstream http://127.0.0.1:P [options]`: the strict endpoint in
front of a DynamoDB Local, until SIGINT or SIGTERM (docs/reference.md lists the options)."""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import tempfile
from pathlib import Path

from aiohttp import web

from stack.strict_endpoint.certs import make_certificates, server_context
from stack.strict_endpoint.server import StrictEndpointServer


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m stack.strict_endpoint", description=__doc__.split("\n")[0])
    parser.add_argument("--upstream", required=True, help="DynamoDB Local's URL, e.g. http://127.0.0.1:8001")
    parser.add_argument("--port", type=int, default=0, help="the TLS port of the DynamoDB API (0: a free one)")
    parser.add_argument("--admin-port", type=int, default=0, help="the plain-HTTP admin port (0: a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="the address both listen on (default 127.0.0.1)")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="where ca.pem, the server certificate and ports.json go (default: a new temporary folder)")
    parser.add_argument("--config", type=Path, default=None, help="a JSON file of start-up settings "
                        "(credentials, principals, faults, throttle, creating_seconds, ...)")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    state = args.state_dir or Path(tempfile.mkdtemp(prefix="strict-endpoint-"))
    config = json.loads(args.config.read_text()) if args.config else {}
    ca, certificate, key = make_certificates(state)
    server = StrictEndpointServer(args.upstream, config)
    runners = [web.AppRunner(server.app(), access_log=None), web.AppRunner(server.admin_app(), access_log=None)]
    for runner in runners:
        await runner.setup()
    api = web.TCPSite(runners[0], args.host, args.port, ssl_context=server_context(certificate, key))
    admin = web.TCPSite(runners[1], args.host, args.admin_port)
    await api.start()
    await admin.start()
    ports = {"port": runners[0].addresses[0][1], "admin_port": runners[1].addresses[0][1], "ca_bundle": str(ca)}
    # Written whole, then renamed: the process that started us polls for the file and must never
    # read it half-written.
    (state / "ports.json.tmp").write_text(json.dumps(ports))
    (state / "ports.json.tmp").replace(state / "ports.json")
    print(f"strict endpoint: https://{args.host}:{ports['port']} (CA {ca}), admin http://{args.host}:"
          f"{ports['admin_port']}, in front of {args.upstream}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    for runner in reversed(runners):
        await runner.cleanup()


def main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
