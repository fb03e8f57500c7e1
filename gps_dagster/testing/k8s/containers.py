"""What a kubelet and a container runtime would make of a pod's container, on this machine.

There is no container runtime here, so the fake kubelet runs a container of a *local image*
(``LocalImage``: the image's entrypoint, working directory and environment, mirroring the
``Containerfile``; this package is already installed in the venv) as a local process. Before it
starts, it does what a kubelet does, through the API:

* volumes: a ``configMap`` or ``secret`` volume becomes a read-only directory of its keys, an
  ``emptyDir`` an empty writable one (any other kind is refused: ``UnsupportedVolume``);
* environment: ``value``, ``valueFrom`` (``secretKeyRef``, ``configMapKeyRef``, ``fieldRef``),
  ``envFrom`` (``configMapRef``, ``secretRef``, with ``prefix`` and ``optional``) and the
  ``$(VAR)`` expansion of values, command and args; a missing Secret, ConfigMap or key is
  ``ConfigPending`` (a kubelet keeps the pod waiting in ``CreateContainerConfigError`` and
  retries);
* the service account: the token a kubelet mounts at ``/var/run/secrets/kubernetes.io/
  serviceaccount`` cannot be at that fixed path for a local process, so the pod gets its own
  identity as a kubeconfig file (``KUBECONFIG``) built from the mounted token and CA, and no
  ``KUBERNETES_SERVICE_HOST``: the process acts on the API server as its ServiceAccount, and
  RBAC applies to it exactly as in a cluster.

A mount cannot appear at its ``mountPath`` for a local process either; paths are remapped
instead: an environment value, command word, arg or working directory equal to a mount path
(or under it) points into the pod's local directory, and likewise the image's own paths
(``LocalImage.paths``: ``/opt/gps`` → the repository). A path written *inside* a shell script is
not remapped (pass it as a word of its own, as the chart and dagster-k8s do). The process
starts with the image's environment plus the pod's, never the host's, as the current user
(``runAsUser`` cannot be honoured here).
"""

# Decisions embodied here (docs/decisions.md):
# * “The fake kubelet executes Job pods of the local image”

from __future__ import annotations

import base64
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gps_dagster.backends.k8s.api import Kube, Obj
from gps_dagster.ports import NotFound

SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ConfigPending(Exception):
    """A Secret, ConfigMap or key the container needs does not exist (yet)."""


class UnsupportedVolume(Exception):
    """A volume kind the fake kubelet cannot provide on this machine."""


@dataclass(frozen=True)
class LocalImage:
    """A container image as this machine runs it: like the Containerfile says."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    workdir: str = "/"
    env: Mapping[str, str] = field(default_factory=dict)
    """The image's ENV (e.g. PATH with the venv's bin first)."""
    paths: Mapping[str, str] = field(default_factory=dict)
    """Where the image's own files are on this machine (``/opt/gps`` → the repository)."""


@dataclass(frozen=True)
class ProcessSpec:
    """A container resolved to a local process."""

    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: str
    mounts: dict[str, str]
    """mountPath → local path."""


@dataclass(frozen=True)
class Cluster:
    """How a pod reaches the API server (for its service-account kubeconfig)."""

    server: str
    ca_file: str


def resolve(
    kube: Kube,
    pod: Obj,
    image: LocalImage,
    *,
    root: Path,
    cluster: Cluster,
) -> ProcessSpec:
    """The local process of the pod's first container, its volumes materialised under ``root``."""
    meta, spec = pod["metadata"], pod["spec"]
    container = spec["containers"][0]
    ns = meta["namespace"]
    volumes = _volumes(kube, ns, spec.get("volumes") or [], root / "volumes")
    mounts = _mounts(container.get("volumeMounts") or [], volumes)
    env = _env(kube, pod, container)
    files = {**image.paths, **mounts}  # a mount hides the image's files under it
    env = {k: _remap(_expand(v, env), files) for k, v in env.items()}
    if SA_PATH in mounts:  # a path of ours: never remapped (it may lie under a mount path)
        env.setdefault("KUBECONFIG", _kubeconfig(Path(mounts[SA_PATH]), root, cluster))
    base = {"HOSTNAME": meta["name"], "HOME": str(_home(root)), "LANG": "C.UTF-8"}
    full_env = {**base, **{k: _remap(v, files) for k, v in image.env.items()}, **env}
    argv = _argv(container, image, full_env, files)
    cwd = _remap(container.get("workingDir") or image.workdir, files)
    return ProcessSpec(tuple(argv), full_env, cwd, mounts)


# -- volumes ---------------------------------------------------------------------------------------


def _volumes(kube: Kube, ns: str, volumes: Sequence[Obj], base: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for vol in volumes:
        path = base / vol["name"]
        path.mkdir(parents=True, exist_ok=True)
        if "emptyDir" in vol:
            pass
        elif "configMap" in vol:
            src = vol["configMap"]
            data = _read(kube, ns, "configmap", src["name"], bool(src.get("optional")))
            _write_files(path, data, src.get("items"))
        elif "secret" in vol:
            src = vol["secret"]
            raw = _read(kube, ns, "secret", src["secretName"], bool(src.get("optional")))
            _write_files(path, _decoded(raw), src.get("items"))
        else:
            kinds = sorted(k for k in vol if k != "name")
            raise UnsupportedVolume(f"volume {vol['name']}: {kinds} cannot be provided here")
        out[vol["name"]] = path
    return out


def _read(kube: Kube, ns: str, kind: str, name: str, optional: bool) -> dict[str, str]:
    fn = (
        kube.core.read_namespaced_config_map
        if kind == "configmap"
        else (kube.core.read_namespaced_secret)
    )
    try:
        obj = kube.call(fn, name, ns, what=f"read {kind} {ns}/{name}")
    except NotFound as exc:
        if optional:
            return {}
        raise ConfigPending(f"{kind} {name!r} not found") from exc
    return dict(obj.get("data") or {})


def _decoded(data: Mapping[str, str]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def _write_files(path: Path, data: Mapping[str, str], items: Sequence[Obj] | None) -> None:
    chosen: dict[str, str] = (
        {str(i["key"]): str(i.get("path") or i["key"]) for i in items}
        if items
        else {k: k for k in data}
    )
    for key, rel in chosen.items():
        if key not in data:
            raise ConfigPending(f"key {key!r} not found")
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)  # a retry after ConfigPending rewrites it
        target.write_text(data[key], encoding="utf-8")
        target.chmod(0o444)  # configMap and secret volumes are read-only


def _mounts(mounts: Sequence[Obj], volumes: Mapping[str, Path]) -> dict[str, str]:
    out = {}
    for m in mounts:
        local = volumes[m["name"]]
        target = local / m["subPath"] if m.get("subPath") else local
        out[m["mountPath"].rstrip("/") or "/"] = str(target)
    _nest(out)
    return out


def _nest(mounts: Mapping[str, str]) -> None:
    """A mount inside another (dagster.yaml by subPath into DAGSTER_HOME) appears inside the
    outer mount's directory, as it would in the container."""
    for inner, local in mounts.items():
        outers = [p for p in mounts if p != inner and inner.startswith(p.rstrip("/") + "/")]
        if not outers:
            continue
        outer = max(outers, key=len)
        link = Path(mounts[outer]) / inner[len(outer) :].lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(local)


def _home(root: Path) -> Path:
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    return home


def _kubeconfig(sa_dir: Path, root: Path, cluster: Cluster) -> str:
    token = (sa_dir / "token").read_text(encoding="utf-8").strip()
    ca = sa_dir / "ca.crt"
    ca_file = str(ca) if ca.is_file() else cluster.ca_file
    path = root / "serviceaccount.kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: pod\n"
        f"clusters:\n- name: c\n  cluster:\n    server: {cluster.server}\n"
        f"    certificate-authority: {ca_file}\n"
        "users:\n- name: sa\n  user:\n"
        f"    token: {token}\n"
        "contexts:\n- name: pod\n  context: {cluster: c, user: sa}\n",
        encoding="utf-8",
    )
    return str(path)


# -- environment -----------------------------------------------------------------------------------


def _env(kube: Kube, pod: Obj, container: Obj) -> dict[str, str]:
    ns = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        if "configMapRef" in src:
            ref = src["configMapRef"]
            data = _read(kube, ns, "configmap", ref["name"], bool(ref.get("optional")))
        else:
            ref = src["secretRef"]
            data = _decoded(_read(kube, ns, "secret", ref["name"], bool(ref.get("optional"))))
        # a key that is no environment variable name is skipped (the kubelet's 1.20 rule)
        env.update({prefix + k: v for k, v in data.items() if _NAME.match(prefix + k)})
    for var in container.get("env") or []:
        value = _value(kube, pod, var)
        if value is not None:
            env[var["name"]] = _expand(value, env)
    return env


def _value(kube: Kube, pod: Obj, var: Obj) -> str | None:
    if "valueFrom" not in var:
        return str(var.get("value", ""))
    ns, source = pod["metadata"]["namespace"], var["valueFrom"]
    for kind, key in (("secret", "secretKeyRef"), ("configmap", "configMapKeyRef")):
        if key in source:
            ref = source[key]
            optional = bool(ref.get("optional"))
            data = _read(kube, ns, kind, ref["name"], optional)
            if ref["key"] not in data:
                if optional:
                    return None
                raise ConfigPending(f"{kind} {ref['name']!r} has no key {ref['key']!r}")
            raw = data[ref["key"]]
            return base64.b64decode(raw).decode() if kind == "secret" else raw
    if "fieldRef" in source:
        return _field(pod, source["fieldRef"]["fieldPath"])
    raise UnsupportedVolume(f"env {var['name']}: valueFrom {sorted(source)} is not supported")


def _field(pod: Obj, path: str) -> str:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    fields = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP") or "10.0.0.1",
        "status.hostIP": status.get("hostIP") or "127.0.0.1",
    }
    return str(fields.get(path) or "")


def _expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: a known variable is replaced, anything else kept."""
    return _REF.sub(lambda m: env.get(m.group(1), m.group(0)), text)


def _argv(
    container: Obj, image: LocalImage, env: Mapping[str, str], files: Mapping[str, str]
) -> list[str]:
    """The command line with its container paths remapped, then the program looked up on the
    (already local) PATH: a program found there is a local path and is never remapped again
    (a repository under /tmp is not the pod's /tmp mount)."""
    command, args = container.get("command"), container.get("args")
    if command:
        argv = [*command, *(args or [])]
    else:
        argv = [*image.entrypoint, *(args if args is not None else image.cmd)]
    if not argv:
        raise UnsupportedVolume("the container has no command, the image no entrypoint or cmd")
    argv = [_remap(_expand(a, env), files) for a in argv]
    if "/" not in argv[0]:  # the runtime looks the program up on the container's PATH
        for directory in env.get("PATH", "").split(os.pathsep):
            candidate = Path(directory) / argv[0]
            if directory and os.access(candidate, os.X_OK):
                argv[0] = str(candidate)
                break
    return argv


def _remap(text: str, mounts: Mapping[str, str]) -> str:
    for path in sorted(mounts, key=len, reverse=True):
        if text == path or text.startswith(path.rstrip("/") + "/"):
            return mounts[path] + text[len(path) :]
    return text
