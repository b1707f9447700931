"""Reads the runnable image variant (`gpack push --image`) back with the
`oras` Python client and Python's own `tarfile` (both independent of
gpack): the index (validated against oras's index schema), each platform's
manifest (oras's manifest schema) and config, and the layer blob, whose
plain SHA-256 is computed here and whose tar members are listed with the
SHA-256 and size of each. Prints one JSON object:
{"index": …, "images": [{"manifest": …, "config": …,
  "layers": [{"sha256": …, "members": [{"name", "type", "size", "mode",
  "sha256"}]}]}]}.

Usage: python oras_read_image.py HOST REPO:TAG USER PASSWORD WORKDIR
"""

import hashlib
import json
import os
import sys
import tarfile

import oras.client
import oras.schemas


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    host, ref, user, password, workdir = sys.argv[1:6]
    repo = ref.split(":", 1)[0]
    c = oras.client.OrasClient(hostname=host, insecure=True, auth_backend="basic")
    c.auth.set_basic_auth(user, password)
    index = c.get_manifest(f"{host}/{ref}", validation_schema=oras.schemas.index)
    images = []
    layers_seen = {}
    for d in index["manifests"]:
        target = f"{host}/{repo}@{d['digest']}"
        m = c.get_manifest(target, validation_schema=oras.schemas.manifest)
        r = c.get_blob(target, m["config"]["digest"])
        r.raise_for_status()
        config = r.json()
        layers = []
        for l in m["layers"]:
            if l["digest"] not in layers_seen:
                out = os.path.join(workdir, l["digest"].replace(":", "-") + ".tar")
                c.download_blob(target, l["digest"], out)
                members = []
                with tarfile.open(out, mode="r:") as t:
                    for info in t:
                        entry = {
                            "name": info.name,
                            "type": "file" if info.isfile() else "other",
                            "size": info.size,
                            "mode": info.mode,
                        }
                        if info.isfile():
                            h = hashlib.sha256()
                            f = t.extractfile(info)
                            for chunk in iter(lambda: f.read(1 << 20), b""):
                                h.update(chunk)
                            entry["sha256"] = h.hexdigest()
                        members.append(entry)
                layers_seen[l["digest"]] = {"sha256": sha256_of(out), "members": members}
                os.remove(out)
            layers.append(layers_seen[l["digest"]])
        images.append({"manifest": m, "config": config, "layers": layers})
    json.dump({"index": index, "images": images}, sys.stdout)


if __name__ == "__main__":
    main()
