"""The endpoint's two aiohttp applications: the DynamoDB API on TLS (every request authenticated,
logged, then answered as AWS would) and the admin API on plain HTTP (loopback only, another port)."""
from __future__ import annotations

import asyncio
import copy
import json
import logging
import socket
import struct
import time
import zlib

import aiohttp
from aiohttp import web

from stack.strict_endpoint import errors, hooks
from stack.strict_endpoint.auth import CredentialStore, Identity, new_key_id, new_secret
from stack.strict_endpoint.backups import OPERATIONS as BACKUP_OPERATIONS, ContinuousBackups
from stack.strict_endpoint.errors import AwsError
from stack.strict_endpoint.faults import ANSWERED, Faults, answered_error, cancellation, split_batch
from stack.strict_endpoint.iam import Policies, PolicyError, template_principals
from stack.strict_endpoint.metering import Meter, Metering, consumed_capacity, request_partitions
from stack.strict_endpoint.operations import requested_actions, stream_label, table_arn, tables_of
from stack.strict_endpoint.requestlog import RequestLog
from stack.strict_endpoint.tables import Tables
from stack.strict_endpoint.throttle import PartitionThrottle
from stack.strict_endpoint.upstream import Upstream

logger = logging.getLogger("stack.strict_endpoint")
WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
DESCRIPTIONS = {"DescribeTable", "CreateTable", "UpdateTable", "DeleteTable"}

SERVICES = {"DynamoDB_20120810": "dynamodb", "DynamoDBStreams_20120810": "streams"}
DEFAULTS = {
    "region": "us-east-1",
    "account": "123456789012",
    "clock_skew_seconds": 0.0,  # the endpoint's clock runs this far ahead of the machine's
    "creating_seconds": 2.0,  # a new table (or a GSI added by UpdateTable) stays CREATING this long
    "metering": True,  # read old items and price every request (off: a plain authenticated proxy)
    "throttle": {},  # per-partition limits (throttle.py); {"enabled": false} turns them off
    "faults": {},  # faults.py
    "principals": {},  # {name: {"policies": [IAM policy documents]}}; none: everything allowed
}
# Settings the admin API may change while the endpoint runs (PATCH /config); POST /reset puts back
# the start-up values.
MUTABLE = {"clock_skew_seconds", "creating_seconds", "metering", "throttle", "faults", "principals"}


class StrictEndpointServer:
    def __init__(self, upstream_url: str, config: dict):
        self.config = {**DEFAULTS, **config}
        if self.config.get("iam_template"):  # the deploy template's roles, under their components' names
            self.config["principals"] = {**template_principals(self.config["iam_template"], region=self.config["region"],
                                                               account=self.config["account"]),
                                         **self.config["principals"]}
        self.initial = copy.deepcopy(self.config)
        self.upstream = Upstream(upstream_url)
        self.credentials = CredentialStore(region=self.config["region"], account=self.config["account"])
        for entry in self.config.get("credentials", []):
            self.credentials.add_static(entry["access_key_id"], entry["secret_access_key"],
                                        entry.get("principal", "default"))
        for name, options in self.config.get("temporary_credentials", {}).items():
            self.credentials.configure_issuer(name, **options)
        self.log = RequestLog()
        self.meter = Meter()
        self.tables = Tables(self.upstream)
        self.backups = ContinuousBackups(self.tables)
        self.metering = Metering(self.upstream, self.tables)
        self.faults, self.throttle, self.policies = Faults(), PartitionThrottle(), Policies()
        self.apply({key: self.config[key] for key in MUTABLE})
        self.streams = hooks.build(self.config.get("streams"), self.upstream)
        self.gsi_view = hooks.build(self.config.get("gsi_view"), self.upstream)

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
        headers: dict[str, str] = {}
        try:
            if service is None or request.method != "POST":
                raise errors.unknown_operation()
            identity = self.credentials.authenticate(request.method, request.path_qs, request.headers, body, now)
            entry.key_id, entry.principal = identity.key_id, identity.principal
            try:
                params = json.loads(body or b"{}")
            except ValueError:
                raise AwsError("SerializationException", "Start of structure or map found where not expected.") from None
            status, data, headers = await self.answer(request, service, operation, params, body, identity, entry, now)
            if status is None:  # the connection was reset
                return web.Response()
        except AwsError as exc:
            status, data = exc.status, exc.body()
            headers = errors.json_headers(data, rid)
            entry.error = exc.code
        except Exception:  # a bug of the endpoint's, or DynamoDB Local failing mid-request: AWS's 500
            logger.exception("%s %s failed", prefix, operation)
            error = AwsError("InternalServerError", "Internal server error", status=500)
            status, data = error.status, error.body()
            headers = errors.json_headers(data, rid)
            entry.error = error.code
        entry.status = status
        entry.duration_ms = round((time.monotonic() - started) * 1000, 3)
        headers.setdefault("x-amzn-RequestId", rid)
        headers["x-amz-crc32"] = str(zlib.crc32(data))
        return web.Response(status=status, body=data, headers={**headers, "Content-Type": errors.JSON_CONTENT_TYPE})

    async def answer(self, request, service, operation, params, body, identity: Identity, entry, now):
        """(status, body, headers) of an authenticated request; status None when the connection was reset."""
        region, account = self.config["region"], self.config["account"]
        if service == "dynamodb":
            tables = tables_of(operation, params)
        else:
            found = stream_label(params.get("StreamArn") or params.get("ShardIterator", ""))
            tables = [found[0]] if found else []
        entry.tables, entry.index = tables, params.get("IndexName")
        self.policies.check(identity.principal, principal_arn(identity, account),
                            requested_actions(service, operation, params, region=region, account=account))
        if service == "dynamodb":
            self.tables.check(operation, params, tables, now)
        delay = self.faults.delay()
        if delay:
            await asyncio.sleep(delay)
        rule = self.faults.pick(operation, tables)
        held = None
        if rule is not None:
            entry.fault = rule.kind
            if rule.kind in ANSWERED:
                raise answered_error(rule.kind)
            if rule.kind == "TransactionCanceled":
                raise cancellation(rule, len(params.get("TransactItems", [])), self.faults.rng)
            if rule.kind == "UnprocessedItems":
                split = split_batch(operation, params, rule, self.faults.rng)
                if split is None:
                    raise answered_error("ProvisionedThroughputExceededException")
                params, held = split
                body = json.dumps(params).encode()
            if rule.kind == "ConnectionReset" and not rule.after_forward:
                _reset(request)
                return None, b"", {}
        if service == "dynamodb" and operation in BACKUP_OPERATIONS:
            return 200, json.dumps(await self.backups.handle(operation, params)).encode(), {}
        if service == "streams" and self.streams is not None:
            status, answer = await self.streams.handle(operation, params)
            return status, json.dumps(answer).encode(), {}
        metering = self.config["metering"] and service == "dynamodb"
        try:
            old = await self.metering.before(operation, params) if metering and operation in WRITES else {}
            if metering:
                self.throttle.check(await request_partitions(self.tables, operation, params, old), now,
                                    lambda table, index: table_arn(region, account, table, index))
            status, data, headers = await self.upstream.forward(service, operation, body)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            # DynamoDB Local is down or hung: what a client of AWS sees of an outage.
            raise AwsError("ServiceUnavailable", f"Service unavailable ({type(exc).__name__})", status=503) from None
        try:
            answer = json.loads(data) if data else {}
        except ValueError:  # not DynamoDB's JSON: passed on as it came, unmetered
            entry.error = f"HTTP {status}" if status != 200 else None
            return status, data, headers
        changed = False
        if status != 200:
            entry.error = str(answer.get("__type", "")).rpartition("#")[2] or None
        if held:
            key = "UnprocessedItems" if operation == "BatchWriteItem" else "UnprocessedKeys"
            answer.setdefault(key, {}).update(held)
            changed = True
        if metering:
            charges = await self.metering.after(operation, params, status, answer, old, entry.error)
            self.throttle.take(charges, now)
            self.meter.record(operation=operation, key_id=identity.key_id,
                              request_id=request.headers.get("X-Request-Tag"), charges=charges)
            entry.read_units = sum(c.read for c in charges)
            entry.write_units = sum(c.write for c in charges)
            if status == 200 and "ConsumedCapacity" in answer:
                capacity = consumed_capacity(operation, params.get("ReturnConsumedCapacity", "NONE"), charges)
                if capacity is None:
                    del answer["ConsumedCapacity"]
                else:
                    answer["ConsumedCapacity"] = capacity
                changed = True
            if self.gsi_view is not None:
                for charge in charges:
                    if charge.change is not None and status == 200:
                        self.gsi_view.record_write(charge.table, *charge.change, now)
        if status == 200 and operation in DESCRIPTIONS:
            changed |= self.tables.after(operation, params, answer, now, float(self.config["creating_seconds"]))
            description = answer.get("Table") or answer.get("TableDescription")
            if description and self.streams is not None and hasattr(self.streams, "table_description"):
                self.streams.table_description(description)
                changed = True
        if status == 200 and operation == "DeleteTable":
            self.backups.forget(params.get("TableName", ""))
        if status == 200 and operation == "Query" and params.get("IndexName") and self.gsi_view is not None:
            answer = await self.gsi_view.adjust_query(params, answer)
            changed = True
        if rule is not None and rule.kind == "ConnectionReset":
            _reset(request)
            return None, b"", {}
        if changed:
            data = json.dumps(answer).encode()
        return status, data, headers

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
            ("GET", "/meter", self.admin_meter),
            ("DELETE", "/meter", self.admin_reset_meter),
            ("PUT", "/faults", self.admin_set_faults),
            ("PUT", "/principals/{name}", self.admin_set_principal),
            ("DELETE", "/principals/{name}", self.admin_remove_principal),
            ("GET", "/hooks/{name}", self.admin_hook_status),
            ("PATCH", "/hooks/{name}", self.admin_configure_hook),
        ]
        for method, path, handler in routes:
            app.router.add_route(method, path, handler)
        return app

    def _hook(self, request):
        """The streams or gsi_view hook named in the path (404 when not configured)."""
        name = request.match_info["name"].replace("-", "_")
        hook = {"streams": self.streams, "gsi_view": self.gsi_view}.get(name)
        if hook is None:
            raise web.HTTPNotFound(text=f"no {name} hook is configured")
        return hook

    async def admin_hook_status(self, request):
        hook = self._hook(request)
        return web.json_response(hook.status() if hasattr(hook, "status") else {})

    async def admin_configure_hook(self, request):
        """Body: options the hook's configure() takes (e.g. {"shards": 8} for the emulated stream)."""
        hook = self._hook(request)
        if not hasattr(hook, "configure"):
            raise web.HTTPBadRequest(text="this hook takes no options while running")
        try:
            return web.json_response(hook.configure(await _json(request)))
        except (ValueError, TypeError) as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None

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
        return await self._patch(request, data)

    def apply(self, settings: dict) -> None:
        """Validate, then put in force, settings of MUTABLE (all or none); ValueError names what is wrong."""
        faults = Faults(settings["faults"] or {}) if "faults" in settings else self.faults
        throttle = PartitionThrottle(settings["throttle"] or {}) if "throttle" in settings else self.throttle
        policies = Policies(settings["principals"] or {}) if "principals" in settings else self.policies
        self.faults, self.throttle, self.policies = faults, throttle, policies
        self.config.update(settings)

    async def admin_reset(self, request):
        """Start-up settings back, request log (and meter) emptied: what each test starts from."""
        self.apply({key: copy.deepcopy(self.initial[key]) for key in MUTABLE})
        self.log.clear()
        self.meter.reset()
        return web.json_response({"reset": True})

    async def admin_add_credentials(self, request):
        """Body {"principal": ..., "access_key_id"?: ..., "secret_access_key"?: ...}; new ones if omitted."""
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


    async def admin_meter(self, request):
        return web.json_response(self.meter.snapshot())

    async def admin_reset_meter(self, request):
        self.meter.reset()
        return web.json_response({"reset": True})

    async def admin_set_faults(self, request):
        """Body {"seed": n, "rules": [...], "latency": {...}} (faults.py); {} removes every fault."""
        return await self._patch(request, {"faults": await _json(request)})

    async def admin_set_principal(self, request):
        """Body {"policies": [IAM policy documents]}: the principal's identity policies from now on."""
        principals = {**self.config["principals"], request.match_info["name"]: await _json(request)}
        return await self._patch(request, {"principals": principals})

    async def admin_remove_principal(self, request):
        principals = {k: v for k, v in self.config["principals"].items() if k != request.match_info["name"]}
        return await self._patch(request, {"principals": principals})

    async def _patch(self, request, settings: dict):
        try:
            self.apply(settings)
        except (PolicyError, ValueError, TypeError, KeyError) as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        return await self.admin_config(request)


def principal_arn(identity: Identity, account: str) -> str:
    if identity.temporary:
        return f"arn:aws:sts::{account}:assumed-role/{identity.principal}/{identity.issuer}"
    return f"arn:aws:iam::{account}:user/{identity.principal}"


def _reset(request: web.Request) -> None:
    """Reset the TCP connection (RST, no answer): SO_LINGER 0, then abort."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


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
