"""The endpoint's two aiohttp applications: the DynamoDB API on TLS (every request authenticated,
logged, then answered as AWS would) and the admin API on plain HTTP (loopback only, another port)."""
from __future__ import annotations

import copy
import json
import time
import zlib

from aiohttp import web

from stack.strict_endpoint import errors
from stack.strict_endpoint.auth import CredentialStore
from stack.strict_endpoint.errors import AwsError
from stack.strict_endpoint.requestlog import RequestLog
from stack.strict_endpoint.upstream import Upstream

SERVICES = {"DynamoDB_20120810": "dynamodb", "DynamoDBStreams_20120810": "streams"}
DEFAULTS = {
    "region": "us-east-1",
    "account": "123456789012",
    "clock_skew_seconds": 0.0,  # the endpoint's clock runs this far ahead of the machine's
}
# Settings the admin API may change while the endpoint runs (PATCH /config); POST /reset puts back
# the start-up values.
MUTABLE = {"clock_skew_seconds"}


class StrictEndpointServer:
    def __init__(self, upstream_url: str, config: dict):
        self.config = {**DEFAULTS, **config}
        self.initial = copy.deepcopy(self.config)
        self.upstream = Upstream(upstream_url)
        self.credentials = CredentialStore(region=self.config["region"], account=self.config["account"])
        for entry in self.config.get("credentials", []):
            self.credentials.add_static(entry["access_key_id"], entry["secret_access_key"],
                                        entry.get("principal", "default"))
        for name, options in self.config.get("temporary_credentials", {}).items():
            self.credentials.configure_issuer(name, **options)
        self.log = RequestLog()

    def now(self) -> float:
        return time.time() + float(self.config["clock_skew_seconds"])

    # --- the DynamoDB API ------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        now = self.now()
        body = await request.read()
        prefix, _, operation = request.headers.get("X-Amz-Target", "").partition(".")
        service = SERVICES.get(prefix)
        entry = self.log.start(at=now, service=service or prefix, operation=operation, headers=request.headers)
        rid = errors.request_id()
        try:
            if service is None or request.method != "POST":
                raise errors.unknown_operation()
            identity = self.credentials.authenticate(request.method, request.path_qs, request.headers, body, now)
            entry.key_id, entry.principal = identity.key_id, identity.principal
            status, data, headers = await self.upstream.forward(service, operation, body)
            if status != 200:
                entry.error = _error_code(data)
        except AwsError as exc:
            status, data = exc.status, exc.body()
            headers = errors.json_headers(data, rid)
            entry.error = exc.code
        entry.status = status
        entry.duration_ms = round((time.monotonic() - started) * 1000, 3)
        headers.setdefault("x-amzn-RequestId", rid)
        headers.setdefault("x-amz-crc32", str(zlib.crc32(data)))
        return web.Response(status=status, body=data, headers={**headers, "Content-Type": errors.JSON_CONTENT_TYPE})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=32 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, app) -> None:
        await self.upstream.close()

    # --- the admin API ---------------------------------------------------------------------------
    def admin_app(self) -> web.Application:
        app = web.Application()
        routes = [
            ("GET", "/health", self.admin_health),
            ("GET", "/config", self.admin_config),
            ("PATCH", "/config", self.admin_patch_config),
            ("POST", "/reset", self.admin_reset),
            ("POST", "/credentials", self.admin_add_credentials),
            ("PUT", "/temporary-credentials/{name}", self.admin_configure_temporary),
            ("POST", "/temporary-credentials/{name}/rotate", self.admin_rotate_temporary),
            ("POST", "/temporary-credentials/{name}/expire", self.admin_expire_temporary),
            ("GET", "/credentials/{name}", self.container_credentials),
            ("GET", "/requests", self.admin_requests),
            ("DELETE", "/requests", self.admin_clear_requests),
            ("GET", "/requests/summary", self.admin_requests_summary),
        ]
        for method, path, handler in routes:
            app.router.add_route(method, path, handler)
        return app

    async def admin_health(self, request):
        return web.json_response({"ok": True})

    async def admin_config(self, request):
        config = {key: value for key, value in self.config.items() if key != "credentials"}
        return web.json_response({**config, "keys": self.credentials.principals_of_keys(),
                                  "temporary_credentials": self.credentials.issuers()})

    async def admin_patch_config(self, request):
        data = await _json(request)
        unknown = set(data) - MUTABLE
        if unknown:
            raise web.HTTPBadRequest(text=f"not settable while running: {sorted(unknown)}; settable: {sorted(MUTABLE)}")
        self.apply(data)
        return await self.admin_config(request)

    def apply(self, settings: dict) -> None:
        self.config.update(settings)

    async def admin_reset(self, request):
        """Start-up settings back, request log (and meter) emptied: what each test starts from."""
        self.apply({key: copy.deepcopy(self.initial[key]) for key in MUTABLE if key in self.initial})
        self.log.clear()
        return web.json_response({"reset": True})

    async def admin_add_credentials(self, request):
        """Body {"principal": ..., "access_key_id"?: ..., "secret_access_key"?: ...}; new ones if omitted."""
        from stack.strict_endpoint.auth import new_key_id, new_secret

        data = await _json(request)
        identity = self.credentials.add_static(data.get("access_key_id") or new_key_id("AKIA"),
                                               data.get("secret_access_key") or new_secret(),
                                               data.get("principal", "default"))
        return web.json_response({"access_key_id": identity.key_id, "secret_access_key": identity.secret,
                                  "principal": identity.principal})

    async def admin_configure_temporary(self, request):
        """Body {"lifetime": seconds, "rotate_every"?: seconds, "principal"?: name}."""
        data = await _json(request)
        try:
            issuer = self.credentials.configure_issuer(request.match_info["name"], **data)
        except (TypeError, ValueError) as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        return web.json_response({"name": issuer.name, "principal": issuer.principal, "lifetime": issuer.lifetime,
                                  "rotate_every": issuer.rotate_every,
                                  "url": f"http://{request.host}/credentials/{issuer.name}"})

    async def admin_rotate_temporary(self, request):
        identity = self._issued(request, rotate=True)
        return web.json_response(_container_document(identity, self.config["account"]))

    async def admin_expire_temporary(self, request):
        name = request.match_info["name"]
        self._issued(request)  # 404 for an unknown name
        self.credentials.expire(name, self.now())
        return web.json_response({"expired": name})

    async def container_credentials(self, request):
        """What the ECS container-credentials endpoint serves (botocore's ContainerProvider reads it
        from AWS_CONTAINER_CREDENTIALS_FULL_URI)."""
        return web.json_response(_container_document(self._issued(request), self.config["account"]))

    def _issued(self, request, rotate: bool = False):
        try:
            return self.credentials.issue(request.match_info["name"], self.now(), rotate=rotate)
        except KeyError:
            raise web.HTTPNotFound(text=f"no temporary credentials named {request.match_info['name']!r}") from None

    async def admin_requests(self, request):
        return web.json_response(self.log.entries(int(request.query.get("since", 0))))

    async def admin_clear_requests(self, request):
        self.log.clear()
        return web.json_response({"cleared": True})

    async def admin_requests_summary(self, request):
        return web.json_response(self.log.summary())


def _container_document(identity, account: str) -> dict:
    return {"AccessKeyId": identity.key_id, "SecretAccessKey": identity.secret, "Token": identity.token,
            "Expiration": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(identity.expires_at)),
            "RoleArn": f"arn:aws:iam::{account}:role/{identity.principal}"}


def _error_code(data: bytes) -> str | None:
    try:
        return str(json.loads(data).get("__type", "")).rpartition("#")[2] or None
    except ValueError:
        return None


async def _json(request) -> dict:
    try:
        data = await request.json() if request.can_read_body else {}
    except ValueError:
        raise web.HTTPBadRequest(text="the body must be JSON") from None
    if not isinstance(data, dict):
        raise web.HTTPBadRequest(text="the body must be a JSON object")
    return data
