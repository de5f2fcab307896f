"""hami's DRA kubelet plugin for NVIDIA GPUs, wire-compatible with HAMi's k8s-dra-driver (``hami dra-plugin``).

Pure parts: :mod:`.slices` (the ResourceSlice this node publishes), :mod:`.claims` (what a claim's allocation
means for its containers, and the CDI spec that says so). I/O: :mod:`.checkpoint` (the prepared claims on disk),
:mod:`.state` (prepare and unprepare), :mod:`.draapi` (the kubelet gRPC stubs), :mod:`.plugin` (registration,
the DRAPlugin service, publishing and health).
"""
