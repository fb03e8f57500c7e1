"""The Pod Security Standards' *restricted* profile, as checks over a pod spec (test support).

Kubernetes 1.20 (the test control plane) has no Pod Security Admission (GA in 1.25), so the
tests evaluate every pod spec the chart renders, the run launcher builds and the adapter creates
against the profile's controls, written from the standard itself:
https://kubernetes.io/docs/concepts/security/pod-security-standards/ (Baseline, then Restricted;
"latest" version). Each violation names the field path and the control, like PSA's own message.
Not modelled (none of our specs set them, and a spec that did is flagged by the allow-lists):
Windows ``hostProcess`` beyond the flag, AppArmor annotations' profile names.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t"}
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
"""The only volume types of the restricted profile (besides the volume's name)."""


def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(spec.get(kind) or []):
            yield f"spec.{kind}[{i}]", c


def _seccomp(ctx: Mapping[str, Any] | None) -> str | None:
    return ((ctx or {}).get("seccompProfile") or {}).get("type")


def baseline(spec: Mapping[str, Any]) -> list[str]:
    out = []
    pod = spec.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            out.append(f"spec.{field}: host namespaces must not be shared")
    if (pod.get("windowsOptions") or {}).get("hostProcess"):
        out.append("spec.securityContext.windowsOptions.hostProcess: must not be true")
    if _seccomp(pod) == "Unconfined":
        out.append("spec.securityContext.seccompProfile.type: must not be Unconfined")
    if (pod.get("seLinuxOptions") or {}).get("type", "") not in SELINUX_TYPES:
        out.append("spec.securityContext.seLinuxOptions.type: not an allowed type")
    for s in pod.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append(f"spec.securityContext.sysctls: {s.get('name')} is not a safe sysctl")
    for i, v in enumerate(spec.get("volumes") or []):
        if "hostPath" in v:
            out.append(f"spec.volumes[{i}].hostPath: hostPath volumes are forbidden")
    for path, c in _containers(spec):
        ctx = c.get("securityContext") or {}
        if ctx.get("privileged"):
            out.append(f"{path}.securityContext.privileged: must not be true")
        if (ctx.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{path}.securityContext.windowsOptions.hostProcess: must not be true")
        added = set((ctx.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            out.append(f"{path}.securityContext.capabilities.add: {sorted(added)} beyond baseline")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append(f"{path}.ports[].hostPort: host ports are forbidden")
        if _seccomp(ctx) == "Unconfined":
            out.append(f"{path}.securityContext.seccompProfile.type: must not be Unconfined")
        if ctx.get("procMount", "Default") != "Default":
            out.append(f"{path}.securityContext.procMount: must be Default")
        if (ctx.get("seLinuxOptions") or {}).get("type", "") not in SELINUX_TYPES:
            out.append(f"{path}.securityContext.seLinuxOptions.type: not an allowed type")
    return out


def restricted(spec: Mapping[str, Any]) -> list[str]:
    """Every violation of the restricted profile (baseline included); empty = admitted."""
    out = baseline(spec)
    pod = spec.get("securityContext") or {}
    for i, v in enumerate(spec.get("volumes") or []):
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"spec.volumes[{i}]: {sorted(kinds - RESTRICTED_VOLUMES)} not allowed")
    if pod.get("runAsUser") == 0:
        out.append("spec.securityContext.runAsUser: must not be 0")
    for path, c in _containers(spec):
        ctx = c.get("securityContext") or {}
        if ctx.get("allowPrivilegeEscalation") is not False:
            out.append(f"{path}.securityContext.allowPrivilegeEscalation: must be false")
        non_root = ctx.get("runAsNonRoot", pod.get("runAsNonRoot"))
        if non_root is not True:
            out.append(f"{path}.securityContext.runAsNonRoot: must be true (pod or container)")
        if ctx.get("runAsUser") == 0:
            out.append(f"{path}.securityContext.runAsUser: must not be 0")
        if (_seccomp(ctx) or _seccomp(pod)) not in ("RuntimeDefault", "Localhost"):
            out.append(
                f"{path}.securityContext.seccompProfile.type: must be RuntimeDefault or "
                "Localhost (pod or container)"
            )
        caps = ctx.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{path}.securityContext.capabilities.drop: must include ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{path}.securityContext.capabilities.add: only NET_BIND_SERVICE")
    return out
