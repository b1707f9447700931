"""Pushes a GGUF as a CNCF ModelPack artifact with the `oras` Python client
(another tool's artifact, as gpack must pull it): one
`application/vnd.cncf.model.weight.v1.raw` layer (annotations
`org.opencontainers.image.title` and `org.cncf.model.filepath` = the file's
name), a `application/vnd.cncf.model.config.v1+json` config with
`config.format` "gguf" and `modelfs.diffIds` = the layer's SHA-256, and the
manifest's `artifactType` `application/vnd.cncf.model.manifest.v1+json`.
oras's `push()` cannot set an artifactType, so this uses its blob and
manifest calls directly. Prints the manifest pushed (JSON).

Usage: python oras_push_modelpack.py HOST REPO:TAG USER PASSWORD GGUF WORKDIR
"""

import hashlib
import json
import os
import sys

import oras.client
import oras.oci


def main():
    host, ref, user, password, gguf, workdir = sys.argv[1:7]
    target = f"{host}/{ref}"
    c = oras.client.OrasClient(hostname=host, insecure=True, auth_backend="basic")
    c.auth.set_basic_auth(user, password)
    container = c.get_container(target)
    name = os.path.basename(gguf)
    with open(gguf, "rb") as f:
        sha = "sha256:" + hashlib.sha256(f.read()).hexdigest()

    layer = oras.oci.NewLayer(gguf, media_type="application/vnd.cncf.model.weight.v1.raw")
    layer["annotations"] = {
        "org.opencontainers.image.title": name,
        "org.cncf.model.filepath": name,
    }
    assert layer["digest"] == sha, (layer, sha)
    c._check_200_response(c.upload_blob(gguf, container, layer))

    config_path = os.path.join(workdir, "modelpack-config.json")
    with open(config_path, "w") as f:
        json.dump(
            {
                "descriptor": {"name": "tiny-llama", "family": "llama"},
                "config": {"architecture": "llama", "format": "gguf", "paramSize": "1m"},
                "modelfs": {"type": "layers", "diffIds": [sha]},
            },
            f,
        )
    conf, _ = oras.oci.ManifestConfig(config_path, "application/vnd.cncf.model.config.v1+json")
    c._check_200_response(c.upload_blob(config_path, container, conf))

    manifest = oras.oci.NewManifest()
    manifest["artifactType"] = "application/vnd.cncf.model.manifest.v1+json"
    manifest["config"] = conf
    manifest["layers"] = [layer]
    c._check_200_response(c.upload_manifest(manifest, container))
    json.dump(manifest, sys.stdout)


if __name__ == "__main__":
    main()
