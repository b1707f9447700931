"""Reads an artifact back with the `oras` Python client (an OCI client
independent of gpack's): the manifest (validated against oras's own OCI
manifest schema), the config blob, and the layers pulled by oras itself into
OUTDIR (named by their title annotation). Prints one JSON object:
{"manifest": …, "config": …, "files": {name: sha256 hex}}.

Usage: python oras_read.py HOST REPO:TAG USER PASSWORD OUTDIR
"""

import hashlib
import json
import os
import sys

import oras.client
import oras.schemas


def main():
    host, ref, user, password, outdir = sys.argv[1:6]
    target = f"{host}/{ref}"
    c = oras.client.OrasClient(hostname=host, insecure=True, auth_backend="basic")
    c.auth.set_basic_auth(user, password)
    manifest = c.get_manifest(target, validation_schema=oras.schemas.manifest)
    r = c.get_blob(target, manifest["config"]["digest"])
    r.raise_for_status()
    config = r.json()
    paths = c.pull(target=target, outdir=outdir)
    files = {}
    for p in paths:
        with open(p, "rb") as f:
            files[os.path.relpath(p, outdir)] = hashlib.sha256(f.read()).hexdigest()
    json.dump({"manifest": manifest, "config": config, "files": files}, sys.stdout)


if __name__ == "__main__":
    main()
