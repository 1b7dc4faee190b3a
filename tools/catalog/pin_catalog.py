#!/usr/bin/env python3
"""Pins the model catalog's revisions: for each model, asks the hub which commit its revision
(a branch such as "main", or a commit already) names now, checks that every file the catalog
lists for it is in the repository at that commit, and writes the catalog back with each
revision replaced by its commit. A model whose repository or files are missing keeps its
revision and is reported; the exit status is 1 when anything was reported.

  tools/catalog/pin_catalog.py [--endpoint URL] [--catalog data/catalog.json] [-o OUT]

The hub's public API: GET {endpoint}/api/models/{repo}/revision/{rev} -> {"sha": ...} and
GET {endpoint}/api/models/{repo}/tree/{commit}?recursive=true. HF_TOKEN is sent when set. The
output is written to a temp file and renamed into place. Needs network access to the hub.
"""
import argparse
import json
import os
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def get_json(endpoint, route, token):
    req = urllib.request.Request(endpoint.rstrip("/") + route)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def pin(model, endpoint, token):
    """(commit or None, [problems])"""
    repo, rev = model["repo"], model.get("revision", "main")
    quoted = urllib.parse.quote(rev, safe="")
    try:
        sha = get_json(endpoint, f"/api/models/{repo}/revision/{quoted}", token)["sha"]
        tree = get_json(endpoint, f"/api/models/{repo}/tree/{sha}?recursive=true", token)
    except (urllib.error.URLError, KeyError, ValueError) as e:
        return None, [f"{model['name']}: {repo} at {rev}: {e}"]
    paths = {e.get("path") for e in tree if e.get("type") == "file"}
    problems = [f"{model['name']}: {q} file {p} is not in {repo} at {sha[:12]}"
                for q, p in model["files"].items() if p not in paths]
    return sha, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", default=os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    ap.add_argument("--catalog", default=os.path.join(ROOT, "data", "catalog.json"))
    ap.add_argument("-o", "--output", help="where to write (default: the catalog itself)")
    args = ap.parse_args()
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    with open(args.catalog) as f:
        catalog = json.load(f)
    reported = False
    for model in catalog["models"]:
        sha, problems = pin(model, args.endpoint, token)
        for p in problems:
            print(p)
        reported |= bool(problems)
        if sha and not problems:
            if model.get("revision") != sha:
                print(f"{model['name']}: {model.get('revision', 'main')} -> {sha}")
            model["revision"] = sha
    out = args.output or args.catalog
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(out)), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(catalog, f, indent=2)
        f.write("\n")
    os.replace(tmp, out)
    return 1 if reported else 0


if __name__ == "__main__":
    sys.exit(main())
