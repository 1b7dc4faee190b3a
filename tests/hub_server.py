"""A Hugging Face-compatible hub on a loopback port, for the python tests: the routes `tern pull`
and tools/catalog/pin_catalog.py use, served from files on disk.

  GET /api/models/{repo}/revision/{rev}        {"sha": commit}  (a branch name or the commit)
  GET /api/models/{repo}/tree/{rev}?recursive=true
                                               [{"type": "file", "path", "size", "lfs": {"oid", "size"}}]
  GET /{repo}/resolve/{rev}/{path}             the bytes; `Range: bytes=N-` answers 206

`cut_after` makes the next file transfer stop after that many bytes (an interrupted download);
`corrupt` serves a file whose bytes differ from the listed sha256. Every request is logged in
`requests` as (method, path, Range header).
"""
import hashlib
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


class Repo:
    def __init__(self, commit, files, branch="main"):
        self.commit = commit
        self.branch = branch
        self.files = dict(files)  # repo path -> local file path
        self.sha256 = {}
        for path, local in self.files.items():
            h = hashlib.sha256()
            with open(local, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            self.sha256[path] = h.hexdigest()


class FakeHub:
    def __init__(self):
        self.repos = {}
        self.requests = []
        self.cut_after = None
        self.corrupt = set()
        self.token = None  # when set, requests need "Authorization: Bearer <token>"
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                hub.requests.append(("GET", self.path, self.headers.get("Range")))
                if hub.token and self.headers.get("Authorization") != "Bearer " + hub.token:
                    return self.reply(401, {"error": "Invalid credentials"})
                path = unquote(urlparse(self.path).path)
                if path.startswith("/api/models/"):
                    return self.api(path[len("/api/models/"):])
                parts = path.lstrip("/").split("/")
                if len(parts) >= 5 and parts[2] == "resolve":
                    return self.resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]))
                self.reply(404, {"error": "not found"})

            def api(self, rest):
                parts = rest.split("/")
                repo_name, kind, rev = "/".join(parts[:2]), parts[2] if len(parts) > 2 else "", \
                    "/".join(parts[3:])
                repo = hub.repos.get(repo_name)
                if repo is None or rev not in (repo.branch, repo.commit):
                    return self.reply(404, {"error": "Repository not found"})
                if kind == "revision":
                    return self.reply(200, {"id": repo_name, "sha": repo.commit})
                if kind == "tree":
                    listing = [{"type": "file", "path": p, "size": os.path.getsize(l),
                                "oid": "0" * 40,
                                "lfs": {"oid": repo.sha256[p], "size": os.path.getsize(l),
                                        "pointerSize": 134}}
                               for p, l in repo.files.items()]
                    listing.append({"type": "file", "path": "README.md", "size": 10, "oid": "1" * 40})
                    return self.reply(200, listing)
                self.reply(404, {"error": "not found"})

            def resolve(self, repo_name, rev, path):
                repo = hub.repos.get(repo_name)
                if repo is None or rev not in (repo.branch, repo.commit) or path not in repo.files:
                    return self.reply(404, {"error": "Entry not found"})
                with open(repo.files[path], "rb") as f:
                    data = f.read()
                if path in hub.corrupt:
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes=") and rng.endswith("-"):
                    start = int(rng[len("bytes="):-1])
                body = data[start:]
                self.send_response(206 if start else 200)
                self.send_header("Content-Length", str(len(body)))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if hub.cut_after is not None:
                    n, hub.cut_after = hub.cut_after, None
                    self.wfile.write(body[:n])
                    self.wfile.flush()
                    self.connection.shutdown(2)  # the transfer dies mid-file
                    return
                self.wfile.write(body)

            def reply(self, status, obj):
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add_repo(self, name, commit, files, branch="main"):
        self.repos[name] = Repo(commit, files, branch)
        return self.repos[name]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
