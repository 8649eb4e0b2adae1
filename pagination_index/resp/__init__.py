"""The files index over the Redis protocol: `manage.py serve_index` (server.py) and its commands
(commands.py), replies in RESP2 and RESP3 (replies.py). docs/backends-resp.md."""
