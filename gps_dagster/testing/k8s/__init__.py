"""Fakes of what cannot run on this machine, for a real control plane (tests, demo, benchmark).

Test support, not the product (``gps_dagster.testing``): not in the wheel nor the image.

There is no kubelet, no NVIDIA device plugin, no KAI scheduler and no LeaderWorkerSet controller
here; everything else is the real Kubernetes 1.20 control plane. So the fakes are small, named
as fakes, and act only through the API like the real components:

* ``nodesim.NodeSimulator`` — GPU Nodes with allocatable ``nvidia.com/gpu`` and per-GPU UUIDs,
  Lease heartbeats, the kubelet's pod lifecycle (Running, Ready after a start delay, deletion
  after the grace period) and the device plugin's allocations, which reach the pods only through
  the node agent's write path fed by a fake PodResources source (``podresources``); plus a
  stand-in for the KAI binder of reservation-bound pods (with KAI's reservation pods for GPU
  sharing);
* ``lws.LwsController`` — the LeaderWorkerSet controller's pod groups and status;
* ``settle.settle`` — wait until the controllers have reacted (tests run on a virtual clock);
* ``pools.ClusterPool`` — a pool file (``domain.pool.PoolSpec``) laid out on the cluster.
"""
