"""gunicorn's own log lines (start-up, "Booting worker", worker timeouts, the access log) in the app's
format: JSON objects with LOG_FORMAT=json, else key=value lines, all on stderr beside the app's own.

gunicorn.conf.py names this class as `logger_class`. gunicorn still decides where its lines go
(`errorlog`, `accesslog`: "-" or a file); only their format changes, and `-` means stderr for both.
"""
from __future__ import annotations

import os
import sys

from gunicorn import glogging

from shop.logs import JSONFormatter, KeyValueFormatter


class Logger(glogging.Logger):
    def setup(self, cfg):
        super().setup(cfg)
        formatter = JSONFormatter() if os.environ.get("LOG_FORMAT", "text") == "json" else KeyValueFormatter()
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(formatter)
                if getattr(handler, "stream", None) is sys.stdout:  # accesslog "-": beside the other lines
                    handler.setStream(sys.stderr)

    def access(self, resp, req, environ, request_time):
        """One "access" line whose fields are the request's (the access_log_format is not used)."""
        if not self.access_log_enabled:
            return
        atoms = self.atoms(resp, req, environ, request_time)
        status = str(atoms["s"])
        self.access_log.info("access", extra={"fields": {
            "request_id": atoms.get("{x-request-id}o"),
            "remote_addr": atoms["h"],
            "method": atoms["m"],
            "path": atoms["U"],
            "query": atoms["q"] or None,
            "status": int(status) if status.isdigit() else status,
            "bytes": atoms["B"],
            "duration_ms": round(atoms["D"] / 1000, 1),
            "user_agent": atoms["a"],
        }})
